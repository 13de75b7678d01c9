"""`rackform deploy SITE`: check, render build/SITE/ and run its stages with live progress.

The stages run through `rackform.run.stages.run_stages`, the function the Pulumi
`Playbook` provider calls too. Exit 0 when every host is ok, 1 when a host failed
(named) or a signal cut the run short (128 + the signal's number), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.pipeline import STAGE_NAMES

HELP = ("Check a site, render build/SITE/ and run its stages in order (validate.yml first). "
        "Exit 0 when every host is ok, 1 when a host failed (named), 2 for bad input.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--check", action="store_true",
                        help="Ansible check mode: report what would change, change nothing "
                             "(verify, which checks the live state, runs only with --stage verify)")
    parser.add_argument("--diff", action="store_true", help="show the file and configuration differences Ansible makes")
    parser.add_argument(
        "--stage", dest="stages", metavar="STAGE", nargs="+", action="extend", choices=STAGE_NAMES,
        help=f"run only these stages, still in pipeline order ({', '.join(STAGE_NAMES)}); repeatable",
    )
    parser.add_argument("--limit", metavar="HOSTS", help="Ansible host pattern: run on these hosts only")
    parser.add_argument(
        "--private-key", type=Path, metavar="PATH",
        help="SSH key Ansible connects with (default: $ANSIBLE_PRIVATE_KEY_FILE, else the lab's key when "
             "`rackform lab up SITE` is up on this machine, else SSH's own default)",
    )
    parser.add_argument(
        "--prune-tenant", dest="prune_tenants", metavar="TENANT", action="append", default=[],
        help="delete this tenant's namespace (and everything in it) and its queue: only a tenant removed from "
             "topologies/platform/SITE.yaml, which the platform keeps until told (`rackform plan` lists them); repeatable",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="a line for every task result, ok and skipped too")


def run(args: argparse.Namespace) -> int:
    from rackform.run import interrupt
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.progress import ProgressDisplay
    from rackform.run.retained import PruneRefused
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_stages
    from rackform.run.summary import summary_lines

    try:
        site_run = run_stages(
            args.site, args.root, args.stages, limit=args.limit, check=args.check, diff=args.diff,
            progress=ProgressDisplay(sys.stdout, verbose=args.verbose), private_key=args.private_key,
            say=print, prune_tenants=args.prune_tenants,
        )
    except PruneRefused as error:
        print(f"rackform: {args.site}: {error}", file=sys.stderr)
        return 2
    except (StageEnvironmentError, SiteLocked) as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 1
    for warning in site_run.warnings:
        print(warning, file=sys.stderr)
    report = site_run.report
    print()
    print("\n".join(summary_lines(report)))
    if report.interrupted is not None:
        print(f"rackform: {report.site}: {report.interrupted}; nothing more was started", file=sys.stderr)
        return interrupt.exit_code()
    if report.ok:
        return 0
    failed = report.failed_hosts
    if failed:
        print(f"rackform: {report.site}: {len(failed)} host(s) failed: {', '.join(sorted(failed))}", file=sys.stderr)
    else:
        print(f"rackform: {report.site}: the deployment stopped; see the failures above", file=sys.stderr)
    return 1
