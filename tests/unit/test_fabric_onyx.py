"""The collection's Onyx module (`rackform.site.onyx_config`) against the Onyx CLI emulator (a
rackform stand-in, not Onyx), driven by netmiko's unchanged `mellanox_mlnxos` driver: check
mode, first push and save, a re-run that changes nothing, pushes that fail half-way and roll
back, and (slow) the emitted fabric.yml doing the same through ansible-playbook.

The site is the shipped lab with leaf-2 running Onyx (its ports renamed Eth1/n); the
emulator listens on 127.0.0.1. The module is loaded as AnsiballZ ships it: its module_utils
registered under the collection's module_utils package, from plugins/module_utils/.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from collection_support import load_onyx_module
from hang_limit import SUBPROCESS_HANG_S
from rackform.lab.onyx_emulator import CliError, FaultDisconnect, OnyxEmulator
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.render.groups import host_groups
from rackform.render.project import build_inventory
from rackform.render.switch_configs import onyx_config_text, switch_context

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "lab-only-password-7f3a"
PORTS = 32
# What a lossless RoCE port of leaf-2 must run (docs/domain.md, "Onyx: the explicit DCB form"), gpu-1:fab1 on Eth1/5.
ROCE_LINES = [
    "lldp",
    "dcb priority-flow-control enable force",
    "dcb priority-flow-control priority 3 enable",
    "interface ethernet 1/5 description gpu-1:fab1",
    "interface ethernet 1/5 mtu 9216 force",
    "interface ethernet 1/5 dcb priority-flow-control mode on force",
    "interface ethernet 1/5 qos trust L3",
    "interface ethernet 1/5 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "interface ethernet 1/5 pfc-wd",
    "hostname leaf-2",
]


def load_onyx_config_module():
    return load_onyx_module("onyx_config.py", "rackform_onyx_config_module")


def onyx_lab_root(root: Path) -> Path:
    """The shipped lab's inputs with leaf-2 running Onyx."""
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, root / folder)
    design = root / "topologies" / "sites" / "lab.yaml"
    text = design.read_text().replace("os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102")
    design.write_text(text.replace("leaf-2:swp", "leaf-2:Eth1/"))
    return root


@pytest.fixture(scope="module")
def onyx_root(tmp_path_factory) -> Path:
    return onyx_lab_root(tmp_path_factory.mktemp("onyx-lab"))


@pytest.fixture(scope="module")
def context(onyx_root) -> dict:
    """leaf-2's template variables, as the review renderer (and Ansible) merge them."""
    inventory = build_inventory(load_site("lab", onyx_root))
    return switch_context("leaf-2", host_groups(inventory.tree)["leaf-2"], inventory.group_vars,
                          inventory.switch_vars["leaf-2"], inventory.server_vars)


def start_emulator(state_dir: Path, hostname: str = "leaf-2") -> OnyxEmulator:
    return OnyxEmulator(hostname, PORTS, state_dir, password=PASSWORD).start()


@dataclass(frozen=True)
class ModuleRun:
    result: dict
    output: str
    """What the module printed (its JSON), to look for secrets in."""


def run_module(emulator: OnyxEmulator, context: dict, *, check: bool = False, password: str = PASSWORD) -> ModuleRun:
    module = load_onyx_config_module()
    args = {
        "name": "leaf-2", "host": "127.0.0.1", "port": emulator.port, "username": "admin", "password": password,
        "known_hosts": str(emulator.scanned_known_hosts()),
        "config": onyx_config_text(context), "dscp_to_priority": context.get("fabric_switch_dscp_to_priority", {}),
        "timeout_s": 10, "_ansible_check_mode": check, "_ansible_diff": True,
    }
    printed = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        module.main()
    return ModuleRun(json.loads(printed.getvalue()), printed.getvalue())


def with_mtu(context: dict, mtu: int) -> dict:
    return {**context, "fabric_switch_mtu": mtu, "fabric_switch_pfc_priorities": [3, 4]}


def fail_once(emulator: OnyxEmulator, after_lines: int, mode: str = "error") -> None:
    """The emulator's fault knob, firing once: a line is refused (or the session drops), then
    the switch takes lines again, as after a transient fault."""
    switch = emulator.switch
    configure = switch.configure

    def configure_once(change):
        try:
            configure(change)
        except (CliError, FaultDisconnect):
            switch.inject_config_failure(None)
            switch.configure = configure
            raise

    switch.configure = configure_once
    switch.inject_config_failure(after_lines, mode)


# ---------------------------------------------------------------- check mode, first push, re-run


@dataclass(frozen=True)
class Runs:
    check: ModuleRun
    check_running: str
    first: ModuleRun
    second: ModuleRun
    second_touched: bool
    """Whether the second run rewrote the running or the saved config."""
    check_after: ModuleRun


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    # Started with its factory hostname: the first push renames it (the prompt changes mid-push).
    running = start_emulator(tmp_path_factory.mktemp("onyx-state"), hostname="switch-factory")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def runs(emulator, context) -> Runs:
    before = emulator.running_config()
    check = run_module(emulator, context, check=True)
    check_running = emulator.running_config()
    assert check_running == before
    first = run_module(emulator, context)
    stamps = (emulator.running_config_path.stat().st_mtime_ns, emulator.saved_config_path.stat().st_mtime_ns)
    second = run_module(emulator, context)
    touched = stamps != (emulator.running_config_path.stat().st_mtime_ns,
                         emulator.saved_config_path.stat().st_mtime_ns)
    return Runs(check, before, first, second, touched, run_module(emulator, context, check=True))


def test_check_mode_reports_a_change_and_shows_the_diff(runs):
    diff = runs.check.result["diff"]["prepared"].splitlines()
    assert runs.check.result["changed"] is True
    assert "+ interface ethernet 1/5 mtu 9216 force" in diff and "- hostname switch-factory" in diff


def test_check_mode_changes_and_saves_nothing(runs, emulator):
    assert runs.check.result["saved"] is False and "hostname switch-factory" in runs.check_running


def test_first_run_pushes_the_difference_and_saves(runs):
    result = runs.first.result
    assert (result["changed"], result["saved"], result.get("failed", False)) == (True, True, False)
    assert result["commands"][-1] == "hostname leaf-2"  # the rename goes last: it changes the prompt


@pytest.mark.parametrize("line", ROCE_LINES)
def test_saved_config_holds_the_roce_line(runs, emulator, line):
    assert f"   {line}\n" in emulator.saved_config_path.read_text()


def test_running_config_equals_saved_config(runs, emulator):
    assert emulator.running_config() == emulator.saved_config_path.read_text()


def test_hostname_is_renamed_and_the_session_survives(runs, emulator):
    assert emulator.switch.hostname == "leaf-2"


def test_second_run_changes_nothing(runs):
    assert (runs.second.result["changed"], runs.second.result["commands"], runs.second.result["saved"]) == (
        False, [], False)


def test_second_run_neither_pushes_nor_saves(runs):
    assert runs.second_touched is False


def test_check_mode_on_a_configured_switch_shows_no_diff(runs):
    assert runs.check_after.result["changed"] is False and "diff" not in runs.check_after.result


def test_password_never_appears_in_a_result(runs):
    assert all(PASSWORD not in run.output for run in (runs.check, runs.first, runs.second))


# ---------------------------------------------------------------- pushes that fail half-way


@dataclass(frozen=True)
class FailedPush:
    result: dict
    before: str
    """Running (and saved) config before the push."""
    running: str
    saved: str


def failed_push(emulator: OnyxEmulator, context: dict, before: str) -> FailedPush:
    """Push a changed design (MTU 9100, an extra lossless priority) that must fail."""
    result = run_module(emulator, with_mtu(context, 9100)).result
    assert result.get("failed") is True, result
    return FailedPush(result, before, emulator.running_config(), emulator.saved_config_path.read_text())


@pytest.fixture(scope="module")
def configured(tmp_path_factory, context):
    """A fresh emulator running and saving the design."""
    emulator = start_emulator(tmp_path_factory.mktemp("onyx-fault"))
    assert run_module(emulator, context).result["saved"] is True
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def refused_once(configured, context) -> FailedPush:
    """The fourth line is refused once (a transient fault): the module undoes the first three."""
    before = configured.running_config()
    fail_once(configured, after_lines=3)
    return failed_push(configured, context, before)


@pytest.fixture(scope="module")
def keeps_refusing(refused_once, configured, context) -> FailedPush:
    """The switch refuses every line after the third, the undo included."""
    before = configured.running_config()
    configured.inject_config_failure(after_lines=3)
    try:
        return failed_push(configured, context, before)
    finally:
        configured.inject_config_failure(None)


def test_rejected_line_half_way_restores_the_previous_config(refused_once):
    assert refused_once.result["rolled_back"] is True and refused_once.running == refused_once.before


def test_rejected_line_message_names_the_line_and_the_rollback(refused_once):
    message = refused_once.result["msg"]
    assert "the switch refused `interface ethernet 1/3 mtu 9100 force`: % Fault injected" in message
    assert "the previous configuration is restored" in message


def test_failed_push_saves_nothing(refused_once):
    assert refused_once.saved == refused_once.before


def test_switch_that_keeps_refusing_is_reported_half_applied(keeps_refusing):
    assert keeps_refusing.result["rolled_back"] is False
    assert "restoring the previous configuration FAILED as well" in keeps_refusing.result["msg"]


def test_switch_that_keeps_refusing_still_boots_the_previous_config(keeps_refusing):
    assert keeps_refusing.saved == keeps_refusing.before and keeps_refusing.running != keeps_refusing.before


@pytest.mark.slow
def test_dropped_session_half_way_restores_the_previous_config(tmp_path, context):
    emulator = start_emulator(tmp_path / "state")
    try:
        run_module(emulator, context)
        before = emulator.running_config()
        fail_once(emulator, after_lines=3, mode="disconnect")
        outcome = failed_push(emulator, context, before)
    finally:
        emulator.stop()
    assert outcome.result["rolled_back"] is True and outcome.running == before


# ---------------------------------------------------------------- what the module refuses


def test_dscp_map_other_than_onyxs_default_is_refused_before_login(emulator, context):
    run = run_module(emulator, {**context, "fabric_switch_dscp_to_priority": {26: 4, 48: 6}})
    assert run.result["failed"] is True
    assert "leaf-2: the design maps DSCP 26 -> 4 (Onyx's default gives 3)" in run.result["msg"]


def test_wrong_password_is_a_login_failure_not_a_traceback(emulator, context):
    run = run_module(emulator, context, password="wrong-password-91c2")
    assert run.result["failed"] is True
    assert run.result["msg"].startswith(f"leaf-2: cannot log in to 127.0.0.1:{emulator.port} as admin")
    assert "wrong-password-91c2" not in run.output and "rolled_back" not in run.result


# ---------------------------------------------------------------- the emitted fabric.yml (slow)


def playbook(project: Path, emulator: OnyxEmulator, *flags: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "RACKFORM_SWITCH_PASSWORD": PASSWORD, "RACKFORM_SWITCH_USER": "admin", "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_LOCAL_TEMP": str(project / ".ansible-tmp")}
    return subprocess.run(
        ["ansible-playbook", "fabric.yml", "--limit", "leaf-2", "-e", "ansible_host=127.0.0.1",
         "-e", f"ansible_port={emulator.port}", "-e", f"onyx_switch_known_hosts={emulator.scanned_known_hosts()}",
         *flags],
        cwd=project, env=environment, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)


@pytest.mark.slow
def test_fabric_playbook_configures_the_onyx_switch(tmp_path, onyx_root):
    project = tmp_path / "project"
    write_project(render_files(load_site("lab", onyx_root)), project)
    emulator = start_emulator(tmp_path / "state", hostname="switch-factory")
    try:
        check = playbook(project, emulator, "--check", "--diff")
        untouched = "hostname switch-factory" in emulator.running_config()
        first = playbook(project, emulator)
        second = playbook(project, emulator)
    finally:
        emulator.stop()
    assert check.returncode == 0 and untouched, check.stdout + check.stderr
    assert "+ interface ethernet 1/5 mtu 9216 force" in check.stdout
    assert (first.returncode, second.returncode) == (0, 0), first.stdout + second.stdout
    # ok=2: the role's argument check (meta/argument_specs.yml) and the configuration task
    assert "leaf-2                     : ok=2    changed=1" in first.stdout
    assert "leaf-2                     : ok=2    changed=0" in second.stdout
    assert all(PASSWORD not in run.stdout + run.stderr for run in (check, first, second))
    assert "   interface ethernet 1/5 pfc-wd\n" in emulator.saved_config_path.read_text()
