"""`rackform rollout`: deploy the repo's sites wave by wave (topologies/rollout.yaml; docs/fleet.md).

Exit 0 every site passed (or had nothing to do), 1 a site failed its deploy or a gate
(the site, stage and hosts are named; later waves did not start), 2 bad input,
128 + the signal's number when interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = ("Deploy the sites of topologies/rollout.yaml wave by wave: the stages plan says changed, then each "
        "site's gates; stop the line on a failure (--resume continues).")
REPORT_FILE = Path("build") / "rollout-report.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--file", type=Path, metavar="PATH", help="the rollout file (default: ROOT/topologies/rollout.yaml)")
    parser.add_argument("--converge", action="store_true", help="run every stage of every site, not only those plan says changed")
    parser.add_argument("--resume", action="store_true", help="start at the first wave that did not pass last time")
    parser.add_argument("--dry-run", action="store_true", help="print the plan of every site in wave order; change nothing")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout (also written to "
                        f"ROOT/{REPORT_FILE})")


def run(args: argparse.Namespace) -> int:
    from rackform.fleet.rollout import run_rollout
    from rackform.fleet.rollout_file import load_rollout
    from rackform.model.source import BadInput
    from rackform.run import interrupt
    from rackform.run.sitelock import SiteLocked

    try:
        rollout = load_rollout(args.root, args.file)
    except BadInput as error:
        for problem in error.errors:
            print(problem, file=sys.stderr)
        print("rackform rollout: the rollout file has errors; nothing was deployed", file=sys.stderr)
        return 2
    if args.dry_run:
        return _dry_run(rollout, args.root)
    out = sys.stderr if args.json else sys.stdout
    try:
        report = run_rollout(rollout, args.root, converge=args.converge, resume=args.resume, stream=out)
    except SiteLocked as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 1
    path = args.root / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    print("\n".join(summary_lines(report)), file=out)
    print(f"rollout report: {path}", file=out)
    if interrupt.cancel_requested():
        return interrupt.exit_code()
    if report.ok:
        return 0
    failed = next((site for site in report.sites if site.site == report.stopped_at), None)
    if failed is not None:
        hosts = f" on {', '.join(failed.failed_hosts)}" if failed.failed_hosts else ""
        where = f" in {failed.failed_stage}" if failed.failed_stage else ""
        detail = f" ({failed.detail})" if failed.detail else ""
        print(f"rackform: rollout stopped: {failed.site} {failed.result}{where}{hosts}{detail}; "
              f"fix it and run `rackform rollout --resume`", file=sys.stderr)
    return 1


def _dry_run(rollout, root: Path) -> int:
    from rackform.commands.plan import plan_lines
    from rackform.model.source import BadInput
    from rackform.pipeline import DesignRejected
    from rackform.run.plan import plan_site

    bad = 0
    for wave in rollout.waves:
        print(f"wave {wave.name} ({wave.parallel} at once; gates: {', '.join(wave.gates) or 'none'})")
        for site in wave.sites:
            try:
                print("\n".join("  " + line for line in plan_lines(plan_site(site, root))))
            except (BadInput, DesignRejected) as error:
                bad += 1
                for line in getattr(error, "errors", None) or getattr(error, "findings", []):
                    print(line, file=sys.stderr)
    return 2 if bad else 0


def summary_lines(report) -> list[str]:
    from rackform.run.summary import table

    rows = [["site", "wave", "stages run", "changes", "time", "result"]]
    for site in report.sites:
        result = site.result + (f": {site.failed_stage}" if site.failed_stage else "")
        result += f" ({', '.join(site.failed_hosts)})" if site.failed_hosts else ""
        result += f" - {site.detail}" if site.detail and site.result not in ("failed",) else ""
        rows.append([site.site, site.wave, ", ".join(site.stages) or "-", str(site.changed),
                     f"{site.seconds:.1f} s", result])
    verdict = ("rollout: ok" if report.ok else f"rollout: STOPPED at {report.stopped_at}") + f" in {report.seconds:.1f} s"
    if report.ok and not any(site.stages for site in report.sites):
        verdict += ": nothing changed"
    return ["", "rollout summary", *table(rows, right_aligned={3, 4}), "", verdict]
