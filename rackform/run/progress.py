"""What a person watching `rackform deploy` sees while it runs.

One line per result that matters (a change, a failure, an unreachable host),
named by stage, host and task:

    [os 3/5] mgmt-2       base_os : Set the hostname  changed

and a running count per stage. On a terminal the count is a status line redrawn
in place under the event lines; elsewhere (CI logs) only plain lines are
written: the count when a stage ends, and every HEARTBEAT_S while it runs.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rackform.run.ansible import failure_message
from rackform.run.deploy import Step, StepRun

HEARTBEAT_S = 30.0
REDRAW_S = 0.1
HOST_WIDTH = 12
REASON_CHARS = 160
NAMES_SHOWN = 10

# Task-level results: one per host and task (loop items come as runner_item_* first).
_RESULT_EVENTS = {"runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"}


@dataclass(slots=True)
class StageCounts:
    """Results per task and host, counted as Ansible's recap counts them (ok includes changed)."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    ignored: int = 0

    def add(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "runner_on_ok":
            self.ok += 1
            self.changed += bool((data.get("res") or {}).get("changed"))
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                self.ok += 1  # as in Ansible's recap: an ignored failure counts as ok too
                self.ignored += 1
            else:
                self.failed += 1
        elif kind == "runner_on_unreachable":
            self.unreachable += 1
        elif kind == "runner_on_skipped":
            self.skipped += 1

    def __str__(self) -> str:
        text = f"ok {self.ok}, changed {self.changed}, failed {self.failed}, unreachable {self.unreachable}"
        return text + (f", ignored {self.ignored}" if self.ignored else "")


def result_word(event: dict[str, Any]) -> str | None:
    """ok, changed, skipped, failed, failed (ignored) or unreachable; None for other events."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if kind == "runner_on_ok":
        return "changed" if (data.get("res") or {}).get("changed") else "ok"
    if kind == "runner_on_failed":
        return "failed (ignored)" if data.get("ignore_errors") else "failed"
    if kind == "runner_on_unreachable":
        return "unreachable"
    if kind == "runner_on_skipped":
        return "skipped"
    return None


def task_name(data: dict[str, Any]) -> str:
    """`role : task` as Ansible prints it, or the task alone."""
    task = data.get("task") or "?"
    role = data.get("role")
    return f"{role} : {task}" if role else task


def reason(text: Any) -> str:
    """A failure message on one line, without the prefixes ansible-core 2.19 adds."""
    line = " ".join(str(text or "").split())
    for prefix in ("Task failed: ", "Module failed: "):
        line = line.removeprefix(prefix)
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"


def event_line(label: str, event: dict[str, Any], *, verbose: bool = False) -> str | None:
    """The progress line for one ansible-runner event, or None when it is not worth a line.

    Changes, failures and unreachable hosts always are; ok, skipped and ignored
    failures only with `verbose`.
    """
    word = result_word(event)
    if word is None or (not verbose and word in ("ok", "skipped", "failed (ignored)")):
        return None
    data = event.get("event_data") or {}
    line = f"[{label}] {data.get('host', '?'):<{HOST_WIDTH}} {task_name(data)}  {word}"
    if word in ("failed", "unreachable"):
        line += f": {reason(failure_message(data.get('res') or {}))}"
    return line


def some(names: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """Names for one line: the first few, and how many more (a 10,000-node site)."""
    text = ", ".join(names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def stage_start_line(step: Step, left_out: Collection[str]) -> str:
    line = f"[{step.label}] {step.playbook or step.name}"  # the platform stage has no playbook
    if left_out:
        line += f" (left out, failed earlier: {some(sorted(left_out))})"
    return line


def stage_end_line(run: StepRun, counts: StageCounts) -> str:
    result = run.result
    assert result is not None
    failed_hosts = len({failure.host for failure in run.failures()})
    if run.broken:
        outcome = "FAILED"
    elif failed_hosts:
        outcome = f"done, {failed_hosts} host(s) failed,"
    else:
        outcome = "done"
    line = f"[{run.step.label}] {outcome} in {result.duration_s:.1f} s: {counts}"
    if run.stopped:
        line += f"; Ansible stopped {some(run.stopped)} (any_errors_fatal or max_fail_percentage)"
    if run.broken:
        line += f" (ansible-playbook: {result.status}, rc {result.rc})"
    return line


class ProgressDisplay:
    """Feeds `rackform deploy`'s output: implements rackform.run.deploy.Progress."""

    def __init__(self, stream: TextIO = sys.stdout, *, live: bool | None = None, verbose: bool = False,
                 clock: Callable[[], float] = time.monotonic, columns: int | None = None):
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.verbose = verbose
        self.clock = clock
        self.columns = columns
        """Width the status line is cut to; None: the terminal's, read at each redraw."""
        self.counts = StageCounts()
        self._step: Step | None = None
        self._task = ""
        self._started = self._last_beat = self._last_draw = 0.0
        self._status_shown = False

    # --- the Progress protocol

    def step_started(self, step: Step, left_out: Collection[str]) -> None:
        self._step, self._task, self.counts = step, "", StageCounts()
        self._started = self._last_beat = self.clock()
        self._write(stage_start_line(step, left_out))

    def event(self, step: Step, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            self._task = task_name(event.get("event_data") or {})
        if kind in _RESULT_EVENTS:
            self.counts.add(event)
        line = event_line(step.label, event, verbose=self.verbose)
        if line is not None:
            self._write(line)
        self._tick(step)

    def step_finished(self, run: StepRun) -> None:
        self._step = None  # the status line goes with the stage
        self._write(stage_end_line(run, self.counts))

    # --- output

    def _tick(self, step: Step) -> None:
        now = self.clock()
        if self.live:
            if now - self._last_draw >= REDRAW_S:
                self._draw_status(step, now)
        elif now - self._last_beat >= HEARTBEAT_S:
            self._last_beat = now
            self._write(f"[{step.label}] {now - self._started:.0f} s: {self.counts}; at {self._task}")

    def _status(self, step: Step, now: float) -> str:
        return f"[{step.label}] {now - self._started:5.1f} s  {self.counts}  {self._task}"

    def _draw_status(self, step: Step, now: float) -> None:
        self._last_draw = now
        self.stream.write("\r\x1b[K" + self._status(step, now)[: self._width()])
        self.stream.flush()
        self._status_shown = True

    def _write(self, line: str) -> None:
        """A plain line; on a terminal, above the status line, which is then drawn again."""
        if self.live and self._status_shown:
            self.stream.write("\r\x1b[K")
            self._status_shown = False
        self.stream.write(line + "\n")
        if self.live and self._step is not None:
            self._draw_status(self._step, self.clock())
        self.stream.flush()

    def _width(self) -> int:
        """One less than the terminal: a full-width line would wrap and break the redraw."""
        return max((self.columns or shutil.get_terminal_size().columns) - 1, 20)
