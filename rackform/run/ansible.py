"""Run one playbook of an emitted Ansible project through ansible-runner.

The CLI and the Pulumi `Playbook` provider both call `run_playbook`; it returns a
`RunResult` (status, per-host stats, failed tasks) instead of printing Ansible's
output, so each caller decides what a person sees.

What a run is given, and what its artifacts keep:

- Environment: never this process's whole environment (ansible-runner would pass it
  on and record it, secrets and all). A run gets the variables named in
  PASSED_ENVIRONMENT (and LC_*) where this process has them
  (`rackform.process_environment.tool_environment("ansible")`, as every process rackform
  starts: docs/security.md), what the caller passes, what ansible-runner sets for itself,
  and ANSIBLE_HOST_KEY_CHECKING. Nothing else.
- ANSIBLE_HOST_KEY_CHECKING is always the site's own setting, read from the rendered
  ansible.cfg (`host_key_checking`, True unless the inventory says
  `ansible_host_key_checking: false`): left unset, ansible-runner sets False.
- A secret a playbook needs (the Onyx switches' password, $RACKFORM_SWITCH_PASSWORD)
  reaches it as a 0600 file in a 0700 folder outside the project, named by
  $RACKFORM_SWITCH_PASSWORD_FILE and removed when the run ends; the password itself is
  never in the run's environment.
- ansible-runner records the run's environment in `artifacts/<id>/command`; the
  environment is taken out of that file when the run ends (the names stay, no values).
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_runner.interface import init_runner

from rackform.process_environment import BASE, TOOLS, tool_environment
from rackform.run import interrupt

RUNNER_DIR_NAME = "artifacts"
"""Per-run ansible-runner folders (job events, stdout) live here, inside the project.
The render writer keeps this folder when it re-renders the project
(`rackform.render.writer.RUNTIME_DIRS`)."""

CANCEL_POLL_S = 0.5
"""How often ansible-runner looks at the cancel flag while a playbook prints nothing."""

KEPT_RUNS = 20
"""How many past run folders stay on disk for debugging; older ones are removed."""

ANSIBLE_TOOL = "ansible"
"""Its profile in rackform.process_environment.TOOLS."""

PASSED_ENVIRONMENT = tuple(sorted(BASE | TOOLS[ANSIBLE_TOOL].names))
"""What a run inherits from this process's environment (with LC_*): rackform.process_environment's
base and its `ansible` profile (the key, vault and switch-user paths, the SSH agent, PYTHONPATH);
a proxy only without a password. Everything else stays here."""

SECRET_FILE_VARIABLES = {"RACKFORM_SWITCH_PASSWORD": "RACKFORM_SWITCH_PASSWORD_FILE"}
"""A secret a playbook reads -> the variable naming the 0600 file that carries it into the run
(roles/onyx_switch reads the file)."""

RUNNER_OWN_ENVIRONMENT = frozenset({
    "ANSIBLE_STDOUT_CALLBACK", "ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_LOAD_CALLBACK_PLUGINS",
    "ANSIBLE_RETRY_FILES_ENABLED", "ANSIBLE_CACHE_PLUGIN", "ANSIBLE_CACHE_PLUGIN_CONNECTION",
    "AWX_ISOLATED_DATA_DIR", "ANSIBLE_ROLES_PATH", "RUNNER_OMIT_EVENTS", "RUNNER_ONLY_FAILED_EVENTS",
    "ORIGINAL_STDOUT_CALLBACK", "AD_HOC_COMMAND_ID",
})
"""What ansible-runner sets for its own event capture: kept even where this process has the same value."""

HOST_KEY_CHECKING_ENV = "ANSIBLE_HOST_KEY_CHECKING"
_FALSE_WORDS = ("false", "no", "0", "off")

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
    with _secrets_as_files({**os.environ, **(envvars or {})}) as secret_files:
        passed = run_environment(project_dir, envvars, secret_files)
        runner = init_runner(
            private_data_dir=str(run_dir),
            project_dir=str(project_dir),
            playbook=playbook,
            inventory=str(project_dir / inventory) if inventory else None,
            limit=limit,
            cmdline=" ".join(flag for flag, wanted in (("--check", check), ("--diff", diff)) if wanted) or None,
            envvars=dict(passed),
            event_handler=collector,
            quiet=quiet,
            suppress_env_files=True,  # env files are reused when present: no run's options leak into the next
            cancel_callback=interrupt.cancel_requested,
            settings={"pexpect_timeout": CANCEL_POLL_S},
        )
        # ansible-runner seeds the run with this whole process's environment: keep only what was passed
        runner.config.env = _without_inherited(runner.config.env, passed)
        try:
            runner.run()
        finally:
            _forget_environment(Path(runner.config.artifact_dir))
    return RunResult(
        playbook=playbook,
        status=runner.status,
        rc=runner.rc,
        hosts=_host_stats(runner.stats or {}),
        failures=collector.failures,
        duration_s=round(time.monotonic() - started, 3),
        run_dir=run_dir,
    )


def run_environment(project_dir: Path, envvars: Mapping[str, str] | None = None,
                    secret_files: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a run of `project_dir` gets (see the module doc): what it inherits from
    this process, then the caller's `envvars` (less the secrets of SECRET_FILE_VARIABLES, which
    travel as `secret_files`), PATH with the bin folder rackform is installed in first
    (rackform.installed_tools: ansible-runner execs `ansible-playbook` by name, rc 127 when the
    venv is not activated), and the site's host
    key checking."""
    given = {name: value for name, value in (envvars or {}).items() if name not in SECRET_FILE_VARIABLES}
    env = tool_environment(ANSIBLE_TOOL, {**given, **(secret_files or {})})
    env[HOST_KEY_CHECKING_ENV] = str(site_host_key_checking(project_dir))
    return env


def site_host_key_checking(project_dir: Path) -> bool:
    """`host_key_checking` of the project's ansible.cfg (the site's setting, rendered); True when unsaid."""
    config = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        config.read(Path(project_dir) / "ansible.cfg", encoding="utf-8")
    except configparser.Error:
        return True
    value = config.get("defaults", "host_key_checking", fallback="True")
    return value.strip().lower() not in _FALSE_WORDS


def _without_inherited(prepared: Mapping[str, str], passed: Mapping[str, str]) -> dict[str, str]:
    """ansible-runner's environment for the run, less what it copied from this process unasked:
    kept are what rackform passed and what ansible-runner set (or changed) itself."""
    return {name: value for name, value in prepared.items()
            if name in passed or name in RUNNER_OWN_ENVIRONMENT or os.environ.get(name) != value}


@contextlib.contextmanager
def _secrets_as_files(environ: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """Each secret of SECRET_FILE_VARIABLES found in `environ` (and not already given as a file)
    as a 0600 file in a 0700 folder of its own, removed when the block ends: name -> path."""
    wanted = {name: file_variable for name, file_variable in SECRET_FILE_VARIABLES.items()
              if environ.get(name) and not environ.get(file_variable)}
    given = {file_variable: environ[file_variable] for file_variable in SECRET_FILE_VARIABLES.values()
             if environ.get(file_variable)}
    if not wanted:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="rackform-run-") as folder:  # mode 0700, outside the project
        paths = dict(given)
        for name, file_variable in wanted.items():
            path = Path(folder) / name.lower()
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(environ[name])
            paths[file_variable] = str(path)
        yield paths


_RUNNER_RECORD = "command"


def _forget_environment(artifact_dir: Path) -> None:
    """Take the environment's values out of ansible-runner's record of the run (`command`):
    the command line and folder stay for debugging, the variables only by name."""
    record = artifact_dir / _RUNNER_RECORD
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or "env" not in data:
        return
    data["env_names"] = sorted(data.pop("env") or {})
    temporary = record.with_name(f".{_RUNNER_RECORD}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    temporary.replace(record)


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
