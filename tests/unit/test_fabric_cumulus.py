"""The Cumulus driver (files over SSH) against an in-memory switch: what it reads, the
diff it shows, what it writes and reloads, and how it undoes a failed reload.

The SSH session is replaced by `FakeSwitch` (files and the commands run); the lab test
(tests/lab/test_fabric_lab.py) drives the same driver over real SSH.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.fabric.context import Credentials, connection_for, switch_targets
from rackform.fabric.cumulus import FRR_DAEMONS, INTERFACES, CumulusDriver, with_line
from rackform.fabric.driver import ApplyFailed, FabricError
from rackform.fabric.ssh import CommandResult
from rackform.fabric.sync import sync
from rackform.model.loader import load_site
from rackform.render.switch_configs import role_defaults

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = role_defaults()
FABRIC_FILE = DEFAULTS["switch_baseline_interfaces_file"]
QOS_FILE = DEFAULTS["switch_baseline_qos_file"]
PORT_SCRIPT = DEFAULTS["switch_baseline_port_settings_script"]
SOURCE_LINE = "source /etc/network/interfaces.d/*.intf"


class FakeSwitch:
    """Files and commands of a switch. A command in `failing` exits 1, once unless `keeps_failing`."""

    def __init__(self, files: dict[str, str], failing: set[str] = frozenset(), switchd: bool = False,
                 keeps_failing: bool = False):
        self.files = dict(files)
        self.failing = set(failing)
        self.keeps_failing = keeps_failing
        self.switchd = switchd
        self.commands: list[str] = []
        self.writes: list[str] = []

    def read_files(self, paths):
        return {path: self.files.get(path) for path in paths}

    def write_file(self, path, content, mode, owner):
        self.writes.append(path)
        self.files[path] = content

    def remove_file(self, path):
        self.files.pop(path, None)

    def run(self, command, stdin=None):
        self.commands.append(command)
        if command.startswith("test -e"):
            return CommandResult(0 if self.switchd else 1, "", "")
        if command in self.failing:
            if not self.keeps_failing:
                self.failing.discard(command)
            return CommandResult(1, "", "error: swp1: invalid attribute")
        return CommandResult(0, "", "")

    def check(self, command, stdin=None):
        result = self.run(command, stdin)
        if result.status:
            raise FabricError(f"leaf-1: `{command}` failed: {result.stderr}")
        return result.stdout

    def close(self):
        pass


@pytest.fixture(scope="module")
def target():
    return switch_targets(load_site("lab", ROOT), ["leaf-1"])["leaf-1"]


def driver_on(switch: FakeSwitch, target) -> CumulusDriver:
    driver = CumulusDriver(connection_for(target, Credentials()), "leaf-1")
    driver._ssh = switch
    return driver


@pytest.fixture
def desired(target) -> dict[str, str]:
    return CumulusDriver(connection_for(target, Credentials()), "leaf-1").render(target.context)


def configured(desired) -> dict[str, str]:
    """A switch already running the design (and the role's two line edits)."""
    return {**desired, INTERFACES: f"auto lo\n{SOURCE_LINE}\n", FRR_DAEMONS: "zebra=yes\nbgpd=yes\n"}


def test_switch_running_its_design_gets_nothing(desired, target):
    switch = FakeSwitch(configured(desired))
    result = sync(driver_on(switch, target), desired, show=lambda line: None)
    assert (result.in_sync, switch.writes) == (True, [])


def test_changed_fragment_shows_a_unified_diff(desired, target):
    files = configured(desired)
    files[FABRIC_FILE] = files[FABRIC_FILE].replace("mtu 9216", "mtu 9100", 1)
    driver = driver_on(FakeSwitch(files), target)
    text = driver.diff(desired, driver.running()).text.splitlines()
    assert ("-    mtu 9100" in text and "+    mtu 9216" in text
            and f"--- leaf-1:{FABRIC_FILE} (running)" in text)


def test_changed_fragment_is_written_then_interfaces_reloaded(desired, target):
    files = configured(desired)
    files[FABRIC_FILE] = "stale\n"
    switch = FakeSwitch(files)
    sync(driver_on(switch, target), desired, show=lambda line: None)
    assert (switch.writes, switch.commands[-2:]) == ([FABRIC_FILE], ["ifreload -a", PORT_SCRIPT])


def test_changed_frr_conf_reloads_frr_only(desired, target):
    files = configured(desired)
    files["/etc/frr/frr.conf"] = "stale\n"
    switch = FakeSwitch(files)
    sync(driver_on(switch, target), desired, show=lambda line: None)
    assert switch.commands[-1:] == ["systemctl reload-or-restart frr"] and "ifreload -a" not in switch.commands


def test_missing_source_line_is_added_to_etc_network_interfaces(desired, target):
    files = {**configured(desired), INTERFACES: "auto lo\n"}
    switch = FakeSwitch(files)
    sync(driver_on(switch, target), desired, show=lambda line: None)
    assert switch.files[INTERFACES] == f"auto lo\n{SOURCE_LINE}\n"


def test_datapath_file_without_switchd_is_written_and_said_not_applied(desired, target):
    files = configured(desired)
    del files[QOS_FILE]
    switch = FakeSwitch(files)
    result = sync(driver_on(switch, target), desired, show=lambda line: None)
    assert switch.files[QOS_FILE] == desired[QOS_FILE]
    assert any("written but NOT applied: no switchd" in note for note in result.notes)


def test_datapath_file_with_switchd_reloads_it(desired, target):
    files = configured(desired)
    del files[QOS_FILE]
    switch = FakeSwitch(files, switchd=True)
    sync(driver_on(switch, target), desired, show=lambda line: None)
    assert switch.commands[-1] == "systemctl reload switchd.service"


def failed_sync(switch: FakeSwitch, desired, target) -> ApplyFailed:
    with pytest.raises(ApplyFailed) as failed:
        sync(driver_on(switch, target), desired, show=lambda line: None)
    return failed.value


@pytest.fixture
def half_new(desired) -> dict[str, str]:
    """A switch whose fabric fragment and datapath file differ from the design."""
    files = configured(desired)
    files[FABRIC_FILE] = "previous\n"
    del files[QOS_FILE]
    return files


def test_failed_reload_puts_the_previous_files_back(half_new, desired, target):
    switch = FakeSwitch(half_new, failing={"ifreload -a"})
    failed = failed_sync(switch, desired, target)
    assert (switch.files[FABRIC_FILE], QOS_FILE in switch.files) == ("previous\n", False)
    assert failed.rolled_back


def test_failed_reload_says_what_failed_and_that_the_files_are_back(half_new, desired, target):
    failed = failed_sync(FakeSwitch(half_new, failing={"ifreload -a"}), desired, target)
    assert str(failed) == ("leaf-1: applying the configuration failed part-way: `ifreload -a` failed: "
                           "error: swp1: invalid attribute; the previous files are restored and reloaded")


def test_reload_that_keeps_failing_is_reported(half_new, desired, target):
    failed = failed_sync(FakeSwitch(half_new, failing={"ifreload -a"}, keeps_failing=True), desired, target)
    assert not failed.rolled_back and "restoring the previous files FAILED as well" in str(failed)


def test_files_are_the_saved_configuration(desired, target):
    assert "nothing else to save" in driver_on(FakeSwitch({}), target).save()


@pytest.mark.parametrize(
    "text, line, expected",
    [
        ("auto lo\n", SOURCE_LINE, f"auto lo\n{SOURCE_LINE}\n"),
        (f"auto lo\n{SOURCE_LINE}\n", SOURCE_LINE, f"auto lo\n{SOURCE_LINE}\n"),
        ("zebra=yes\nbgpd=no\nospfd=no\n", "bgpd=yes", "zebra=yes\nbgpd=yes\nospfd=no\n"),
        (None, "bgpd=yes", "bgpd=yes\n"),
    ],
)
def test_line_edits_match_the_roles_lineinfile(text, line, expected):
    assert with_line(text, line) == expected
