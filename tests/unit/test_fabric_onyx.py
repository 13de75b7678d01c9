"""The Onyx driver against the Onyx CLI emulator (a rackform stand-in, not Onyx), driven
by netmiko's unchanged `mellanox_mlnxos` driver: first push, saved config, a re-run that
pushes nothing, and pushes that fail half-way.

The site is the shipped lab with leaf-2 running Onyx (its ports renamed Eth1/n); the
emulator listens on 127.0.0.1 and is reached through the driver's endpoint override.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackform.fabric.context import Credentials, SwitchTarget, connection_for, switch_targets
from rackform.fabric.dispatch import connect, driver_class
from rackform.fabric.driver import ApplyFailed, FabricError, UnsupportedSwitchOs
from rackform.fabric.onyx import OnyxDriver
from rackform.fabric.sync import SyncResult, sync
from rackform.lab.onyx_emulator import CliError, FaultDisconnect, OnyxEmulator
from rackform.model.loader import load_site

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "lab-only-password"
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


def onyx_lab_root(root: Path) -> Path:
    """The shipped lab's inputs with leaf-2 running Onyx."""
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, root / folder)
    design = root / "topologies" / "sites" / "lab.yaml"
    text = design.read_text().replace("os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102")
    design.write_text(text.replace("leaf-2:swp", "leaf-2:Eth1/"))
    return root


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> SwitchTarget:
    site = load_site("lab", onyx_lab_root(tmp_path_factory.mktemp("onyx-lab")))
    return switch_targets(site, ["leaf-2"])["leaf-2"]


def start_emulator(state_dir: Path, hostname: str = "leaf-2") -> OnyxEmulator:
    return OnyxEmulator(hostname, PORTS, state_dir, password=PASSWORD).start()


def driver_for(emulator: OnyxEmulator, target: SwitchTarget) -> OnyxDriver:
    credentials = Credentials(password=PASSWORD, username="admin")
    return connect("onyx", connection_for(target, credentials, f"127.0.0.1:{emulator.port}"), target.name)


def push(emulator: OnyxEmulator, target: SwitchTarget, context: dict | None = None) -> tuple[SyncResult, list[str]]:
    shown: list[str] = []
    with driver_for(emulator, target) as driver:
        result = sync(driver, driver.render(context or target.context), show=shown.append)
    return result, shown


def with_mtu(target: SwitchTarget, mtu: int) -> dict:
    return {**target.context, "fabric_switch_mtu": mtu, "fabric_switch_pfc_priorities": [3, 4]}


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


# ---------------------------------------------------------------- first push and re-run


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    # Started with its factory hostname: the first push renames it (the prompt changes mid-push).
    running = start_emulator(tmp_path_factory.mktemp("onyx-state"), hostname="switch-factory")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def first_push(emulator, target):
    return push(emulator, target)


@pytest.fixture(scope="module")
def second_push(first_push, emulator, target):
    modified_ns = emulator.running_config_path.stat().st_mtime_ns
    result, shown = push(emulator, target)
    return result, shown, modified_ns


def test_first_push_shows_the_diff_before_applying(first_push):
    _, shown = first_push
    assert shown[0].startswith("leaf-2 (onyx, netmiko mellanox_mlnxos over SSH): ")
    assert "+ interface ethernet 1/5 mtu 9216 force" in shown[0].splitlines()
    assert shown[1:] == ["leaf-2: 46 line(s) applied (not saved yet)",
                         "leaf-2: saved (`configuration write`): the switch boots with this configuration"]


def test_first_push_applies_and_saves(first_push):
    result, _ = first_push
    assert (result.applied, result.in_sync) == (True, False)


@pytest.mark.parametrize("line", ROCE_LINES)
def test_saved_config_holds_the_roce_line(first_push, emulator, line):
    assert f"   {line}\n" in emulator.saved_config_path.read_text()


def test_running_config_equals_saved_config(first_push, emulator):
    assert emulator.running_config() == emulator.saved_config_path.read_text()


def test_hostname_is_renamed_last_and_the_session_survives(first_push, emulator):
    assert emulator.switch.hostname == "leaf-2"


def test_second_push_finds_nothing_to_change(second_push):
    result, shown, _ = second_push
    assert (result.in_sync, result.applied, shown) == (
        True, False, ["leaf-2: runs its designed configuration; nothing to change"])


def test_second_push_sends_no_configuration_line(second_push, emulator):
    *_, modified_ns = second_push
    assert emulator.running_config_path.stat().st_mtime_ns == modified_ns


# ---------------------------------------------------------------- pushes that fail half-way


@dataclass(frozen=True)
class FailedPush:
    error: ApplyFailed
    before: str
    """Running (and saved) config before the push."""
    running: str
    saved: str


def failed_push(emulator: OnyxEmulator, target: SwitchTarget, before: str) -> FailedPush:
    """Push a changed design (MTU 9100, an extra lossless priority) that must fail."""
    with pytest.raises(ApplyFailed) as failed:
        push(emulator, target, with_mtu(target, 9100))
    return FailedPush(failed.value, before, emulator.running_config(), emulator.saved_config_path.read_text())


@pytest.fixture(scope="module")
def configured(tmp_path_factory, target):
    """A fresh emulator running and saving the design."""
    emulator = start_emulator(tmp_path_factory.mktemp("onyx-fault"))
    push(emulator, target)
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def refused_once(configured, target) -> FailedPush:
    """The fourth line is refused once (a transient fault): the driver undoes the first three."""
    before = configured.running_config()
    fail_once(configured, after_lines=3)
    return failed_push(configured, target, before)


@pytest.fixture(scope="module")
def keeps_refusing(refused_once, configured, target) -> FailedPush:
    """The switch refuses every line after the third, the driver's undo included."""
    before = configured.running_config()
    configured.inject_config_failure(after_lines=3)
    try:
        return failed_push(configured, target, before)
    finally:
        configured.inject_config_failure(None)


def test_refused_line_half_way_restores_the_previous_config(refused_once):
    assert refused_once.error.rolled_back and refused_once.running == refused_once.before


def test_refused_line_message_names_the_line_and_the_rollback(refused_once):
    message = str(refused_once.error)
    assert "the switch refused `interface ethernet 1/3 mtu 9100 force`: % Fault injected" in message
    assert "the previous configuration is restored" in message


def test_failed_push_saves_nothing(refused_once):
    assert refused_once.saved == refused_once.before


def test_switch_that_keeps_refusing_is_reported_half_applied(keeps_refusing):
    assert not keeps_refusing.error.rolled_back
    assert "restoring the previous configuration FAILED as well" in str(keeps_refusing.error)


def test_switch_that_keeps_refusing_still_boots_the_previous_config(keeps_refusing):
    assert keeps_refusing.saved == keeps_refusing.before and keeps_refusing.running != keeps_refusing.before


@pytest.mark.slow
def test_dropped_session_half_way_restores_the_previous_config(tmp_path, target):
    emulator = start_emulator(tmp_path / "state")
    try:
        push(emulator, target)
        before = emulator.running_config()
        fail_once(emulator, after_lines=3, mode="disconnect")
        outcome = failed_push(emulator, target, before)
    finally:
        emulator.stop()
    assert outcome.error.rolled_back and outcome.running == before


# ---------------------------------------------------------------- what the driver refuses


def test_dscp_map_other_than_onyxs_default_is_refused(target):
    context = {**target.context, "fabric_switch_dscp_to_priority": {26: 4, 48: 6}}
    with pytest.raises(FabricError, match=r"DSCP 26 -> 4 \(Onyx's default gives 3\)"):
        driver_class("onyx")(connection_for(target, Credentials())).render(context)


def test_unknown_switch_os_lists_the_supported_ones():
    with pytest.raises(UnsupportedSwitchOs, match="no configuration driver for switch OS 'eos'; supported: cumulus, onyx"):
        driver_class("eos")


def test_wrong_password_is_a_login_error_not_a_traceback(emulator, target):
    connection = connection_for(target, Credentials(password="wrong", username="admin"), f"127.0.0.1:{emulator.port}")
    with pytest.raises(FabricError, match=r"leaf-2: cannot log in to 127\.0\.0\.1:\d+ as admin"):
        with connect("onyx", connection, "leaf-2") as driver:
            driver.running()
