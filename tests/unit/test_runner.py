"""ansible-runner driver: a real playbook against localhost, counted and reported."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackform.run.ansible import KEPT_RUNS, RUNNER_DIR_NAME, RunResult, run_playbook

ANSIBLE_CFG = """\
[defaults]
inventory = hosts
gathering = explicit
"""

# This interpreter for the modules too: interpreter discovery may find a python without them.
INVENTORY = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"

WRITE_MARKER = """\
- name: Write a marker file
  hosts: all
  tasks:
    - name: Marker file has the site name
      ansible.builtin.copy:
        dest: "{target}"
        content: "lab\\n"
        mode: "0644"
"""

FAILING = """\
- name: Fail on purpose
  hosts: all
  tasks:
    - name: Refuse to continue
      ansible.builtin.fail:
        msg: the fabric is not lossless
"""

FAILURE_IGNORED = """\
- name: Fail, but ignore it
  hosts: all
  tasks:
    - name: Tolerated failure
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
"""


def write_project(project_dir: Path, marker: Path) -> Path:
    """A tiny standalone Ansible project, shaped like the rendered ones."""
    project_dir.mkdir()
    (project_dir / "ansible.cfg").write_text(ANSIBLE_CFG)
    (project_dir / "hosts").write_text(INVENTORY)
    (project_dir / "marker.yml").write_text(WRITE_MARKER.format(target=marker))
    (project_dir / "fail.yml").write_text(FAILING)
    (project_dir / "ignored.yml").write_text(FAILURE_IGNORED)
    return project_dir


# Each ansible-playbook run costs about a second: runs are shared per module where
# the tests only read their results.
@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("runner")
    return write_project(tmp / "project", tmp / "marker.txt")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project", tmp_path / "marker.txt")


@pytest.fixture(scope="module")
def first_run(shared: Path) -> RunResult:
    return run_playbook(shared, "marker.yml")


@pytest.fixture(scope="module")
def second_run(shared: Path, first_run: RunResult) -> RunResult:
    return run_playbook(shared, "marker.yml")


@pytest.fixture(scope="module")
def failed_run(shared: Path) -> RunResult:
    return run_playbook(shared, "fail.yml")


def test_first_run_changes_the_file(first_run: RunResult, shared: Path):
    assert (first_run.ok, first_run.changed) == (True, 1)
    assert (shared.parent / "marker.txt").read_text() == "lab\n"


def test_second_run_changes_nothing(second_run: RunResult):
    assert (second_run.ok, second_run.changed) == (True, 0)


def test_stats_are_per_host(first_run: RunResult):
    stats = first_run.hosts["localhost"]
    assert (stats.ok, stats.changed, stats.failed, stats.unreachable) == (1, 1, 0, 0)


def test_check_mode_reports_without_changing(project: Path, tmp_path: Path):
    result = run_playbook(project, "marker.yml", check=True)
    assert (result.ok, result.changed) == (True, 1)
    assert not (tmp_path / "marker.txt").exists()


def test_failing_task_names_host_and_task(failed_run: RunResult):
    assert failed_run.ok is False
    assert [(f.host, f.task, f.message) for f in failed_run.failures] == [
        ("localhost", "Refuse to continue", "the fabric is not lossless")
    ]


def test_failing_task_counts_in_host_stats(failed_run: RunResult):
    assert failed_run.hosts["localhost"].failed == 1


def test_summary_lists_failed_hosts(failed_run: RunResult):
    assert failed_run.failed_hosts == ["localhost"]
    assert "localhost: Refuse to continue: the fabric is not lossless" in failed_run.summary()


@dataclass
class WatchedRun:
    result: RunResult
    events: list[str]
    stdout: str


@pytest.fixture(scope="module")
def ignored_run(shared: Path) -> WatchedRun:
    """A run whose only failure is ignored, watched through an event handler."""
    events: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        result = run_playbook(shared, "ignored.yml", event_handler=lambda event: events.append(event.get("event")))
    return WatchedRun(result, events, stdout.getvalue())


def test_ignored_failures_are_not_failures(ignored_run: WatchedRun):
    assert (ignored_run.result.ok, ignored_run.result.failures) == (True, [])


def test_events_reach_the_handler(ignored_run: WatchedRun):
    assert {"runner_on_failed", "playbook_on_stats"} <= set(ignored_run.events)


def test_quiet_keeps_ansible_output_off_stdout(ignored_run: WatchedRun):
    assert "Tolerated failure" not in ignored_run.stdout


def test_limit_excluding_every_host_runs_nothing(project: Path, tmp_path: Path):
    result = run_playbook(project, "marker.yml", limit="no-such-host")
    assert result.changed == 0
    assert not (tmp_path / "marker.txt").exists()


def test_missing_playbook_is_refused_before_running(shared: Path):
    with pytest.raises(FileNotFoundError, match="nope.yml"):
        run_playbook(shared, "nope.yml")


def test_each_run_gets_its_own_folder(shared: Path, first_run: RunResult, second_run: RunResult):
    assert first_run.run_dir != second_run.run_dir
    assert {first_run.run_dir.parent, second_run.run_dir.parent} == {shared / RUNNER_DIR_NAME}


def test_old_run_folders_are_pruned(project: Path):
    runs = project / RUNNER_DIR_NAME
    runs.mkdir()
    for n in range(KEPT_RUNS + 5):
        (runs / f"20000101T0000{n:02d}-old").mkdir()
    run_playbook(project, "ignored.yml")
    assert len(list(runs.iterdir())) == KEPT_RUNS


def test_run_folders_survive_a_re_render(tmp_path: Path):
    writer = pytest.importorskip("rackform.render.writer")
    project_dir = tmp_path / "project"
    writer.write_project({"site.yml": b"- hosts: all\n"}, project_dir)
    (project_dir / RUNNER_DIR_NAME / "run-1").mkdir(parents=True)
    writer.write_project({"site.yml": b"- hosts: all\n  tasks: []\n"}, project_dir)
    assert (project_dir / RUNNER_DIR_NAME / "run-1").is_dir()
