"""`rackform fabric apply SITE`: push each managed switch's designed configuration.

For every switch (or those named with --switch): render its configuration, read what
it runs, print the difference, then apply it and save it (--dry-run stops after the
difference). Cumulus switches get files over SSH, Onyx switches CLI lines over
netmiko; `rackform deploy`'s fabric stage configures Cumulus switches through Ansible
with the same files, so either path finds nothing to do after the other.

Exit codes: 0 every switch runs its design (or would, with --dry-run: differences are
shown, not applied), 1 a switch could not be reached or configured, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.fabric.context import connection_for, credentials_from_environment, switch_targets
from rackform.fabric.dispatch import connect
from rackform.fabric.driver import ApplyFailed, FabricError
from rackform.fabric.sync import sync
from rackform.pipeline import BadInput, DesignRejected, load_and_check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", help="site name (topologies/sites/<site>.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repo root holding topologies/ and inventories/")
    parser.add_argument("--switch", action="append", metavar="NAME", help="only this switch (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="show the differences, change nothing")
    parser.add_argument("--private-key", type=Path, metavar="PATH",
                        help="SSH key (default: $ANSIBLE_PRIVATE_KEY_FILE, else the site's lab key when its lab is "
                             "up); a password comes from $RACKFORM_SWITCH_PASSWORD, never the command line")
    parser.add_argument("--user", help="login name, instead of the inventory's ansible_user")
    parser.add_argument("--endpoint", action="append", default=[], metavar="SWITCH=HOST[:PORT]",
                        help="reach a switch here instead of its management address (a tunnel, an emulator)")


def _endpoints(values: list[str]) -> dict[str, str]:
    endpoints = {}
    for value in values:
        name, separator, where = value.partition("=")
        if not separator or not where:
            raise FabricError(f"--endpoint {value!r}: expected SWITCH=HOST[:PORT]")
        endpoints[name] = where
    return endpoints


def run(args: argparse.Namespace) -> int:
    try:
        site, _warnings = load_and_check(args.site, args.root)
        targets = switch_targets(site, args.switch)
        endpoints = _endpoints(args.endpoint)
    except BadInput as error:
        print(error, file=sys.stderr)  # file:line: key: message, one per line
        return 2
    except DesignRejected as error:
        print(f"rackform: {error}", file=sys.stderr)
        for finding in error.findings:
            if finding.severity == "error":
                print(finding, file=sys.stderr)
        return 2
    except FabricError as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 2
    credentials = credentials_from_environment(site.name, args.private_key, args.user)
    failed = []
    for name, target in targets.items():
        try:
            with connect(target.os, connection_for(target, credentials, endpoints.get(name)), name) as driver:
                sync(driver, driver.render(target.context), dry_run=args.dry_run)
        except ApplyFailed as error:
            print(f"rackform: {error}", file=sys.stderr)
            failed.append(name)
        except FabricError as error:
            print(f"rackform: {error}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"rackform: {site.name}: {len(failed)} switch(es) not configured: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rackform fabric apply", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
