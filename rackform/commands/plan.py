"""`rackform plan SITE... | --all`: per site and stage, what a deploy would do now.

Compares what would be rendered now with what was last applied (state/<site>.json,
recorded by `rackform deploy` and the Pulumi `Playbook` alike); touches nothing.
Exit 0 (whatever the plan says), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "Show, per site and stage, what a deploy would run now (changed inputs named); touches nothing."
STATUS_MARK = {"new": "+", "changed": "~", "pending": "!", "unchanged": "=", "blocked": "x"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sites", metavar="SITE", nargs="*", help="site names (topologies/sites/SITE.yaml)")
    parser.add_argument("--all", action="store_true", help="every site in topologies/sites/")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--diff", action="store_true",
                        help="unified diffs of the changed files (against build/SITE/, the last render here)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON on stdout")


def site_names(root: Path, names: list[str], every: bool) -> list[str]:
    """The sites named, or with --all every topologies/sites/*.yaml; ValueError when neither or both."""
    if every and names:
        raise ValueError("give site names or --all, not both")
    if every:
        return sorted(path.stem for path in (Path(root) / "topologies" / "sites").glob("*.yaml"))
    if not names:
        raise ValueError("name at least one site, or --all")
    return names


def run(args: argparse.Namespace) -> int:
    try:
        names = site_names(args.root, args.sites, args.all)
    except ValueError as error:
        print(f"rackform plan: {error}", file=sys.stderr)
        return 2
    from rackform.run.plan import plan_sites

    plans, bad = [], 0
    for plan, problems in plan_sites(names, args.root, keep_render=args.diff):
        for line in problems:
            print(line, file=sys.stderr)
        if plan is None:
            bad += 1
        else:
            plans.append(plan)
    if args.json:
        print(json.dumps({"sites": [plan.as_dict() for plan in plans]}, indent=2))
    else:
        from rackform.run.plan import file_diffs

        for plan in plans:
            print("\n".join(plan_lines(plan)))
            if args.diff:
                print("\n".join(file_diffs(plan, [stage for stage in plan.stages if stage.runs])))
        print(summary_line(plans))
    return 2 if bad else 0


def plan_lines(plan) -> list[str]:
    width = max((len(stage.stage) for stage in plan.stages), default=0)
    lines = [f"{plan.site}: " + (f"would run {', '.join(plan.to_run)}" if plan.to_run else "nothing to do")]
    for stage in plan.stages:
        lines.append(f"  {STATUS_MARK[stage.status]} {stage.stage.ljust(width)}  {stage.status:<9}  {stage.reason}")
        lines += [f"      {change.change:<8} {change.path}" for change in stage.files]
    for tenant in plan.retained_tenants:
        lines.append(f"  - tenant {tenant}: removed from the design; its namespace (and everything in it) stays on "
                     f"the cluster until `rackform deploy {plan.site} --stage platform --prune-tenant {tenant}`")
    return lines


def summary_line(plans) -> str:
    busy = [plan for plan in plans if plan.to_run]
    stages = sum(len(plan.to_run) for plan in busy)
    if not busy:
        return f"plan: {len(plans)} site(s), nothing to do"
    return f"plan: {stages} stage(s) to run in {len(busy)} of {len(plans)} site(s)"
