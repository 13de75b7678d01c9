"""`rackform deploy` and `rackform lab`: stage order, hosts failing alone, progress lines,
the summary, exit codes.

Most tests replay ansible-runner events recorded from real runs of the tiny project
below against localhost (tests/unit/data/deploy_events.json): node-1 and node-2 run
locally, node-3 is unreachable (SSH to a closed port). Re-record after changing the
project or upgrading Ansible with:  .venv/bin/python tests/unit/test_deploy.py
One test runs the project for real, to keep the recording honest.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import rackform.run.deploy as deploy_module
from rackform.run import environment
from rackform import cli
from rackform.pipeline import STAGE_NAMES, STAGES, Stage
from rackform.run.ansible import RunResult, _FailureCollector, _host_stats, run_playbook
from rackform.run.deploy import (
    NOT_IN_CHECK_MODE,
    OUTSIDE_ANSIBLE,
    DeployReport,
    Step,
    StepRun,
    combined_limit,
    deploy,
    fatal_plays,
    plan_steps,
)
from rackform.run.progress import ProgressDisplay, StageCounts, event_line, reason, some
from rackform.run.summary import changes_section, playbook_errors, summary_lines, verdict

REPO = Path(__file__).resolve().parents[2]
RECORDING = Path(__file__).parent / "data" / "deploy_events.json"

# ---------------------------------------------------------------- the recorded project

ANSIBLE_CFG = """\
[defaults]
inventory = hosts
roles_path = roles
gathering = explicit
"""

INVENTORY = """\
[servers]
node-1 ansible_connection=local ansible_python_interpreter={python}
node-2 ansible_connection=local ansible_python_interpreter={python}
node-3 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh ansible_timeout=3
"""

PLAYBOOKS = {
    "validate.yml": """\
- name: Validate the inventory
  hosts: all
  gather_facts: false
  any_errors_fatal: true
  vars:
    ansible_connection: ansible.builtin.local
  tasks:
    - name: Check the variables every machine needs
      ansible.builtin.assert:
        that: inventory_hostname is string
        quiet: true
""",
    "os.yml": """\
- name: Base OS on the servers
  hosts: servers
  gather_facts: false
  roles:
    - base_os
""",
    "kubernetes.yml": """\
- name: Kubernetes prerequisites on the cluster nodes
  hosts: servers
  gather_facts: false
  any_errors_fatal: true
  roles:
    - k8s_prereqs
""",
    "verify.yml": """\
- name: Verify the servers
  hosts: servers
  gather_facts: false
  tasks:
    - name: Check the hostname
      ansible.builtin.assert:
        that: inventory_hostname is string
        quiet: true
""",
}
# A loop whose items fail: Ansible's message for the task is only "One or more items failed".
PLAYBOOKS["fabric.yml"] = """\
- name: Fabric baseline
  hosts: servers
  gather_facts: false
  tasks:
    - name: Configure the ports
      ansible.builtin.fail:
        msg: "no port {{ item }}"
      when: item != 'swp1'
      loop: [swp1, swp2, swp3]
"""
# More than max_fail_percentage of the hosts fail: Ansible ends the play for all of them.
PLAYBOOKS["provision.yml"] = """\
- name: Harden the BMCs
  hosts: servers
  gather_facts: false
  max_fail_percentage: 25
  tasks:
    - name: Log in to the BMC
      ansible.builtin.fail:
        msg: wrong password
      when: inventory_hostname == 'node-2'
    - name: Power on
      ansible.builtin.debug:
        msg: "on"
"""

ROLES = {
    "base_os/tasks/main.yml": """\
- name: Set the hostname
  ansible.builtin.command: "true"
  changed_when: inventory_hostname == 'node-1'
- name: Skip on node-2
  ansible.builtin.debug: {msg: hi}
  when: inventory_hostname != 'node-2'
- name: Set kernel network parameters
  ansible.builtin.command: "echo {{ item }}"
  changed_when: item == 'b'
  loop: [a, b]
- name: Tolerated failure
  ansible.builtin.command: /bin/false
  changed_when: false
  ignore_errors: true
- name: Refuse on node-2
  ansible.builtin.fail: {msg: "the fabric is not lossless"}
  when: inventory_hostname == 'node-2'
- name: Point systemd-timesyncd at the site's NTP servers
  ansible.builtin.command: "true"
  notify: Restart systemd-timesyncd
""",
    "base_os/handlers/main.yml": """\
- name: Restart systemd-timesyncd
  ansible.builtin.command: "true"
""",
    "k8s_prereqs/tasks/main.yml": """\
- name: List the kernel modules Kubernetes needs at boot
  ansible.builtin.command: "true"
  changed_when: true
- name: Swap off
  ansible.builtin.command: "true"
  changed_when: false
""",
}

# name -> (playbook, --limit): the runs recorded.
RECORDED_RUNS = {
    "validate": ("validate.yml", None),
    "os": ("os.yml", None),
    "os_clean": ("os.yml", "node-1"),
    "kubernetes_fatal": ("kubernetes.yml", None),
    "verify": ("verify.yml", "node-1,node-2"),
    "no_hosts": ("verify.yml", "no-such-host"),
    "loop_failure": ("fabric.yml", "node-1"),
    "provision_max_fail": ("provision.yml", "node-1,node-2"),
}


def write_project(project_dir: Path) -> Path:
    project_dir.mkdir(parents=True, exist_ok=True)
    (project_dir / "ansible.cfg").write_text(ANSIBLE_CFG)
    (project_dir / "hosts").write_text(INVENTORY.format(python=sys.executable))
    for name, text in PLAYBOOKS.items():
        (project_dir / name).write_text(text)
    for path, text in ROLES.items():
        (project_dir / "roles" / path).parent.mkdir(parents=True, exist_ok=True)
        (project_dir / "roles" / path).write_text("---\n" + text)
    return project_dir


def _trimmed(event: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    """An event as recorded, less Ansible's colored stdout and module arguments; paths made relative."""
    text = json.dumps({key: value for key, value in event.items() if key != "stdout"}, default=str)
    event = json.loads(text.replace(str(project_dir), "PROJECT"))
    result = event.get("event_data", {}).get("res")
    if isinstance(result, dict):
        result.pop("invocation", None)
        for item in result.get("results", ()):
            item.pop("invocation", None)
    return event


def record() -> None:
    """Run every RECORDED_RUNS entry for real and write the events to RECORDING."""
    with tempfile.TemporaryDirectory() as tmp:
        project_dir = write_project(Path(tmp) / "project")
        runs = {}
        for name, (playbook, limit) in RECORDED_RUNS.items():
            events: list[dict] = []
            result = run_playbook(project_dir, playbook, limit=limit, event_handler=events.append)
            runs[name] = {"playbook": playbook, "limit": limit, "status": result.status, "rc": result.rc,
                          "duration_s": result.duration_s, "events": [_trimmed(e, project_dir) for e in events]}
            print(f"{name}: {result.summary()}")
    RECORDING.parent.mkdir(exist_ok=True)
    RECORDING.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------- replaying recorded runs


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict]:
    return json.loads(RECORDING.read_text())


def replay(recording: dict, event_handler=None) -> RunResult:
    """What run_playbook returns for a recorded run, the events passed on as they were."""
    collector = _FailureCollector(event_handler)
    stats: dict = {}
    for event in recording["events"]:
        collector(event)
        if event["event"] == "playbook_on_stats":
            stats = event["event_data"]
    return RunResult(recording["playbook"], recording["status"], recording["rc"], _host_stats(stats),
                     collector.failures, recording["duration_s"])


@dataclass
class FakeRunner:
    """Stands in for run_playbook: replays one recorded run per playbook, remembers each call."""

    recorded: dict[str, dict]
    runs: dict[str, str]
    """playbook -> recorded run name; playbooks not named replay `verify` (all ok, no changes)."""
    calls: list[dict] = field(default_factory=list)

    def __call__(self, project_dir: Path, playbook: str, **options) -> RunResult:
        self.calls.append({"playbook": playbook, **options})
        recording = dict(self.recorded[self.runs.get(playbook, "verify")], playbook=playbook)
        return replay(recording, options.get("event_handler"))

    @property
    def playbooks(self) -> list[str]:
        return [call["playbook"] for call in self.calls]

    def call(self, playbook: str) -> dict:
        return next(call for call in self.calls if call["playbook"] == playbook)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return write_project(tmp_path_factory.mktemp("deploy") / "project")


def run_deploy(project: Path, recorded: dict, runs: dict[str, str], *, stages=None, **options):
    runner = FakeRunner(recorded, runs)
    out = io.StringIO()
    report = deploy("lab", project, plan_steps(stages), runner=runner,
                    progress=ProgressDisplay(out, live=False), **options)
    return report, runner, out.getvalue()


ALL_OK = {"validate.yml": "validate"}
OS_FAILS = {"validate.yml": "validate", "os.yml": "os"}
OS_CHANGES = {"validate.yml": "validate", "os.yml": "os_clean"}


def events_of(recorded: dict, name: str, kind: str, **data) -> list[dict]:
    return [e for e in recorded[name]["events"]
            if e["event"] == kind and all(e["event_data"].get(k) == v for k, v in data.items())]


def one_event(recorded: dict, name: str, kind: str, **data) -> dict:
    (event,) = events_of(recorded, name, kind, **data)
    return event


# ---------------------------------------------------------------- the plan: stage order


def test_validate_runs_first_then_every_stage_in_pipeline_order():
    assert [step.name for step in plan_steps()] == ["validate", *STAGE_NAMES]


def test_chosen_stages_keep_pipeline_order():
    assert [step.name for step in plan_steps(["verify", "os"])] == ["validate", "os", "verify"]


def test_stage_order_comes_from_stages(monkeypatch):
    reordered = (Stage("os", "os.yml", "x"), Stage("fabric", "fabric.yml", "y"))
    monkeypatch.setattr(deploy_module, "STAGES", reordered)
    assert [step.playbook for step in plan_steps()] == ["validate.yml", "os.yml", "fabric.yml"]


@pytest.mark.parametrize(
    ("stage", "label"),
    [("validate", "validate"), ("provision", "provision 1/7"), ("os", "os 3/7"), ("storage", "storage 4/7"),
     ("platform", "platform 6/7"), ("verify", "verify 7/7")],
)
def test_labels_number_the_stages(stage: str, label: str):
    assert {step.name: step.label for step in plan_steps()}[stage] == label


def test_an_unavailable_stage_is_planned_not_run_with_its_reason_and_not_numbered():
    steps = plan_steps(unavailable={"platform": "not run: no kubeconfig"})
    assert [(s.name, s.label, s.not_run) for s in steps[-2:]] == [
        ("platform", "platform", "not run: no kubeconfig"), ("verify", "verify 6/6", None)]


def test_labels_count_only_the_chosen_stages():
    assert [step.label for step in plan_steps(["os", "verify"])] == ["validate", "os 1/2", "verify 2/2"]


def test_check_mode_leaves_verify_out_saying_why():
    steps = plan_steps(check=True)
    assert [(s.name, s.label, s.not_run) for s in steps[-2:]] == [
        ("platform", "platform 6/6", None), ("verify", "verify", NOT_IN_CHECK_MODE)]


def test_check_mode_numbers_only_the_stages_it_runs():
    assert {step.name: step.label for step in plan_steps(check=True)}["os"] == "os 3/6"


def test_check_mode_runs_verify_when_asked_for():
    assert [step.label for step in plan_steps(["verify"], check=True)] == ["validate", "verify 1/1"]


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="unknown stage"):
        plan_steps(["network"])


def test_deploy_runs_the_playbooks_in_stage_order(project: Path, recorded):
    _, runner, _ = run_deploy(project, recorded, ALL_OK)
    assert runner.playbooks == ["validate.yml", *(stage.playbook for stage in STAGES if stage.playbook)]


def test_a_stage_without_a_runner_is_reported_not_run(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, ALL_OK)
    platform = next(run for run in report.runs if run.step.name == "platform")
    assert (platform.result, platform.not_run) == (None, OUTSIDE_ANSIBLE)


@pytest.mark.parametrize("check", [True, False])
def test_check_mode_reaches_every_run(project: Path, recorded, check: bool):
    _, runner, _ = run_deploy(project, recorded, ALL_OK, check=check)
    assert {call["check"] for call in runner.calls} == {check}


def test_connection_settings_reach_every_run(project: Path, recorded):
    env = {"ANSIBLE_PRIVATE_KEY_FILE": "/keys/lab"}
    _, runner, _ = run_deploy(project, recorded, ALL_OK, envvars=env)
    assert all(call["envvars"] == env for call in runner.calls)


# ---------------------------------------------------------------- hosts fail alone


def test_failed_and_unreachable_hosts_are_left_out_of_later_stages(project: Path, recorded):
    _, runner, _ = run_deploy(project, recorded, OS_FAILS, stages=["os", "kubernetes", "verify"])
    assert [runner.call(p)["limit"] for p in ("os.yml", "kubernetes.yml", "verify.yml")] == [
        None, "all,!node-2,!node-3", "all,!node-2,!node-3"]


def test_each_host_fails_once_in_the_stage_where_it_failed(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, OS_FAILS, stages=["os", "verify"])
    assert {host: (f.stage, f.kind) for host, f in report.failed_hosts.items()} == {
        "node-2": ("os", "failed"), "node-3": ("os", "unreachable")}


def test_other_hosts_finish_every_stage(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, OS_FAILS, stages=["os", "verify"])
    verify = report.runs[-1]
    assert (verify.result.ok, verify.left_out) == (True, ("node-2", "node-3"))


def test_a_failed_host_fails_the_deploy(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, OS_FAILS, stages=["os"])
    assert report.ok is False


@pytest.mark.parametrize(
    ("limit", "left_out", "combined"),
    [
        (None, [], None),
        ("gpu", [], "gpu"),
        (None, ["gpu-2"], "all,!gpu-2"),
        ("servers:!mgmt-1", ["gpu-2", "gpu-1"], "servers,!mgmt-1,!gpu-1,!gpu-2"),
        ("gpu-1,gpu-2", ["gpu-2"], "gpu-1,gpu-2,!gpu-2"),
        ("gpu-[1:4]:&rack_r1", ["gpu-2"], "gpu-[1:4],&rack_r1,!gpu-2"),
    ],
)
def test_limit_leaves_out_failed_hosts(limit, left_out, combined):
    assert combined_limit(limit, left_out) == combined


def test_deploy_leaves_ansible_out_of_this_process():
    """ansible's Display, once imported, patches sys.stdout and sys.stderr of the importer."""
    code = ("import sys; from rackform.run.deploy import combined_limit; combined_limit('servers:!x', ['y']); "
            "from rackform import cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'ansible'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_any_errors_fatal_plays_are_read_from_the_playbook(project: Path):
    assert (fatal_plays(project / "kubernetes.yml"), fatal_plays(project / "os.yml")) == (
        {"Kubernetes prerequisites on the cluster nodes"}, set())


def test_any_errors_fatal_stops_the_other_hosts_of_the_play(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, {"validate.yml": "validate", "kubernetes.yml": "kubernetes_fatal"},
                              stages=["kubernetes"])
    assert {host: f.kind for host, f in report.failed_hosts.items()} == {
        "node-1": "stopped", "node-2": "stopped", "node-3": "unreachable"}


def test_max_fail_percentage_stops_the_other_hosts_of_the_play(project: Path, recorded):
    report, _, _ = run_deploy(project, recorded, {"validate.yml": "validate", "provision.yml": "provision_max_fail"},
                              stages=["provision"])
    assert {host: f.kind for host, f in report.failed_hosts.items()} == {"node-1": "stopped", "node-2": "failed"}


def test_no_stage_runs_once_every_host_failed(project: Path, recorded):
    report, runner, _ = run_deploy(project, recorded, {"validate.yml": "validate", "kubernetes.yml": "kubernetes_fatal"},
                                   stages=["kubernetes", "verify"])
    assert "verify.yml" not in runner.playbooks
    assert "every host failed" in report.runs[-1].not_run


def test_a_broken_playbook_stops_the_deploy(project: Path, recorded):
    report, runner, _ = run_deploy(project, recorded, {"validate.yml": "validate", "os.yml": "no_hosts"},
                                   stages=["os", "verify"])
    assert (runner.playbooks, report.broken_step.step.name, report.ok) == (["validate.yml", "os.yml"], "os", False)


# ---------------------------------------------------------------- progress lines


def test_a_change_is_one_line_with_stage_host_role_and_task(recorded):
    event = one_event(recorded, "os", "runner_on_ok", host="node-1", task="Set the hostname")
    assert event_line("os 3/5", event) == "[os 3/5] node-1       base_os : Set the hostname  changed"


def test_an_unreachable_host_is_named_with_the_reason(recorded):
    event = one_event(recorded, "os", "runner_on_unreachable", host="node-3")
    assert event_line("os 3/5", event) == (
        "[os 3/5] node-3       base_os : Set the hostname  unreachable: Failed to connect to the host via ssh: "
        "ssh: connect to host 127.0.0.1 port 1: Connection refused")


def test_a_failed_loop_shows_the_first_failed_items_message(recorded):
    event = one_event(recorded, "loop_failure", "runner_on_failed", host="node-1")
    assert event_line("fabric 2/5", event) == (
        "[fabric 2/5] node-1       Configure the ports  failed: no port swp2 (item swp2; 2 of 3 items failed)")


def test_a_failed_task_shows_its_message(recorded):
    event = one_event(recorded, "os", "runner_on_failed", host="node-2", task="Refuse on node-2")
    assert event_line("os 3/5", event).endswith("base_os : Refuse on node-2  failed: the fabric is not lossless")


@pytest.mark.parametrize(
    ("kind", "data", "word"),
    [
        ("runner_on_ok", {"host": "node-2", "task": "Set the hostname"}, "ok"),
        ("runner_on_skipped", {"host": "node-2", "task": "Skip on node-2"}, "skipped"),
        ("runner_on_failed", {"host": "node-1", "task": "Tolerated failure"}, "failed (ignored)"),
    ],
)
def test_quiet_results_get_a_line_only_when_verbose(recorded, kind, data, word):
    event = one_event(recorded, "os", kind, **data)
    assert (event_line("os", event), event_line("os", event, verbose=True).endswith(f"  {word}")) == (None, True)


@pytest.mark.parametrize("kind", ["playbook_on_task_start", "runner_on_start", "runner_item_on_ok", "playbook_on_stats"])
def test_other_events_get_no_line(recorded, kind):
    assert {event_line("os", event, verbose=True) for event in events_of(recorded, "os", kind)} == {None}


def test_handlers_are_shown_under_their_role(recorded):
    event = one_event(recorded, "os", "runner_on_ok", task="Restart systemd-timesyncd")
    assert "base_os : Restart systemd-timesyncd  changed" in event_line("os", event)


@pytest.mark.parametrize("name", ["os", "os_clean", "kubernetes_fatal", "verify"])
def test_running_counts_match_ansible_recap(recorded, name):
    counts = StageCounts()
    for event in recorded[name]["events"]:
        counts.add(event)
    stats = one_event(recorded, name, "playbook_on_stats")["event_data"]
    recap = {key: sum(stats[theirs].values()) for key, theirs in
             {"ok": "ok", "changed": "changed", "failed": "failures", "unreachable": "dark",
              "skipped": "skipped", "ignored": "ignored"}.items()}
    assert {key: getattr(counts, key) for key in recap} == recap


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Task failed: Failed to connect to the host", "Failed to connect to the host"),
        ("Module failed: Destination /etc/network/interfaces does not exist !",
         "Destination /etc/network/interfaces does not exist !"),
        ("line one\n   line two", "line one line two"),
        ("x" * 500, "x" * 159 + "…"),
    ],
)
def test_reasons_fit_on_one_line(text, shown):
    assert reason(text) == shown


def test_plain_output_has_a_line_per_stage_start_change_and_end(project: Path, recorded):
    _, _, out = run_deploy(project, recorded, OS_CHANGES, stages=["os"])
    assert out.splitlines() == [
        "[validate] validate.yml",
        "[validate] done in %.1f s: ok 3, changed 0, failed 0, unreachable 0" % recorded["validate"]["duration_s"],
        "[os 1/1] os.yml",
        "[os 1/1] node-1       base_os : Set the hostname  changed",
        "[os 1/1] node-1       base_os : Set kernel network parameters  changed",
        "[os 1/1] node-1       base_os : Point systemd-timesyncd at the site's NTP servers  changed",
        "[os 1/1] node-1       base_os : Restart systemd-timesyncd  changed",
        "[os 1/1] done in %.1f s: ok 6, changed 4, failed 0, unreachable 0, ignored 1" % recorded["os_clean"]["duration_s"],
    ]


@pytest.mark.parametrize(
    ("count", "text"),
    [(2, "gpu-0, gpu-1"), (10, ", ".join(f"gpu-{n}" for n in range(10))),
     (10_000, ", ".join(f"gpu-{n}" for n in range(10)) + " and 9990 more")],
)
def test_host_lists_in_progress_lines_stay_short(count: int, text: str):
    assert some([f"gpu-{n}" for n in range(count)]) == text


def test_plain_output_has_no_terminal_escapes(project: Path, recorded):
    _, _, out = run_deploy(project, recorded, OS_FAILS, stages=["os"])
    assert "\x1b" not in out and "\r" not in out


def test_stage_end_names_the_hosts_any_errors_fatal_stopped(project: Path, recorded):
    _, _, out = run_deploy(project, recorded, {"validate.yml": "validate", "kubernetes.yml": "kubernetes_fatal"},
                           stages=["kubernetes"])
    assert "Ansible stopped node-1, node-2 (any_errors_fatal or max_fail_percentage)" in out.splitlines()[-1]


def test_later_stages_say_which_hosts_are_left_out(project: Path, recorded):
    _, _, out = run_deploy(project, recorded, OS_FAILS, stages=["os", "verify"])
    assert "[verify 2/2] verify.yml (left out, failed earlier: node-2, node-3)" in out.splitlines()


class FakeClock:
    def __init__(self, step_s: float):
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        self.now += self.step_s
        return self.now


def _display_run(recorded: dict, name: str, *, live: bool, clock: FakeClock) -> str:
    out = io.StringIO()
    display = ProgressDisplay(out, live=live, clock=clock, columns=200)
    step = Step("os", "os.yml", "os 3/5")
    display.step_started(step, ())
    result = replay(recorded[name], lambda event: display.event(step, event))
    display.step_finished(StepRun(step, result))
    return out.getvalue()


def test_a_terminal_gets_a_status_line_with_running_counts(recorded):
    out = _display_run(recorded, "os", live=True, clock=FakeClock(1.0))
    status = r"\r\x1b\[K\[os 3/5\] +\d+\.0 s  ok \d+, changed 1, failed 0, unreachable 1  base_os : Set the hostname"
    assert re.search(status, out)


def test_a_terminal_ends_on_the_stage_end_line_not_a_status_line(recorded):
    out = _display_run(recorded, "os", live=True, clock=FakeClock(1.0))
    assert out.split("\r\x1b[K")[-1].startswith("[os 3/5] done, 2 host(s) failed,") and out.endswith("\n")


def test_plain_output_gives_a_heartbeat_on_long_stages(recorded):
    out = _display_run(recorded, "verify", live=False, clock=FakeClock(20.0))
    assert any(line.startswith("[os 3/5] ") and " s: ok " in line and "; at Check the hostname" in line
               for line in out.splitlines())


# ---------------------------------------------------------------- the summary


def _report(project: Path, recorded: dict, runs: dict[str, str], stages=None, **options) -> DeployReport:
    return run_deploy(project, recorded, runs, stages=stages, **options)[0]


def test_summary_says_no_changes_plainly(project: Path, recorded):
    lines = summary_lines(_report(project, recorded, ALL_OK))
    assert "no changes were made: every host already matched the design" in lines
    assert lines[-1].startswith("lab: ok, no changes (3 hosts, ")


def test_check_mode_summary_says_nothing_was_changed(project: Path, recorded):
    lines = summary_lines(_report(project, recorded, ALL_OK, check=True))
    assert lines[0] == "lab: deploy summary (check mode: nothing was changed)"
    assert "no changes would be made: every host already matched the design" in lines


def test_summary_has_the_time_of_every_stage(project: Path, recorded):
    lines = summary_lines(_report(project, recorded, OS_CHANGES, stages=["os", "platform"]))
    rows = {line.split()[0]: line for line in lines[2:6]}
    assert rows["os"].split()[1:3] == [f"{recorded['os_clean']['duration_s']:.1f}", "s"]
    assert rows["platform"].split()[1] == "-" and rows["platform"].endswith(OUTSIDE_ANSIBLE)


def test_summary_counts_changes_per_host_and_stage(project: Path, recorded):
    section = changes_section(_report(project, recorded, OS_CHANGES, stages=["os"]))
    assert [line.split() for line in section[:3]] == [["changes", "per", "host"], ["host", "os", "total"],
                                                      ["node-1", "4", "4"]]


def test_summary_lists_each_failure_with_host_stage_task_and_reason(project: Path, recorded):
    lines = summary_lines(_report(project, recorded, OS_FAILS, stages=["os"]))
    failures = lines[lines.index("failures") + 2:]
    assert failures[:2] == [
        "node-3  os     base_os : Set the hostname  unreachable: Failed to connect to the host via ssh: "
        "ssh: connect to host 127.0.0.1 port 1: Connection refused",
        "node-2  os     base_os : Refuse on node-2  the fabric is not lossless",
    ]


def test_verdict_names_the_failed_hosts(project: Path, recorded):
    assert verdict(_report(project, recorded, OS_FAILS, stages=["os"])) == (
        "lab: FAILED on 2 of 3 host(s): node-2 (failed in os), node-3 (unreachable in os); 1 host(s) ok")


def test_verdict_counts_changes_when_all_ok(project: Path, recorded):
    report = _report(project, recorded, OS_CHANGES, stages=["os"])
    assert verdict(report).startswith("lab: ok, 4 task(s) changed on 1 of 3 hosts (")


def test_changes_per_host_is_capped_for_large_sites(project: Path, recorded):
    section = changes_section(_report(project, recorded, OS_CHANGES, stages=["os"]), max_host_rows=0)
    assert section[-2:] == ["... and 1 more hosts with changes", "2 host(s) unchanged"]


def test_a_broken_playbook_is_explained_with_ansibles_error(tmp_path: Path):
    stdout = tmp_path / "artifacts" / "ident" / "stdout"
    stdout.parent.mkdir(parents=True)
    stdout.write_text("\x1b[0;31m[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no "
                      "hosts to target.\x1b[0m\n")
    assert playbook_errors(tmp_path) == [
        "[ERROR]: Specified inventory, host pattern and/or --limit leaves us with no hosts to target."]


# ---------------------------------------------------------------- the live run behind the recording


def test_a_live_run_reads_like_the_recording(tmp_path: Path):
    project_dir = write_project(tmp_path / "project")
    out = io.StringIO()
    report = deploy("lab", project_dir, [Step("os", "os.yml", "os 1/1")], limit="node-1",
                    progress=ProgressDisplay(out, live=False))
    assert (report.ok, report.changed) == (True, 4)
    assert "[os 1/1] node-1       base_os : Set the hostname  changed" in out.getvalue()


# ---------------------------------------------------------------- the command line


@pytest.fixture()
def root(tmp_path: Path, built_bundles) -> Path:
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    return tmp_path


class FakeVault:
    """Stands in for the site vault (rackform.run.environment.open_vault): no passwords made, and
    rackform.secrets never imported here (test_ipmi_commands hides it from sys.modules)."""

    def __init__(self, site, environ=None):
        self.vault_file = Path(f"/secrets/{site.name}/bmc_vault.yml")

    def runner_envvars(self) -> dict[str, str]:
        return {"RACKFORM_BMC_VAULT": str(self.vault_file), "ANSIBLE_VAULT_PASSWORD_FILE": "/secrets/pw"}


@pytest.fixture()
def fake_runner(monkeypatch, recorded):
    def install(runs: dict[str, str]) -> FakeRunner:
        runner = FakeRunner(recorded, runs)
        monkeypatch.setattr(deploy_module, "run_playbook", runner)
        return runner

    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)  # no lab up, whatever this machine has
    monkeypatch.setattr(environment, "open_vault", FakeVault)
    for name in ("ANSIBLE_PRIVATE_KEY_FILE", "RACKFORM_BMC_VAULT"):
        monkeypatch.delenv(name, raising=False)
    return install


def test_deploy_exits_0_when_every_host_is_ok(root: Path, fake_runner, capsys):
    fake_runner(ALL_OK)
    assert cli.main(["deploy", "lab", "--root", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("lab: ok, no changes (3 hosts, ")


def test_deploy_renders_the_project_first(root: Path, fake_runner):
    fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os"])
    assert (root / "build" / "lab" / "os.yml").is_file()


def test_deploy_exits_1_and_names_the_failed_hosts(root: Path, fake_runner, capsys):
    fake_runner(OS_FAILS)
    assert cli.main(["deploy", "lab", "--root", str(root)]) == 1
    assert "rackform: lab: 2 host(s) failed: node-2, node-3" in capsys.readouterr().err


def test_deploy_exits_2_on_bad_input_before_running_anything(root: Path, fake_runner, capsys):
    runner = fake_runner(ALL_OK)
    path = root / "topologies/sites/lab.yaml"
    path.write_text(path.read_text().replace("power_basis: max", "power_basis: peak"))
    assert cli.main(["deploy", "lab", "--root", str(root)]) == 2
    assert runner.calls == [] and "topologies/sites/lab.yaml:" in capsys.readouterr().err


def test_deploy_refuses_an_unknown_stage_with_exit_2(root: Path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "lab", "--root", str(root), "--stage", "network"])
    assert exit_info.value.code == 2 and "invalid choice: 'network'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--check"], {"check": True, "limit": None}),
        (["--limit", "gpu"], {"check": False, "limit": "gpu"}),
    ],
)
def test_deploy_passes_check_and_limit_on(root: Path, fake_runner, argv, expected):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os", *argv])
    assert {key: runner.call("os.yml")[key] for key in expected} == expected


def test_deploy_check_runs_every_stage_but_verify(root: Path, fake_runner):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--check"])
    assert runner.playbooks == ["validate.yml", "provision.yml", "fabric.yml", "os.yml", "storage.yml",
                              "kubernetes.yml"]


def test_a_site_without_data_sets_runs_no_storage_stage_and_says_why(root: Path, fake_runner, capsys):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "edge", "--root", str(root), "--check"])
    assert "storage.yml" not in runner.playbooks and "kubernetes.yml" in runner.playbooks
    assert not (root / "build" / "edge" / "storage.yml").exists()
    assert "not run: the site serves no data sets" in capsys.readouterr().out


def test_the_storage_stage_of_a_site_without_data_sets_is_not_run_when_chosen(root: Path, fake_runner, capsys):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "edge", "--root", str(root), "--stage", "storage"])
    assert runner.playbooks == ["validate.yml"]
    assert "not run: the site serves no data sets" in capsys.readouterr().out


def test_deploy_runs_only_the_chosen_stages(root: Path, fake_runner):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "verify", "--stage", "os"])
    assert runner.playbooks == ["validate.yml", "os.yml", "verify.yml"]


def test_deploy_connects_with_the_given_key(root: Path, fake_runner):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os", "--private-key", "/keys/id_ed25519"])
    assert runner.call("os.yml")["envvars"] == {"ANSIBLE_PRIVATE_KEY_FILE": "/keys/id_ed25519"}


def test_deploy_connects_to_a_lab_that_is_up_with_its_key(root: Path, fake_runner, monkeypatch, tmp_path: Path):
    runner = fake_runner(ALL_OK)
    key = tmp_path / "id_ed25519"
    key.write_text("")
    monkeypatch.setattr("rackform.lab.state.load", lambda site: type("LabState", (), {"ssh_key": key})())
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os"])
    assert runner.call("os.yml")["envvars"] == {"ANSIBLE_PRIVATE_KEY_FILE": str(key)}


def test_provision_gets_the_site_vault(root: Path, fake_runner):
    runner = fake_runner(ALL_OK)
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "provision"])
    assert runner.call("provision.yml")["envvars"] == {
        "RACKFORM_BMC_VAULT": "/secrets/lab/bmc_vault.yml", "ANSIBLE_VAULT_PASSWORD_FILE": "/secrets/pw"}


def test_no_vault_is_opened_without_the_provision_stage(root: Path, fake_runner, monkeypatch):
    runner = fake_runner(ALL_OK)
    monkeypatch.setattr(environment, "open_vault", None)  # calling it would fail the test
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os"])
    assert runner.call("os.yml")["envvars"] == {}


def test_an_exported_vault_is_used_as_it_is(root: Path, fake_runner, monkeypatch):
    runner = fake_runner(ALL_OK)
    monkeypatch.setenv("RACKFORM_BMC_VAULT", "/elsewhere/vault.yml")
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "provision"])
    assert runner.call("provision.yml")["envvars"] == {}


def test_a_vault_that_cannot_be_opened_exits_1_before_running_anything(root: Path, fake_runner, monkeypatch):
    runner = fake_runner(ALL_OK)

    def refuse(site, environ):
        raise environment.StageEnvironmentError("no vault password file at /nowhere")

    monkeypatch.setattr(environment, "open_vault", refuse)
    assert (cli.main(["deploy", "lab", "--root", str(root)]), runner.calls) == (1, [])


def test_a_vault_inside_a_git_work_tree_is_refused(root: Path):
    """The real rackform.secrets, in a process of its own: BMC passwords never go near the repo."""
    env = {**os.environ, "RACKFORM_SECRETS_DIR": str(REPO / "build" / "no-secrets-here")}
    env.pop("RACKFORM_BMC_VAULT", None)
    result = subprocess.run([sys.executable, "-m", "rackform.cli", "deploy", "lab", "--root", str(root)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 1 and "inside the git work tree" in result.stderr
    assert not (REPO / "build" / "no-secrets-here").exists()


def test_an_exported_key_wins_over_the_labs(root: Path, fake_runner, monkeypatch, tmp_path: Path):
    runner = fake_runner(ALL_OK)
    monkeypatch.setenv("ANSIBLE_PRIVATE_KEY_FILE", "/keys/mine")
    monkeypatch.setattr("rackform.lab.state.load", lambda site: type("LabState", (), {"ssh_key": tmp_path})())
    cli.main(["deploy", "lab", "--root", str(root), "--stage", "os"])
    assert runner.call("os.yml")["envvars"] == {}


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (["deploy"], ["SITE", "--check", "--stage", "--limit"]),
        (["lab"], ["up", "down", "status"]),
        (["lab", "up"], ["SITE"]),
        (["lab", "down"], ["SITE"]),
        (["lab", "status"], ["SITE"]),
    ],
)
def test_new_commands_have_help(command: list[str], words: list[str]):
    result = subprocess.run([sys.executable, "-m", "rackform.cli", *command, "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and all(word in result.stdout for word in words)


@pytest.fixture()
def fake_lab(monkeypatch):
    from rackform.lab import LabError, lab
    from rackform.lab.lab import LabStatus, NodeStatus

    calls: list[tuple] = []

    def up(site, root=".", progress=print):
        calls.append(("up", site))
        if site == "broken":
            raise LabError("the lab needs root (network namespaces, mounts, cgroups)")
        return LabStatus(site, [NodeStatus("mgmt-1", "host", "10.10.0.11", True, True, "running")])

    def down(site, progress=print):
        calls.append(("down", site))
        return True

    def status(site):
        nodes = [NodeStatus("mgmt-1", "host", "10.10.0.11", True, True, "running")] if site == "lab" else []
        return LabStatus(site, nodes)

    for name, function in (("up", up), ("down", down), ("status", status)):
        monkeypatch.setattr(lab, name, function)
    return calls


@pytest.mark.parametrize("action", ["up", "down"])
def test_lab_up_and_down_act_on_the_site(fake_lab, action: str):
    assert (cli.main(["lab", action, "lab"]), fake_lab) == (0, [(action, "lab")])


def test_lab_error_exits_1_with_its_message(fake_lab, capsys):
    assert cli.main(["lab", "up", "broken"]) == 1
    assert capsys.readouterr().err == "rackform: the lab needs root (network namespaces, mounts, cgroups)\n"


@pytest.mark.parametrize(("site", "code", "first_line"), [("lab", 0, "lab lab: 1/1 nodes ready"),
                                                           ("other", 1, "lab other: down")])
def test_lab_status_prints_nodes_and_exits_0_only_when_up(fake_lab, capsys, site, code, first_line):
    assert cli.main(["lab", "status", site]) == code
    assert capsys.readouterr().out.splitlines()[0] == first_line


def test_lab_up_of_an_unknown_site_is_bad_input(root: Path, capsys):
    assert cli.main(["lab", "up", "atlantis", "--root", str(root)]) == 2
    assert "no such site 'atlantis'" in capsys.readouterr().err


if __name__ == "__main__":
    record()
