"""`rackform fabric apply SITE`: bring the switches to their design through the fabric stage.

There is no second push path: this runs the fabric stage (fabric.yml: Cumulus switches
with files over SSH, Onyx switches with the onyx_switch role's netmiko module) through
`rackform.run.stages.run_stages`, the runner `rackform deploy` and the Pulumi program
use, on the switches only (Ansible's limit: `switches`, or the switches named with
--switch). First in check mode with --diff, whose differences are shown, then for real
(unless --dry-run). A switch that already runs its design is sent nothing and saved
nothing: both roles only push a difference.

Exit codes: 0 every switch runs its design (with --dry-run: the differences are shown,
not applied), 1 a switch could not be reached or configured (named), 2 bad input.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, TextIO

from rackform.pipeline import BadInput, DesignRejected, load_and_check
from rackform.render.groups import managed_switches

STAGE = "fabric"
SWITCHES_GROUP = "switches"
USER_VARIABLE = "RACKFORM_SWITCH_USER"
"""The Onyx login name the onyx_switch role reads (--user); Cumulus logins stay the inventory's."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", help="site name (topologies/sites/<site>.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repo root holding topologies/ and inventories/")
    parser.add_argument("--switch", action="append", metavar="NAME",
                        help="only this switch (repeatable; the fabric stage's --limit)")
    parser.add_argument("--dry-run", action="store_true",
                        help="only the check-mode run: show the differences, change nothing")
    parser.add_argument("--private-key", type=Path, metavar="PATH",
                        help="SSH key (default: $ANSIBLE_PRIVATE_KEY_FILE, else the site's lab key when its lab is "
                             "up); an Onyx password comes from $RACKFORM_SWITCH_PASSWORD, never the command line")
    parser.add_argument("--user", help=f"Onyx login name instead of the inventory's ansible_user (${USER_VARIABLE})")


class UnknownSwitch(Exception):
    """--switch names a device that is no managed switch of the site."""


def switch_limit(site_name: str, root: Path, names: Sequence[str] | None) -> str:
    """The stage's limit: every managed switch, or those named (UnknownSwitch for a name that is none)."""
    site, _warnings = load_and_check(site_name, root)
    switches = [switch.name for switch in managed_switches(site)]
    unknown = sorted(set(names or ()) - set(switches))
    if unknown:
        raise UnknownSwitch(f"--switch: site {site.name} has no managed switch {', '.join(unknown)}; "
                            f"managed switches: {', '.join(switches) or 'none'}")
    return ",".join(dict.fromkeys(names)) if names else SWITCHES_GROUP


def diff_text(diff: Any) -> str:
    """An Ansible result's `diff` for people: a module's prepared text as it is, a file's
    before/after as a unified diff."""
    parts = diff if isinstance(diff, list) else [diff]
    lines: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("prepared"):
            lines += str(part["prepared"]).rstrip("\n").splitlines()
        elif "before" in part or "after" in part:
            lines += difflib.unified_diff(
                str(part.get("before", "")).splitlines(), str(part.get("after", "")).splitlines(),
                f"before: {part.get('before_header', '')}".rstrip(), f"after: {part.get('after_header', '')}".rstrip(),
                lineterm="")
    return "\n".join(lines)


class ShowDiffs:
    """A deploy Progress that passes everything on and prints each host's difference as it comes."""

    def __init__(self, inner, stream: TextIO):
        self.inner = inner
        self.stream = stream

    def step_started(self, step, left_out: Collection[str]) -> None:
        self.inner.step_started(step, left_out)

    def event(self, step, event: dict[str, Any]) -> None:
        self.inner.event(step, event)
        if event.get("event") != "runner_on_file_diff":
            return
        data = event.get("event_data") or {}
        text = diff_text(data.get("diff"))
        if text:
            self.stream.write(f"{data.get('host', '?')}: {data.get('task', '')}\n{text}\n")

    def step_finished(self, run) -> None:
        self.inner.step_finished(run)


def stage_hosts(report) -> dict[str, int]:
    """Host -> tasks changed in the fabric stage."""
    run = next((run for run in report.runs if run.step.name == STAGE and run.result is not None), None)
    return {} if run is None else {host: stats.changed for host, stats in sorted(run.result.hosts.items())}


def _failed(report, stream: TextIO) -> int:
    from rackform.run import interrupt
    from rackform.run.summary import summary_lines

    print("\n".join(summary_lines(report)), file=stream)
    if report.interrupted is not None:
        print(f"rackform: {report.site}: {report.interrupted}; nothing more was started", file=sys.stderr)
        return interrupt.exit_code()
    failed = sorted(report.failed_hosts)
    if failed:
        print(f"rackform: {report.site}: {len(failed)} switch(es) not configured: {', '.join(failed)}",
              file=sys.stderr)
    else:
        print(f"rackform: {report.site}: the fabric stage stopped; see the failures above", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.progress import ProgressDisplay
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_stages

    stream = sys.stdout
    envvars = {USER_VARIABLE: args.user} if args.user else None
    try:
        limit = switch_limit(args.site, args.root, args.switch)
        options = dict(limit=limit, private_key=args.private_key, envvars=envvars)
        preview = run_stages(args.site, args.root, [STAGE], check=True, diff=True,
                             progress=ShowDiffs(ProgressDisplay(stream, live=False), stream), **options)
    except BadInput as error:
        print(error, file=sys.stderr)  # file:line: key: message, one per line
        return 2
    except DesignRejected as error:
        print(f"rackform: {error}", file=sys.stderr)
        for finding in error.findings:
            if finding.severity == "error":
                print(finding, file=sys.stderr)
        return 2
    except UnknownSwitch as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 2
    except (StageEnvironmentError, SiteLocked) as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 1
    if not preview.report.ok:
        return _failed(preview.report, stream)
    changes = stage_hosts(preview.report)
    for host, changed in changes.items():
        if not changed:
            print(f"{host}: runs its designed configuration; nothing to change", file=stream)
    pending = [host for host, changed in changes.items() if changed]
    if args.dry_run:
        if pending:
            print(f"{args.site}: {len(pending)} switch(es) would change: {', '.join(pending)} (--dry-run: "
                  "nothing applied)", file=stream)
        return 0
    try:
        applied = run_stages(args.site, args.root, [STAGE], check=False, diff=False, progress=ProgressDisplay(stream),
                             **options)
    except (StageEnvironmentError, SiteLocked) as error:
        print(f"rackform: {error}", file=sys.stderr)
        return 1
    if not applied.report.ok:
        return _failed(applied.report, stream)
    done = [host for host, changed in stage_hosts(applied.report).items() if changed]
    print(f"{args.site}: {len(done)} switch(es) configured and saved: {', '.join(done) or 'none'}", file=stream)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rackform fabric apply", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
