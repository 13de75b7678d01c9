"""`rackform verify SITE`: run the testinfra checks of tests/infra against a deployed site.

pytest runs in a subprocess (testinfra keeps per-process caches, and it must see the
project's ANSIBLE_CONFIG) over the emitted project `build/<site>/`, with the allowed part
of this process's environment only (rackform.process_environment, profile `pytest`), writes JUnit XML,
and `verify` turns that into a `VerifyReport`: per machine, checks passed, failed and
skipped, and each failure's short reason. Failures also reach `progress` as they
happen. The CLI exits with `report.exit_code`: 0 when every check passed, 1 otherwise.
`VerifyError` means no check could run: no rendered project, no machine matching
`hosts`, or pytest itself failing (its output's tail is in the message).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rackform.paths import INFRA_CHECKS_DIR
from rackform.pipeline import STAGE_NAMES, build_dir
from rackform.process_environment import tool_environment
from rackform.run.verify_inventory import EmittedInventory, InventoryError, ssh_environment_for_testinfra

CHECKS_DIR = INFRA_CHECKS_DIR
"""The checks that ship with rackform (a source checkout; not in a wheel)."""

PROGRESS_PREFIX = "RACKFORM-VERIFY"
"""Written by tests/infra/conftest.py under `--rackform-progress`: one line per failure."""
UNREACHABLE = "unreachable: "
"""How tests/infra/conftest.py starts the reason of every check of a machine it cannot reach."""
NOTE_PROPERTY = "rackform_note"
"""A check's note (tests/infra/conftest.py's `note` fixture): a JUnit property of its testcase,
shown under the machine whether the check passed or failed (e.g. each certificate's expiry)."""

PYTEST_TOOL = "pytest"
"""Its profile in rackform.process_environment.TOOLS."""

MACHINES_PER_WORKER = 16
MAX_WORKERS = 32
REASON_MAX_CHARS = 300
LOG_TAIL_LINES = 40

Progress = Callable[[str], None]


class VerifyError(RuntimeError):
    """The checks could not run at all; the message says why."""


@dataclass(frozen=True, slots=True)
class CheckFailure:
    host: str
    check: str
    reason: str

    def __str__(self) -> str:
        return f"{self.host}: {self.check}: {self.reason}"


@dataclass(frozen=True, slots=True)
class CheckNote:
    """What a check reports besides its verdict, for people to read."""

    host: str
    check: str
    text: str

    def __str__(self) -> str:
        return f"{self.host}: {self.check}: {self.text}"


@dataclass(slots=True)
class HostResult:
    host: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[CheckFailure] = field(default_factory=list)
    notes: list[CheckNote] = field(default_factory=list)

    @property
    def unreachable(self) -> str | None:
        """The reason, when no check could reach the machine."""
        reasons = {failure.reason for failure in self.failures}
        if self.passed == 0 and len(reasons) == 1 and next(iter(reasons)).startswith(UNREACHABLE):
            return reasons.pop()
        return None

    def line(self) -> str:
        counts = [f"{self.passed} passed"]
        counts += [f"{self.failed} failed"] if self.failed else []
        counts += [f"{self.skipped} skipped"] if self.skipped else []
        return f"{self.host:<16} {', '.join(counts)}"


@dataclass(frozen=True, slots=True)
class VerifyReport:
    site: str
    hosts: dict[str, HostResult]
    """Machine name -> its results, sorted by name."""
    stages: tuple[str, ...]
    duration_s: float = 0.0
    junit_xml: Path | None = None
    """Where the JUnit XML was written, when asked for."""

    @property
    def failures(self) -> list[CheckFailure]:
        return [failure for result in self.hosts.values() for failure in result.failures]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        """For the CLI: 0 when every check passed (or was skipped), 1 otherwise."""
        return 0 if self.ok else 1

    def totals(self) -> tuple[int, int, int]:
        """(passed, failed, skipped) over every machine."""
        results = self.hosts.values()
        return (sum(r.passed for r in results), sum(r.failed for r in results), sum(r.skipped for r in results))

    def lines(self) -> list[str]:
        """Per machine its counts, then one indented line per failure and per note; a summary last."""
        lines = []
        for result in self.hosts.values():
            if result.unreachable:
                lines.append(f"{result.host:<16} {result.unreachable} ({result.failed} checks not run)")
                continue
            lines.append(result.line())
            lines += [f"  FAIL {failure.check}: {failure.reason}" for failure in result.failures]
            lines += [f"  NOTE {note.check}: {note.text}" for note in result.notes]
        passed, failed, skipped = self.totals()
        verdict = "all checks passed" if self.ok else f"{failed} failed"
        lines.append(f"verify {self.site}: {_machines(len(self.hosts))}, {passed} passed, {failed} failed, "
                     f"{skipped} skipped in {self.duration_s:.1f} s: {verdict}")
        return lines


def _machines(count: int) -> str:
    return f"{count} machine{'' if count == 1 else 's'}"


# --- JUnit XML -> results -------------------------------------------------------------------

_TEST_ID = re.compile(r"^(?P<check>[^\[]+)(\[(?:[\w+.-]+://)?(?P<host>[^\]]*)\])?$")
_PHASE_ERROR = re.compile(r'^failed on (?:setup|teardown) with "(?P<reason>.*)"$', re.DOTALL)
_EXCEPTION_PREFIXES = ("AssertionError: ", "Failed: ", "RuntimeError: ")
# testinfra's error for a command that exited badly: CommandResult's repr, bytes and all.
_COMMAND_FAILED = re.compile(
    r"Unexpected exit code (?P<rc>-?\d+) for CommandResult\(.*?command=b?(?P<q>['\"])(?P<command>.*?)(?P=q)"
    r".*?_stderr=b?(?P<q2>['\"])(?P<stderr>.*?)(?P=q2)", re.DOTALL)
NO_MACHINE = "(no machine)"


def split_test_name(name: str) -> tuple[str, str]:
    """`test_fabric_ports_mtu[ansible://node-1]` -> (`fabric_ports_mtu`, `node-1`).

    testinfra names each parametrized check after its host; a check without one (a
    module that failed to import) belongs to NO_MACHINE, `local://` to `local`."""
    match = _TEST_ID.match(name)
    if match is None:
        return name, NO_MACHINE
    host = match["host"]
    if host is None:
        host = NO_MACHINE
    check = match["check"].removeprefix("test_")
    return check, host or "local"


def short_reason(message: str) -> str:
    """The first line of a failure's message, without pytest's wrapping."""
    text = message.strip()
    phase = _PHASE_ERROR.match(text)
    if phase:
        text = phase["reason"].strip()
    command = _COMMAND_FAILED.search(text)
    if command:
        stderr = command["stderr"].replace("\\n", "\n").strip().splitlines()
        text = f"`{command['command']}` exited {command['rc']}" + (f": {stderr[-1]}" if stderr else "")
    first = text.splitlines()[0] if text else "failed"
    for prefix in _EXCEPTION_PREFIXES:
        first = first.removeprefix(prefix)
    return first[:REASON_MAX_CHARS]


def parse_junit(path: Path) -> dict[str, HostResult]:
    """Per machine, the outcomes of the checks in a pytest JUnit XML file, sorted by machine."""
    try:
        tree = ElementTree.parse(path)
    except (OSError, ElementTree.ParseError) as error:
        raise VerifyError(f"{path}: cannot read the JUnit XML: {error}") from None
    results: dict[str, HostResult] = {}
    for case in tree.iter("testcase"):
        check, host = split_test_name(case.get("name", ""))
        result = results.setdefault(host, HostResult(host))
        result.notes += [CheckNote(host, check, prop.get("value", "")) for prop in case.iter("property")
                         if prop.get("name") == NOTE_PROPERTY]
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            result.failed += 1
            reason = short_reason(problem.get("message") or problem.text or "")
            result.failures.append(CheckFailure(host, check, reason))
        elif case.find("skipped") is not None:
            result.skipped += 1
        else:
            result.passed += 1
    return dict(sorted(results.items()))


# --- running pytest -----------------------------------------------------------------------

def _project(site_name: str, root: Path) -> tuple[Path, Path]:
    project = build_dir(Path(root), site_name).resolve()
    inventory = project / "inventory" / "hosts.yml"
    if not inventory.is_file() or not (project / "ansible.cfg").is_file():
        raise VerifyError(f"{project}: no rendered project (run `rackform render {site_name}` first)")
    return project, inventory


def _chosen_hosts(inventory_path: Path, hosts: str | None) -> list[str]:
    """The machines `hosts` (comma-separated groups, names or wildcards; default all) selects."""
    try:
        inventory = EmittedInventory(inventory_path)
        patterns = _patterns(hosts)
        chosen = sorted({host for pattern in patterns for host in inventory.match(pattern)})
    except InventoryError as error:
        raise VerifyError(str(error)) from None
    if not chosen:
        raise VerifyError(f"no machine of {inventory_path} matches {hosts!r}")
    return chosen


def _patterns(hosts: str | None) -> list[str]:
    return [pattern.strip() for pattern in (hosts or "all").split(",") if pattern.strip()] or ["all"]


def _stages(stages: Iterable[str] | None) -> tuple[str, ...]:
    chosen = tuple(STAGE_NAMES if stages is None else stages)
    unknown = sorted(set(chosen) - set(STAGE_NAMES))
    if unknown:
        raise VerifyError(f"unknown stage {', '.join(unknown)} (stages: {', '.join(STAGE_NAMES)})")
    return chosen


def auto_workers(machine_count: int) -> int:
    """pytest-xdist workers for a run: none for small sites (starting one costs more than
    it saves), then one per MACHINES_PER_WORKER machines, capped. Checks wait on SSH, not
    on this machine's CPUs, so the cap is not the core count."""
    workers = machine_count // MACHINES_PER_WORKER
    return min(workers, MAX_WORKERS) if workers > 1 else 0


def pytest_command(*, checks_dir: Path, inventory: Path, hosts: str | None, stages: tuple[str, ...],
                   junit_xml: Path, site_name: str, checks: str | None, workers: int) -> list[str]:
    command = [
        sys.executable, "-m", "pytest", str(checks_dir),
        "--hosts=" + ",".join(f"ansible://{pattern}" for pattern in _patterns(hosts)),
        "--connection=ansible", f"--ansible-inventory={inventory}",
        f"--stages={','.join(stages)}", "--rackform-progress",
        "-p", "no:cacheprovider", "-q", "--tb=short",
        f"--junitxml={junit_xml}", "-o", f"junit_suite_name=rackform-verify-{site_name}",
        "-o", "junit_family=xunit2",
    ]
    if checks:
        command += ["-k", checks]
    command += ["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]
    return command


def _environment(project: Path, envvars: Mapping[str, str] | None, control_dir: Path) -> dict[str, str]:
    """pytest's environment: the allowed part of this process's (`pytest` in
    rackform.process_environment: no secrets, nothing a pytest run above it set), the caller's
    `envvars`, the project's ansible.cfg and how testinfra's ssh logs in. PATH has rackform's bin
    folder first: testinfra's ansible backend runs ansible-inventory by name."""
    env = tool_environment(PYTEST_TOOL, envvars)
    env["ANSIBLE_CONFIG"] = str(project / "ansible.cfg")
    env.update(ssh_environment_for_testinfra(env, control_dir))
    return env


def _run_pytest(command: list[str], project: Path, envvars: Mapping[str, str] | None, control_dir: Path,
                progress: Progress) -> tuple[int, str]:
    """Run pytest in `project` (with `_environment`), passing each failure line on to `progress`;
    returns (exit code, output tail)."""
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    unreachable: set[str] = set()  # machines already reported unreachable: once is enough
    env = _environment(project, envvars, control_dir)
    with subprocess.Popen(command, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as process:
        for line in process.stdout:
            line = line.rstrip("\n")
            # pytest's progress dots may precede the marker on the same line.
            marker = line.find(PROGRESS_PREFIX + "\t")
            if marker >= 0:
                host, message = _progress_line(line[marker:])
                if host not in unreachable:
                    progress(message)
                if UNREACHABLE in message:
                    unreachable.add(host)
            elif line.strip():
                tail.append(line)
    return process.returncode, "\n".join(tail)


def _progress_line(line: str) -> tuple[str, str]:
    """A conftest progress line -> (machine, what a person reads)."""
    _, when, nodeid, reason = (line.split("\t", 3) + ["", "", ""])[:4]
    check, host = split_test_name(nodeid.rsplit("::", 1)[-1])
    reason = short_reason(reason)
    if reason.startswith(UNREACHABLE):
        return host, f"{host}: {reason}"
    return host, f"{host}: FAIL {check}: {reason}" + (f" (in {when})" if when not in ("call", "setup") else "")


def verify(
    site_name: str,
    root: Path = Path("."),
    *,
    junit_xml: Path | None = None,
    hosts: str | None = None,
    stages: Iterable[str] | None = None,
    checks: str | None = None,
    envvars: Mapping[str, str] | None = None,
    workers: int | None = None,
    checks_dir: Path = CHECKS_DIR,
    progress: Progress = print,
) -> VerifyReport:
    """Check the live machines of `build/<site>/` against its inventory.

    hosts:     comma-separated groups, machine names or wildcards (default: all).
    stages:    the stages that ran; checks of other stages are left out (default: all).
    checks:    a pytest `-k` expression picking checks by name (`mtu`, `not bgp`).
    envvars:   extra environment, as for `run_playbook` (ANSIBLE_PRIVATE_KEY_FILE: the key for
               machines whose inventory names none).
    junit_xml: also keep the JUnit XML there (for CI).
    workers:   pytest-xdist workers (default: `auto_workers`).
    """
    started = time.monotonic()
    project, inventory = _project(site_name, root)
    chosen = _chosen_hosts(inventory, hosts)
    stage_names = _stages(stages)
    if not checks_dir.is_dir():
        raise VerifyError(f"{checks_dir}: the checks folder is missing (verify runs from a rackform source checkout)")
    workers = auto_workers(len(chosen)) if workers is None else workers
    progress(f"verifying {_machines(len(chosen))} of {site_name} (stages: {', '.join(stage_names) or 'none'})")
    with tempfile.TemporaryDirectory(prefix="rackform-verify-") as scratch:
        xml_path = Path(junit_xml).resolve() if junit_xml else Path(scratch) / "junit.xml"
        xml_path.parent.mkdir(parents=True, exist_ok=True)
        command = pytest_command(checks_dir=checks_dir, inventory=inventory, hosts=hosts, stages=stage_names,
                                 junit_xml=xml_path, site_name=site_name, checks=checks, workers=workers)
        rc, tail = _run_pytest(command, project, envvars, Path(scratch), progress)
        if rc == 5:
            picked = f" and -k {checks!r}" if checks else ""
            raise VerifyError(f"no check applies to the chosen machines and stages{picked}")
        if rc not in (0, 1) or not xml_path.is_file():
            raise VerifyError(f"pytest stopped with exit code {rc} before reporting:\n{tail}")
        results = parse_junit(xml_path)
    return VerifyReport(site_name, results, stage_names, round(time.monotonic() - started, 3),
                        xml_path if junit_xml else None)
