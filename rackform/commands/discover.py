"""`rackform discover SITE --oob RANGE`: enlist BMCs found on the out-of-band network.

Scans RANGE (inside the site's OOB network), logs in to each BMC the inventory does not
know yet with the factory login (or --user/--password-file), reads its serial, MAC and
firmware, and writes a new host_vars file per node plus a line under all.hosts in
hosts.yml; existing files and lines are never changed (rackform.ipmi.enlist says how new
nodes are named). `--dry-run` prints the plan and writes nothing.

Exit 0 when every new BMC was read (and written), 1 when one could not be, 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.ipmi import discovery, enlist
from rackform.ipmi.cli_options import add_login_arguments, credential_source, fleet_from
from rackform.ipmi.session import Timeouts

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--oob", required=True, metavar="RANGE",
                        help="addresses to scan, inside the site's OOB network: a.b.c.0/24, a.b.c.10-a.b.c.50 "
                             "or a.b.c.10-50")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written, write nothing")
    add_login_arguments(parser, factory_default=True)


def run(args: argparse.Namespace) -> int:
    from rackform.model.source import BadInput

    try:
        design = enlist.load_design(args.site, args.root)
        addresses = discovery.parse_range(args.oob, design.oob)
    except BadInput as error:
        for problem in error.errors:
            print(problem, file=sys.stderr)
        return EXIT_BAD_INPUT
    except discovery.RangeError as error:
        print(f"rackform: --oob: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    inventory_path = args.root / "inventories" / args.site
    inventory = enlist.read_inventory(inventory_path)

    answers = discovery.sweep(addresses, timeouts=Timeouts(reply_s=args.reply_timeout))
    unknown = sorted((a for a in answers if a not in inventory.bmc_addresses), key=_address_key)
    print(f"{len(answers)} BMC(s) answered in {args.oob}: {len(answers) - len(unknown)} known, {len(unknown)} new")
    refused = {address: discovery.refusal(answers[address]) for address in unknown}
    problems = [f"{address}: {error}" for address, error in refused.items() if error is not None]
    to_read = [address for address, error in refused.items() if error is None]

    fleet = fleet_from(args, credential_source(args, args.site, args.root))
    results = discovery.identify(fleet, to_read)
    problems += [f"{result.address}: {result.describe()}" for result in results if not result.ok]
    found = [result.value for result in results if result.ok]
    entries = enlist.plan_entries(design, inventory, found)
    _print_plan(entries, design, inventory)
    if entries and not args.dry_run:
        try:
            written = enlist.write_entries(inventory_path, entries)
        except (FileExistsError, ValueError) as error:
            print(f"rackform: {error}", file=sys.stderr)
            return EXIT_FAILED
        print(f"wrote {len(written)} host_vars file(s) under {inventory_path / 'host_vars'} and added them to "
              f"{inventory_path / 'hosts.yml'}")
    for problem in problems:
        print(f"not enlisted: {problem}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK


def _print_plan(entries: list[enlist.Entry], design: enlist.Design, inventory: enlist.Inventory) -> None:
    if not entries:
        print("nothing new to enlist")
        return
    pending = [name for name in design.server_hosts if name not in inventory.hosts]
    if entries[0].placed_in_design:
        print(f"paired with the {len(pending)} host(s) the design places but the inventory lacks "
              f"(design order <-> BMC address order); check against the rack:")
    elif pending:
        print(f"the design places {len(pending)} host(s) without inventory entries ({', '.join(pending)}) but "
              f"{len(entries)} new BMC(s) answered: named by address, for you to place")
    for entry in entries:
        facts = entry.facts
        print(f"  {entry.name}: bmc {facts.address}, mac {facts.bmc_mac or '-'}, serial {facts.serial or '-'}, "
              f"firmware {facts.firmware}, management {entry.management_address}")


def _address_key(address: str) -> tuple[int, ...]:
    return tuple(int(part) for part in address.split("."))
