"""Run one playbook of an emitted Ansible project through ansible-runner.

The CLI and the Pulumi `Playbook` provider both call `run_playbook`; it returns a
`RunResult` (status, per-host stats, failed tasks) instead of printing Ansible's
output, so each caller decides what a person sees.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner

from rackform.run import interrupt

RUNNER_DIR_NAME = "artifacts"
"""Per-run ansible-runner folders (job events, stdout) live here, inside the project.
The render writer keeps this folder when it re-renders the project
(`rackform.render.writer.RUNTIME_DIRS`)."""

CANCEL_POLL_S = 0.5
"""How often ansible-runner looks at the cancel flag while a playbook prints nothing."""

KEPT_RUNS = 20
"""How many past run folders stay on disk for debugging; older ones are removed."""

EventHandler = Callable[[dict[str, Any]], Any]

# ansible-runner's names for the per-host counters of the `playbook_on_stats` event.
_STATS_KEYS = {"ok": "ok", "changed": "changed", "failed": "failures", "unreachable": "dark", "skipped": "skipped"}
_FAILURE_EVENTS = {"runner_on_failed", "runner_on_unreachable"}


@dataclass(frozen=True, slots=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False
    """True when Ansible could not reach the host (SSH), rather than a task failing on it."""
    role: str | None = None
    """The role the task belongs to, where it has one."""

    def __str__(self) -> str:
        return f"{self.host}: {self.task}: {self.message}"


@dataclass(frozen=True, slots=True)
class RunResult:
    playbook: str
    status: str
    """ansible-runner's status: successful, failed, timeout or canceled."""
    rc: int
    hosts: dict[str, HostStats]
    failures: list[TaskFailure] = field(default_factory=list)
    duration_s: float = 0.0
    run_dir: Path | None = None
    """ansible-runner's private data dir of this run: artifacts, job events, stdout."""

    @property
    def changed(self) -> int:
        """Tasks that changed something, over all hosts."""
        return sum(stats.changed for stats in self.hosts.values())

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def failed_hosts(self) -> list[str]:
        return sorted({failure.host for failure in self.failures})

    def summary(self) -> str:
        """One line for people: what ran, how it ended, where it failed."""
        line = f"{self.playbook}: {self.status} (rc {self.rc}), {self.changed} changed in {self.duration_s:.1f} s"
        if self.failures:
            line += "; failed: " + "; ".join(str(failure) for failure in self.failures)
        return line


def run_playbook(
    project_dir: Path,
    playbook: str,
    *,
    limit: str | None = None,
    check: bool = False,
    inventory: str | None = None,
    event_handler: EventHandler | None = None,
    quiet: bool = True,
    envvars: Mapping[str, str] | None = None,
    diff: bool = False,
) -> RunResult:
    """Run `playbook` (relative to `project_dir`) and report what happened.

    The inventory comes from the project's ansible.cfg unless `inventory` (a path
    relative to the project) is given. `event_handler` sees every ansible-runner
    event as it arrives; with `quiet` nothing of Ansible's output reaches stdout.
    A signal owned by `rackform.run.interrupt` cancels the run (status "canceled");
    ansible-runner then installs no signal handlers of its own.
    """
    project_dir = Path(project_dir).resolve()
    if not (project_dir / playbook).is_file():
        raise FileNotFoundError(f"{project_dir / playbook}: no such playbook")
    collector = _FailureCollector(event_handler)
    run_dir = _new_run_dir(project_dir, playbook)
    started = time.monotonic()
    runner = ansible_runner.run(
        private_data_dir=str(run_dir),
        project_dir=str(project_dir),
        playbook=playbook,
        inventory=str(project_dir / inventory) if inventory else None,
        limit=limit,
        cmdline=" ".join(flag for flag, wanted in (("--check", check), ("--diff", diff)) if wanted) or None,
        envvars={**_runner_env(), **(envvars or {})},
        event_handler=collector,
        quiet=quiet,
        suppress_env_files=True,  # env files are reused when present: never let one run's options leak into the next
        cancel_callback=interrupt.cancel_requested,
        settings={"pexpect_timeout": CANCEL_POLL_S},
    )
    return RunResult(
        playbook=playbook,
        status=runner.status,
        rc=runner.rc,
        hosts=_host_stats(runner.stats or {}),
        failures=collector.failures,
        duration_s=round(time.monotonic() - started, 3),
        run_dir=run_dir,
    )


def _runner_env() -> dict[str, str]:
    """Put this interpreter's bin dir first on PATH: ansible-runner execs `ansible-playbook`
    by name and fails with rc 127 when the venv is not activated."""
    venv_bin = str(Path(sys.executable).parent)
    return {"PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")])}


def _new_run_dir(project_dir: Path, playbook: str) -> Path:
    """A fresh private_data_dir per run, so concurrent or repeated runs never share state."""
    runs = project_dir / RUNNER_DIR_NAME
    runs.mkdir(exist_ok=True)
    _prune_old_runs(runs)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    run_dir = runs / f"{stamp}-{Path(playbook).stem}-{uuid.uuid4().hex[:8]}"
    run_dir.mkdir()
    return run_dir


def _prune_old_runs(runs: Path) -> None:
    """Leave room for one more run within KEPT_RUNS (names sort by start time)."""
    past = sorted(path for path in runs.iterdir() if path.is_dir())
    for path in past[: max(len(past) - (KEPT_RUNS - 1), 0)]:
        shutil.rmtree(path, ignore_errors=True)


def _host_stats(stats: dict[str, dict[str, int]]) -> dict[str, HostStats]:
    hosts = {host for counters in (stats.get(key, {}) for key in _STATS_KEYS.values()) for host in counters}
    return {
        host: HostStats(**{ours: stats.get(theirs, {}).get(host, 0) for ours, theirs in _STATS_KEYS.items()})
        for host in sorted(hosts)
    }


class _FailureCollector:
    """Event handler that records failed tasks and passes every event on."""

    def __init__(self, forward: EventHandler | None):
        self.forward = forward
        self.failures: list[TaskFailure] = []

    def __call__(self, event: dict[str, Any]) -> bool:
        if event.get("event") in _FAILURE_EVENTS:
            data = event.get("event_data", {})
            if not data.get("ignore_errors"):
                self.failures.append(_failure(data))
        if self.forward is not None:
            self.forward(event)
        return True  # keep the event in the run's artifacts


def failure_message(result: Mapping[str, Any]) -> str:
    """What went wrong, from a task's result. For a loop, Ansible's own message is
    "One or more items failed": the first failed item's message says more."""
    message = result.get("msg") or result.get("stderr") or result.get("reason") or "failed"
    items = [item for item in result.get("results") or () if isinstance(item, dict)]
    failed_items = [item for item in items if item.get("failed")]
    if failed_items:
        first = failed_items[0]
        detail = first.get("msg") or first.get("stderr") or message
        label = first.get("_ansible_item_label", first.get("item"))
        which = f"item {label}; " if isinstance(label, (str, int)) else ""
        message = f"{detail} ({which}{len(failed_items)} of {len(items)} items failed)"
    return str(message).strip()


def _failure(data: dict[str, Any]) -> TaskFailure:
    result = data.get("res") or {}
    return TaskFailure(
        host=data.get("host", "?"),
        task=data.get("task", "?"),
        message=failure_message(result),
        unreachable=bool(result.get("unreachable")),
        role=data.get("role"),
    )
