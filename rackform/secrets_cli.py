"""`rackform secrets SITE`: create, rotate and locate a site's secrets (rackform.secrets): the
BMC passwords, and the keys the cluster's API servers encrypt Secrets with.

Prints where the vault is and the two environment variables the provision and kubernetes
playbooks run with; it never prints a password or a key (a key's name only).
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
    action.add_argument("--rotate-encryption-key", action="store_true",
                        help="a new key for the cluster's Secrets at rest, used first; the kubernetes stage rolls it "
                             "out and rewrites every Secret with it (the old keys stay, for reading)")
    action.add_argument("--forget-old-encryption-keys", action="store_true",
                        help="keep only the newest encryption key (once the kubernetes stage has run with it)")


def run(args: argparse.Namespace) -> int:
    site = load_site(args.site, args.root)  # BadInput goes to the CLI's file:line reporting
    if (args.rotate_encryption_key or args.forget_old_encryption_keys) and site.kubernetes is None:
        print(f"rackform: site {site.name} has no Kubernetes: it has no encryption keys", file=sys.stderr)
        return EXIT_FAILED
    try:
        vault = SiteVault(site.name)
        added = vault.ensure(bmc_hosts(site))
        first_key = vault.ensure_encryption_key() if site.kubernetes is not None else None
        if first_key is not None:
            print(f"new encryption key {first_key.name} for the cluster's Secrets at rest")
        if args.rotate_encryption_key:
            made = vault.rotate_encryption_key()
            print(f"new encryption key {made.name}, first of {len(vault.encryption_keys())}: run the kubernetes stage "
                  f"(`rackform deploy {site.name} --stage kubernetes`) to roll it out and rewrite every Secret "
                  f"with it, then `rackform secrets {site.name} --forget-old-encryption-keys` and the stage again")
        elif args.forget_old_encryption_keys:
            dropped = vault.forget_old_encryption_keys()
            print(f"forgot the encryption key(s) {', '.join(dropped) or 'none (only one)'}; run the kubernetes stage "
                  f"to take them off the API servers")
        elif args.rotate or args.rotate_all:
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
