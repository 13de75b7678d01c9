"""`rackform validate SITE... | --all`: load sites and run every preflight check; touch nothing.

With one site, its summary (racks, power, hosts) and warnings. With several (or --all),
each site's result, then the checks across sites (rackform.fleet.cross_site): unique
site names and, for the `routed:` groups of topologies/rollout.yaml, no shared prefixes
or addresses. Exit 0 all valid, 2 a design error anywhere (file:line: key: message).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "Load sites and run every preflight check, across sites too; touch nothing."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sites", metavar="SITE", nargs="*", help="site names (topologies/sites/SITE.yaml)")
    parser.add_argument("--all", action="store_true", help="every site in topologies/sites/, and the checks across them")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--show-origin", action="store_true",
                        help="print every effective setting with the file:line that set it (site, profile, defaults)")


def run(args: argparse.Namespace) -> int:
    from rackform.commands.plan import site_names

    try:
        names = site_names(args.root, args.sites, args.all)
    except ValueError as error:
        print(f"rackform validate: {error}", file=sys.stderr)
        return 2
    if len(names) == 1 and not args.all:
        args.site = names[0]  # bad input is reported by the CLI's own handlers, as for every one-site command
        return _validate_one(args, names[0])
    return _validate_many(args, names)


def _validate_one(args: argparse.Namespace, name: str) -> int:
    from rackform.commands.report import findings_json, print_warnings
    from rackform.pipeline import load_and_check

    site, warnings = load_and_check(name, args.root)
    summary = site_summary(site)
    if args.json:
        print(json.dumps(findings_json(site.name, [], warnings, summary), indent=2))
        return 0
    print_warnings(warnings)
    if args.show_origin:
        from rackform.model.layers import origin_lines

        print("\n".join(origin_lines(site)))
    print(summary_text(site, summary))
    print(f"{site.name}: valid, {len(warnings)} warning(s)")
    return 0


def site_summary(site) -> dict:
    """Per rack: units used and power against its budget; the site's counts (the JSON `summary`)."""
    racks = []
    for rack in site.racks:
        used_u = sum(device.block.rack_units for device in rack.devices)
        power_w = sum(device.power_w(site.power_basis) for device in rack.devices)
        racks.append(
            {
                "rack": rack.name,
                "used_u": used_u,
                "height_u": rack.height_u,
                "power_w": power_w,
                "power_budget_w": rack.power_budget_w,
                "power_pct": round(100 * power_w / rack.power_budget_w, 1),
            }
        )
    return {
        "hosts": len(site.hosts),
        "switches": len(site.switches),
        "cables": len(site.cables),
        "gpus": sum((host.block.node.gpus.count if host.block.node.gpus else 0) for host in site.hosts.values()),
        "power_basis": site.power_basis,
        "racks": racks,
    }


def summary_text(site, summary: dict) -> str:
    lines = [f"{site.name}: {summary['hosts']} hosts ({summary['gpus']} GPUs), {summary['switches']} switches, "
             f"{summary['cables']} cables, {len(site.racks)} rack(s)"]
    for rack in summary["racks"]:
        lines.append(f"  rack {rack['rack']}: {rack['used_u']}/{rack['height_u']} U, "
                     f"{rack['power_w'] / 1000:.1f}/{rack['power_budget_w'] / 1000:.1f} kW "
                     f"({rack['power_pct']:.0f} %, {site.power_basis})")
    return "\n".join(lines)


def _validate_many(args: argparse.Namespace, names: list[str]) -> int:
    import contextlib
    import io

    from rackform.commands.report import findings_json, report_bad_input, report_rejected
    from rackform.fleet.cross_site import cross_site_findings
    from rackform.fleet.rollout_file import ROLLOUT_FILE, load_rollout
    from rackform.model.source import BadInput
    from rackform.pipeline import DesignRejected, load_and_check

    sites, results, bad = {}, [], 0
    for name in names:
        try:
            site, warnings = load_and_check(name, args.root)
        except (BadInput, DesignRejected) as error:
            bad += 1
            out = io.StringIO()
            report = report_bad_input if isinstance(error, BadInput) else report_rejected
            with contextlib.redirect_stdout(out):
                report(error, as_json=args.json, site=name)
            if args.json:
                results.append(json.loads(out.getvalue()))
            continue
        sites[name] = site
        results.append(findings_json(site.name, [], warnings))
        if not args.json:
            for warning in warnings:
                print(warning, file=sys.stderr)
            print(f"{site.name}: valid, {len(warnings)} warning(s)")
    routed: tuple = ()
    try:
        if (args.root / ROLLOUT_FILE).is_file():
            routed = load_rollout(args.root).routed
    except BadInput as error:
        bad += 1
        for problem in error.errors:
            print(problem, file=sys.stderr)
    across = cross_site_findings(sites, routed)
    for finding in across:
        print(finding, file=sys.stderr)
    if args.json:
        print(json.dumps({"sites": results, "across_sites": [f.as_dict() for f in across]}, indent=2))
    else:
        print(f"validate: {len(sites)} of {len(names)} site(s) valid, {len(across)} problem(s) across sites")
    return 2 if bad or across else 0
