"""`rackform fabric check SITE`: do switches and hosts agree on lossless RoCE, link by link?

`add_arguments(parser)` fills the parser of `rackform fabric check`; `run(args)` runs it.
Exit status: 0 every link agrees, 1 mismatches found (or a device could not be read),
2 bad input (the design, printed as `file:line: key: message`, or a bad option).

Where live values come from: the site's lab when it is up on this machine (its SSH key
and known_hosts), else the devices at their management addresses with `--live` (SSH as
the inventory's `ansible_user` or `--user`, `--private-key` or $ANSIBLE_PRIVATE_KEY_FILE;
Onyx over netmiko with $RACKFORM_SWITCH_PASSWORD). `--design-only` reads no device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rackform.fabric.check import FabricReport, check_fabric
from rackform.fabric.check_report import json_report, text_report
from rackform.fabric.live import LiveError
from rackform.fabric.live_report import live_fabric_report
from rackform.model.loader import load_site
from rackform.model.site import Site
from rackform.model.source import BadInput

EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT = 0, 1, 2
HELP = ("Check that both ends of every fabric link agree on lossless RoCE (PFC priority, trust, "
        "DSCP -> priority -> traffic class, CNP priority, ECN, MTU, speed) in the design and, when "
        "the lab or the devices are reachable, live, with LLDP neighbours against the cabling plan.")


class BadOption(ValueError):
    """A command-line value that cannot be used; the message says which and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--design-only", action="store_true",
                        help="compare the design's link ends only; read no device")
    source.add_argument("--live", action="store_true",
                        help="read the devices at their management addresses (real hardware) when no lab is up")
    parser.add_argument("--private-key", type=Path, metavar="PATH",
                        help="SSH key for --live (default: $ANSIBLE_PRIVATE_KEY_FILE, else SSH's own); an Onyx "
                             "password comes from $RACKFORM_SWITCH_PASSWORD (or the file $RACKFORM_SWITCH_PASSWORD_FILE "
                             "names), never the command line")
    parser.add_argument("--user",
                        help="login name for --live and Onyx switches, instead of the inventory's ansible_user")
    parser.add_argument("--endpoint", action="append", default=[], metavar="DEVICE=HOST[:PORT]",
                        help="reach a device here instead of its management address (a tunnel, an emulator)")


def run(args: argparse.Namespace) -> int:
    try:
        endpoints = parse_endpoints(args.endpoint)
        site = load_site(args.site, args.root)
    except BadOption as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BadInput as error:
        if args.json:
            errors = [{"file": e.loc.path, "line": e.loc.line, "key": e.key, "message": e.message}
                      for e in error.errors]
            print(json.dumps({"site": args.site, "ok": False, "errors": errors}, indent=2))
        for problem in error.errors:
            print(problem, file=sys.stderr)
        print(f"rackform: {args.site}: {len(error.errors)} error(s) in the input; nothing was checked",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        report = _check(site, args, endpoints)
    except LiveError as error:  # e.g. $RACKFORM_SWITCH_PASSWORD_FILE names a file that cannot be read
        print(f"rackform: {args.site}: {error}; nothing was checked", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(json_report(report), indent=2))
    else:
        print(text_report(report))
    return EXIT_OK if report.ok else EXIT_MISMATCH


def parse_endpoints(values: list[str]) -> dict[str, tuple[str, int]]:
    """`DEVICE=HOST[:PORT]` options -> device -> (host, port)."""
    endpoints = {}
    for value in values:
        device, separator, where = value.partition("=")
        host, _, port = where.partition(":")
        if not separator or not device or not host or (port and not port.isdigit()):
            raise BadOption(f"--endpoint {value!r}: expected DEVICE=HOST[:PORT]")
        endpoints[device] = (host, int(port) if port else 22)
    return endpoints


def _check(site: Site, args: argparse.Namespace, endpoints: dict[str, tuple[str, int]]) -> FabricReport:
    if args.design_only:
        return check_fabric(site)
    return live_fabric_report(site, user=args.user, private_key=args.private_key, live=args.live,
                              endpoints=endpoints)
