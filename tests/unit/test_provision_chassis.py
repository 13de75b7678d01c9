"""Power and boot device with read-back (rackform's IPMI module), against an in-memory BMC."""

from __future__ import annotations

import pytest

from provision_support import FakeBmc, FakeIpmi, load_ipmi_modules

chassis = load_ipmi_modules()["rackform_ipmi_chassis"]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def power(bmc: FakeBmc, wanted: str, timeout_s: float = 10.0) -> dict:
    clock = FakeClock()
    return chassis.set_power(FakeIpmi(bmc), wanted, timeout_s, poll_s=0.5, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize(("before", "wanted"), [("on", "on"), ("off", "off"), ("off", "soft")])
def test_a_chassis_already_there_gets_no_command(before, wanted):
    bmc = FakeBmc(power=before)
    assert (power(bmc, wanted)["changed"], bmc.writes) == (False, [])


@pytest.mark.parametrize(("before", "wanted", "command", "after"), [
    ("off", "on", "power on", "on"),
    ("on", "off", "power off", "off"),
    ("on", "soft", "power soft", "off"),
    ("on", "cycle", "power cycle", "on"),
    ("on", "reset", "power reset", "on"),
    ("off", "cycle", "power on", "on"),
    ("off", "reset", "power on", "on"),
])
def test_power_changes_send_one_command_and_read_it_back(before, wanted, command, after):
    bmc = FakeBmc(power=before)
    result = power(bmc, wanted)
    assert (bmc.writes, result["power"], result["changed"]) == ([command], after, True)


def test_power_waits_until_the_state_reads_back():
    bmc = FakeBmc(power="on", power_lag_reads=3)
    assert power(bmc, "soft")["power"] == "off"


def test_a_state_that_never_reads_back_fails_after_the_timeout():
    bmc = FakeBmc(power="on", power_lag_reads=1000)
    with pytest.raises(chassis.ChassisError, match="still reads on, not off, 5 s later"):
        power(bmc, "soft", timeout_s=5.0)


def test_an_unknown_power_state_is_refused():
    with pytest.raises(chassis.ChassisError, match="unknown power state"):
        power(FakeBmc(), "hibernate")


@pytest.mark.parametrize("current", ["default", "hd"])
def test_disk_is_not_sent_when_nothing_else_is_set(current):
    bmc = FakeBmc(boot_device=current)
    assert (chassis.set_boot_device(FakeIpmi(bmc), "disk")["changed"], bmc.writes) == (False, [])


def test_disk_replaces_a_network_override():
    bmc = FakeBmc(boot_device="network", boot_persistent=True)
    chassis.set_boot_device(FakeIpmi(bmc), "disk")
    assert bmc.writes == ["bootdev hd"]


def test_pxe_is_one_time_by_default():
    bmc = FakeBmc()
    chassis.set_boot_device(FakeIpmi(bmc), "pxe")
    assert (bmc.boot_device, bmc.boot_persistent) == ("network", False)


def test_a_pending_one_time_pxe_is_left_alone():
    bmc = FakeBmc(boot_device="network", boot_persistent=False)
    assert (chassis.set_boot_device(FakeIpmi(bmc), "pxe")["changed"], bmc.writes) == (False, [])
