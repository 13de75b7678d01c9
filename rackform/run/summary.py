"""The table `rackform deploy` prints at the end: time per stage, changes per host,
failures with host, task and reason, and one verdict line.

Pure formatting of a DeployReport, apart from reading ansible-playbook's own error
lines from a run's artifacts when a playbook failed with no host to blame.
"""

from __future__ import annotations

import re
from pathlib import Path

from rackform.run.deploy import DeployReport, HostFailure, StepRun
from rackform.run.progress import reason

MAX_HOST_ROWS = 50
"""Hosts listed under "changes per host"; the rest are counted (10,000-node sites)."""
MAX_NAMED = 5
MAX_NAMED_IN_VERDICT = 20
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def summary_lines(report: DeployReport, *, max_host_rows: int = MAX_HOST_ROWS) -> list[str]:
    title = f"{report.site}: deploy summary" + (" (check mode: nothing was changed)" if report.check else "")
    lines = [title, ""]
    lines += stage_table(report)
    lines += ["", *changes_section(report, max_host_rows)]
    notices = notices_section(report, max_host_rows)
    if notices:
        lines += ["", *notices]
    failures = failures_section(report)
    if failures:
        lines += ["", *failures]
    lines += ["", verdict(report)]
    return lines


def stage_table(report: DeployReport) -> list[str]:
    rows = [["stage", "time", "hosts", "ok", "changed", "failed", "unreachable", ""]]
    for run in report.runs:
        rows.append(_stage_row(run))
    rows.append(["total", f"{report.duration_s:.1f} s", str(len(report.hosts)), "", str(report.changed), "", "", ""])
    return table(rows, right_aligned={1, 2, 3, 4, 5, 6})


def _stage_row(run: StepRun) -> list[str]:
    if run.result is None:
        return [run.step.name, "-", "", "", "", "", "", run.not_run or ""]
    stats = run.result.hosts.values()
    notes = []
    if run.broken:
        notes.append(f"ansible-playbook {run.result.status} (rc {run.result.rc})")
    if run.stopped:
        notes.append(f"stopped by Ansible after others failed: {_names(run.stopped)}")
    if run.left_out:
        notes.append(f"left out: {_names(run.left_out)}")
    return [
        run.step.name,
        f"{run.result.duration_s:.1f} s",
        str(len(run.result.hosts)),
        str(sum(s.ok for s in stats)),
        str(sum(s.changed for s in stats)),
        str(sum(s.failed for s in stats)),
        str(sum(s.unreachable for s in stats)),
        "; ".join(notes),
    ]


def changes_section(report: DeployReport, max_host_rows: int = MAX_HOST_ROWS) -> list[str]:
    if report.changed == 0:
        would = "would be made" if report.check else "were made"
        if report.failed_hosts or report.broken_step is not None:
            return [f"no changes {would} (on the hosts that ran)"]
        return [f"no changes {would}: every host already matched the design"]
    per_host = report.changes_per_host()
    stages = [run.step.name for run in report.runs if run.result and run.result.changed]
    heading = "changes per host (check mode: would change)" if report.check else "changes per host"
    rows = [["host", *stages, "total"]]
    for host, changes in list(per_host.items())[:max_host_rows]:
        rows.append([host, *(str(changes.get(stage, "")) for stage in stages), str(sum(changes.values()))])
    lines = [heading, *table(rows, right_aligned=set(range(1, len(stages) + 2)))]
    if len(per_host) > max_host_rows:
        lines.append(f"... and {len(per_host) - max_host_rows} more hosts with changes")
    unchanged = len(report.hosts) - len(per_host)
    if unchanged:
        lines.append(f"{unchanged} host(s) unchanged")
    return lines


def notices_section(report: DeployReport, max_host_rows: int = MAX_HOST_ROWS) -> list[str]:
    """What roles could not do on these machines (skipped hardware steps, a stopped bootstrap)."""
    rows = [[host, run.step.name, message] for run in report.runs for host, message in run.notices]
    if not rows:
        return []
    shown = rows[:max_host_rows]
    more = [f"... and {len(rows) - len(shown)} more"] if len(rows) > len(shown) else []
    return ["not done here (reported by the roles)", *table([["host", "stage", "what"], *shown]), *more]


def failures_section(report: DeployReport) -> list[str]:
    failures = report.failed_hosts
    broken = report.broken_step
    if broken is not None and broken.result.status == "canceled":
        broken = None  # cut by a signal: the verdict says so
    if not failures and broken is None:
        return []
    lines = ["failures"]
    rows = [["host", "stage", "task", "reason"]]
    for run in report.runs:
        for failure in run.failures():
            rows.append([failure.host, failure.stage, failure.task, _reason(failure)])
    if len(rows) > 1:
        lines += table(rows)
    if broken is not None:
        lines += _broken_lines(broken)
    return lines


def _reason(failure: HostFailure) -> str:
    text = reason(failure.reason)
    return text if failure.kind == "failed" else f"{failure.kind}: {text}"


def _broken_lines(run: StepRun) -> list[str]:
    result = run.result
    assert result is not None
    lines = [f"{run.step.name}: {result.playbook} failed with no host to blame ({result.status}, rc {result.rc})"]
    lines += [f"  {line}" for line in playbook_errors(result.run_dir)]
    if result.run_dir is not None:
        lines.append(f"  output: {result.run_dir}/artifacts/*/stdout")
    return lines


def playbook_errors(run_dir: Path | None, limit: int = 3) -> list[str]:
    """ansible-playbook's own ERROR lines from a run's stdout (e.g. a --limit matching no host)."""
    if run_dir is None:
        return []
    found: list[str] = []
    for stdout in sorted(run_dir.glob("artifacts/*/stdout")):
        for line in stdout.read_text(encoding="utf-8", errors="replace").splitlines():
            clean = _ANSI.sub("", line).strip()
            if "ERROR" in clean and clean not in found:
                found.append(clean)
    return found[:limit]


def verdict(report: DeployReport) -> str:
    """The last line: ok or failed, and what changed."""
    hosts = len(report.hosts)
    if report.interrupted is not None:
        cut = report.cut_step
        where = f" during {cut.step.name}" if cut is not None else ""
        return (f"{report.site}: STOPPED: {report.interrupted}{where}; later stages did not run "
                f"(run the deploy again to converge)")
    if report.broken_step is not None:
        step = report.broken_step
        return f"{report.site}: FAILED: {step.step.name} did not run to the end; later stages did not run"
    failures = report.failed_hosts
    if failures:
        named = ", ".join(f"{host} ({f.kind} in {f.stage})"
                          for host, f in sorted(failures.items())[:MAX_NAMED_IN_VERDICT])
        if len(failures) > MAX_NAMED_IN_VERDICT:
            named += f" and {len(failures) - MAX_NAMED_IN_VERDICT} more"
        return f"{report.site}: FAILED on {len(failures)} of {hosts} host(s): {named}; {hosts - len(failures)} host(s) ok"
    if report.changed == 0:
        return f"{report.site}: ok, no changes ({hosts} hosts, {report.duration_s:.1f} s)"
    verb = "would change" if report.check else "changed"
    return (f"{report.site}: ok, {report.changed} task(s) {verb} on {len(report.changes_per_host())} of "
            f"{hosts} hosts ({report.duration_s:.1f} s)")


def table(rows: list[list[str]], right_aligned: set[int] = frozenset()) -> list[str]:
    """Columns padded to their widest cell; trailing blanks dropped."""
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.rjust(width) if col in right_aligned else cell.ljust(width)
                 for col, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    return lines


def _names(hosts: tuple[str, ...]) -> str:
    shown = ", ".join(hosts[:MAX_NAMED])
    return shown + (f" and {len(hosts) - MAX_NAMED} more" if len(hosts) > MAX_NAMED else "")
