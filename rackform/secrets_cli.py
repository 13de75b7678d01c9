"""`rackform secrets SITE`: create, rotate and locate a site's BMC passwords (rackform.secrets).

Prints where the vault is and the two environment variables the provision playbook
runs with; it never prints a password. The lead wires `add_arguments` and `run` into
rackform.cli as the `secrets` command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from rackform.model.loader import load_site
from rackform.secrets import SecretsError, SiteVault, bmc_hosts

EXIT_OK, EXIT_FAILED = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--rotate", nargs="+", metavar="HOST",
                        help="new random passwords for these servers' BMCs; the next provision run sets them")
    action.add_argument("--rotate-all", action="store_true", help="new random passwords for every BMC")
    action.add_argument("--forget-previous", nargs="+", metavar="HOST",
                        help="drop the previous passwords of these servers (once provision has set the new ones)")


def run(args: argparse.Namespace) -> int:
    site = load_site(args.site, args.root)  # BadInput goes to the CLI's file:line reporting
    try:
        vault = SiteVault(site.name)
        added = vault.ensure(bmc_hosts(site))
        if args.rotate or args.rotate_all:
            rotated = vault.rotate(bmc_hosts(site) if args.rotate_all else args.rotate)
            print(f"new passwords for {len(rotated)} BMC(s): {', '.join(rotated)}; run the provision stage to set them")
        elif args.forget_previous:
            forgotten = vault.forget_previous(args.forget_previous)
            print(f"forgot the previous passwords of {', '.join(forgotten) or 'no host'}")
    except SecretsError as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_FAILED
    if added:
        print(f"new random passwords for {len(added)} BMC(s)")
    print(f"# site vault of {site.name} (ansible-vault, readable by you alone):")
    for name, value in vault.runner_envvars().items():
        print(f"export {name}={shlex.quote(value)}")
    return EXIT_OK
