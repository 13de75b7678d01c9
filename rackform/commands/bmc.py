"""`rackform bmc status SITE` and `rackform bmc power SITE ACTION`: a site's BMCs, all at once.

status: one row per node (power state, watts, firmware, FRU serial, weak logins that still get
in, reachable or why not), then each rack's measured power against its budget. Exit 0 when
every BMC answered, no rack is over budget, no FRU serial contradicts the inventory and no BMC
lets cipher suite 0 or IPMI 1.5 in (unless the site's provisioning.bmc_exceptions accepts that
for its model); 1 otherwise; 2 for bad input.

power: on / off / soft / cycle / reset (or `status`) on every node, or on `--nodes`, each
change confirmed by reading the state back. Exit 0 when every node did it, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.ipmi.cli_options import add_login_arguments, credential_source, fleet_from
from rackform.ipmi.client import POWER_ACTIONS
from rackform.ipmi.credentials import CredentialsUnavailable
from rackform.ipmi.fleet import NodeResult
from rackform.ipmi.status import (WEAK_LOGIN_NAMES, NodeStatus, RackPower, WeakLoginVerdict, rack_of_hosts, rack_power,
                                  read_node_status, serial_mismatch, site_targets, weak_login_verdict)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="bmc_command", required=True, metavar="ACTION")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
        sub.add_argument("--root", type=Path, default=Path("."),
                         help="repository root holding topologies/ and inventories/ (default: .)")
        return sub

    status = add("status", "One row per node: power, watts, firmware, FRU serial, weak logins (cipher suite 0, "
                           "IPMI 1.5) that still get in, reachable or why not; then each rack's measured power "
                           "against its budget. Exit 1 if a BMC failed, a rack is over budget, a BMC's serial "
                           "contradicts the inventory or a weak login gets in that the site has no exception for.")
    add_login_arguments(status, factory_default=False)
    status.set_defaults(bmc_run=run_status)

    power = add("power", "Power every node (or --nodes) on, off, soft, cycle or reset, confirmed by read-back.")
    power.add_argument("action", choices=("status", *POWER_ACTIONS), help="what to do")
    power.add_argument("--nodes", nargs="+", metavar="NODE", help="only these nodes (default: every node with a BMC)")
    add_login_arguments(power, factory_default=False)
    power.set_defaults(bmc_run=run_power)


def run(args: argparse.Namespace) -> int:
    from rackform.model.source import BadInput

    try:
        return args.bmc_run(args)
    except BadInput as error:
        for problem in error.errors:
            print(problem, file=sys.stderr)
        print(f"rackform: {args.site}: {len(error.errors)} error(s) in the input; no BMC was contacted",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    except CredentialsUnavailable as error:
        print(f"rackform: {error} (--factory, or --password-file)", file=sys.stderr)
        return EXIT_BAD_INPUT


# --- status ---------------------------------------------------------------------------------------


def run_status(args: argparse.Namespace) -> int:
    from rackform.model.loader import load_site

    site = load_site(args.site, args.root)
    fleet = fleet_from(args, credential_source(args, site.name, args.root))
    targets = site_targets(site)
    results = fleet.run(targets, read_node_status)
    racks = rack_power(site, results)
    mismatches = {result.node: why for result in results if (why := serial_mismatch(site, result))}
    weak = {result.node: verdict for result in results if (verdict := weak_login_verdict(site, result))}
    insecure = [node for node, verdict in weak.items() if verdict.open]
    print(format_node_table(results, rack_of_hosts(site), mismatches, weak))
    print()
    print(format_rack_table(racks))
    failed = [result for result in results if not result.ok]
    over = [rack for rack in racks if rack.over_budget]
    print(f"\n{len(results) - len(failed)}/{len(results)} BMCs answered"
          + (f"; {len(over)} rack(s) over budget: {', '.join(r.rack for r in over)}" if over else "")
          + (f"; {len(mismatches)} serial mismatch(es): {', '.join(mismatches)}" if mismatches else "")
          + (f"; {len(insecure)} BMC(s) let a weak login in: {', '.join(insecure)}" if insecure else ""))
    return EXIT_FAILED if failed or over or mismatches or insecure else EXIT_OK


def format_node_table(results: list[NodeResult[NodeStatus]], racks: dict[str, str],
                      mismatches: dict[str, str] | None = None,
                      weak: dict[str, WeakLoginVerdict] | None = None) -> str:
    rows = [("NODE", "RACK", "BMC", "POWER", "WATTS", "FIRMWARE", "SERIAL", "WEAK_LOGINS", "STATUS")]
    for result in results:
        status = result.value
        if result.ok:
            verdict = (weak or {}).get(result.node)
            rows.append((result.node, racks.get(result.node, "-"), result.address, status.power,
                         _watts(status.power_draw_w), status.firmware or "-", status.inventory.serial or "-",
                         ", ".join(WEAK_LOGIN_NAMES[w] for w in status.weak_logins) or "none",
                         _node_verdict((mismatches or {}).get(result.node), verdict)))
        else:
            rows.append((result.node, racks.get(result.node, "-"), result.address, "-", "-", "-", "-", "-",
                         result.describe()))
    return _table(rows)


def _node_verdict(mismatch: str | None, weak: WeakLoginVerdict | None) -> str:
    problems = [mismatch] if mismatch else []
    if weak is not None and weak.open:
        problems.append(" and ".join(WEAK_LOGIN_NAMES[w] for w in weak.open) + " still get(s) in: any password "
                        "works with suite 0, IPMI 1.5 logins are MD5 or plain text (no site exception for this model)")
    if weak is not None and weak.accepted:
        reasons = sorted(set(weak.accepted.values()))
        problems.append(("ok, " if not problems else "") + "accepted by the site: " + "; ".join(reasons))
    return "; ".join(problems) or "ok"


def format_rack_table(racks: list[RackPower]) -> str:
    rows = [("RACK", "MEASURED_W", "BUDGET_W", "USE", "NODES_MEASURED", "STATUS")]
    for rack in racks:
        verdict = "OVER BUDGET" if rack.over_budget else "ok"
        if rack.nodes_measured < rack.nodes_with_bmc:
            verdict += f" (incomplete: {rack.nodes_with_bmc - rack.nodes_measured} node(s) without a reading)"
        rows.append((rack.rack, _watts(rack.measured_w), f"{rack.budget_w:,}", f"{rack.share:.0%}",
                     f"{rack.nodes_measured}/{rack.nodes_with_bmc}", verdict))
    return _table(rows)


# --- power ----------------------------------------------------------------------------------------


def run_power(args: argparse.Namespace) -> int:
    from rackform.model.loader import load_site

    site = load_site(args.site, args.root)
    targets = site_targets(site)
    if args.nodes:
        known = {target.node for target in targets}
        unknown = [node for node in args.nodes if node not in known]
        if unknown:
            print(f"rackform: {args.site}: no BMC known for {', '.join(unknown)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        wanted = set(args.nodes)
        targets = [target for target in targets if target.node in wanted]
    fleet = fleet_from(args, credential_source(args, site.name, args.root))
    if args.action == "status":
        results = fleet.power_status(targets)
        rows = [(r.node, r.address, r.value if r.ok else "-", r.describe()) for r in results]
    else:
        results = fleet.power(targets, args.action)
        rows = [(r.node, r.address, _change(r), r.describe()) for r in results]
    print(_table([("NODE", "BMC", "POWER", "STATUS"), *rows]))
    failed = sum(not r.ok for r in results)
    print(f"\n{len(results) - failed}/{len(results)} nodes ok")
    return EXIT_FAILED if failed else EXIT_OK


def _change(result: NodeResult) -> str:
    if not result.ok:
        return "-"
    change = result.value
    return f"{change.before} -> {change.after}" if change.changed else f"{change.after} (unchanged)"


# --- formatting -----------------------------------------------------------------------------------


def _watts(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(row[column])) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)

