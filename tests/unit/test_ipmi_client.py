"""One BMC's operations (rackform.ipmi.client) against the fake BMC: power changes confirmed
by read-back, boot device, identity, FRU, MAC and power draw."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
from pyghmi.ipmi import command as pyghmi_command

from rackform.ipmi.client import BmcClient, ConfirmPolicy, Reading, power_from_sensors, temperatures_c
from rackform.ipmi.credentials import Credentials
from rackform.ipmi.errors import IpmiError, Reason
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.lab.fru import fru_area
from rackform.ipmi.pyghmi_layer import PyghmiCommand
from rackform.ipmi.session import LanSession, Timeouts

LOGIN = Credentials("ADMIN", "ADMIN")


class Clock:
    """Records the client's pauses instead of sleeping."""

    def __init__(self):
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


def client_for(fake: FakeBmc, confirm: ConfirmPolicy = ConfirmPolicy(), sleep=None) -> tuple[BmcClient, LanSession]:
    session = LanSession(fake.address, LOGIN, port=fake.port, timeouts=Timeouts(0.5, 1))
    session.open()
    return BmcClient(session, confirm, sleep or Clock()), session


@pytest.fixture()
def fake(request):
    options = getattr(request, "param", {})
    with FakeBmc(FakeBmcConfig(**options)) as bmc:
        yield bmc


@pytest.fixture()
def client(fake):
    client, session = client_for(fake)
    yield client
    session.close()


# --- power ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fake", "action", "after"), [
    ({"power": "off"}, "on", "on"),
    ({"power": "on"}, "off", "off"),
    ({"power": "on"}, "soft", "off"),
    ({"power": "on"}, "cycle", "on"),
    ({"power": "on"}, "reset", "on"),
], indirect=["fake"])
def test_power_action_ends_in_its_state(fake, client, action: str, after: str):
    change = client.set_power(action)
    assert (change.after, change.changed, fake.power) == (after, True, after)


@pytest.mark.parametrize(("fake", "action"), [({"power": "on"}, "on"), ({"power": "off"}, "off"),
                                              ({"power": "off"}, "soft")], indirect=["fake"])
def test_power_action_already_done_sends_nothing(fake, client, action: str):
    change = client.set_power(action)
    assert (change.changed, (0x00, 0x02) in fake.commands) == (False, False)


@pytest.mark.parametrize(("fake", "action"), [({"power": "off"}, "cycle"), ({"power": "off"}, "reset")],
                         indirect=["fake"])
def test_cycle_or_reset_of_a_host_that_is_off_powers_it_on(fake, client, action: str):
    assert (client.set_power(action).after, fake.power) == ("on", "on")


@pytest.mark.parametrize("fake", [{"power": "off", "power_lag_reads": 3}], indirect=True)
def test_a_slow_power_change_is_polled_until_it_shows(fake):
    clock = Clock()
    client, session = client_for(fake, ConfirmPolicy(timeout_s=30, poll_interval_s=1.0), clock)
    with session:
        change = client.set_power("on")
    assert (change.after, clock.pauses) == ("on", [0.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("fake", [{"power": "off", "ignore_power_commands": True}], indirect=True)
def test_a_change_that_never_shows_is_not_confirmed(fake):
    client, session = client_for(fake, ConfirmPolicy(timeout_s=0.3, poll_interval_s=0.05), sleep=lambda s: None)
    with session, pytest.raises(IpmiError) as raised:
        client.set_power("on")
    assert raised.value.reason is Reason.NOT_CONFIRMED and "still reads off" in raised.value.message


def test_unknown_power_action_is_refused(client):
    with pytest.raises(ValueError, match="unknown power action"):
        client.set_power("explode")


@pytest.mark.parametrize("fake", [{"busy_replies": 1}], indirect=True)
def test_busy_bmc_is_a_retryable_failure(fake, client):
    with pytest.raises(IpmiError) as raised:
        client.set_power("on")
    assert (raised.value.reason, raised.value.retryable) == (Reason.COMMAND_FAILED, True)


# --- boot device ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("device", "selector"), [("pxe", 0x1), ("disk", 0x2), ("cdrom", 0x5), ("bios", 0x6)])
def test_boot_device_is_sent_as_the_ipmi_selector(fake, client, device: str, selector: int):
    client.set_boot_device(device)
    assert fake.boot_device == selector


def test_unknown_boot_device_is_refused(client):
    with pytest.raises(ValueError, match="unknown boot device"):
        client.set_boot_device("floppy")


# --- identity, inventory, sensors ------------------------------------------------------------------


@pytest.mark.parametrize("fake", [{"firmware": (3, 0x05)}], indirect=True)
def test_firmware_is_printed_as_ipmitool_does(fake, client):
    assert client.firmware() == "3.05"


@pytest.mark.parametrize("fake", [{"fru": fru_area("Acme", "GPU-9000", "SN-0042")}], indirect=True)
def test_serial_comes_from_the_fru(fake, client):
    assert client.serial() == "SN-0042"


@pytest.mark.parametrize("fake", [{"fru": fru_area("Acme", "GPU-9000", "SN-0042"), "fru_max_read": 20}],
                         indirect=True)
def test_fru_is_read_in_smaller_chunks_when_the_bmc_wants(fake, client):
    assert client.serial() == "SN-0042"


def test_no_fru_is_none(client):
    assert (client.fru(), client.serial()) == (None, None)


def test_lan_mac_is_the_bmcs_own(client):
    assert client.lan_mac() == "02:00:00:aa:bb:cc"


@pytest.mark.parametrize("fake", [{"mac": None}], indirect=True)
def test_no_mac_is_none(fake, client):
    assert client.lan_mac() is None


@pytest.mark.parametrize("fake", [{"dcmi_power_w": 745}], indirect=True)
def test_dcmi_power_reading_is_preferred(fake, client):
    assert client.power_draw_w([Reading("PSU1 In", 300.0, "W", "Power")]) == 745.0


def test_without_dcmi_power_comes_from_watt_sensors(client):
    assert client.power_draw_w([Reading("Inlet", 22.0, "°C", "Temperature"), Reading("Power", 410.0, "W", "Power")]) == 410.0


def test_the_largest_watt_sensor_is_the_node_total():
    readings = [Reading("PSU1 In", 400.0, "W", "Power"), Reading("Sys Power", 790.0, "W", "Power")]
    assert power_from_sensors(readings) == 790.0


def test_no_watt_sensor_is_no_reading():
    assert power_from_sensors([Reading("Inlet", 22.0, "°C", "Temperature")]) is None


def test_temperatures_are_the_celsius_readings():
    readings = [Reading("Inlet", 22.0, "°C", "Temperature"), Reading("Power", 410.0, "W", "Power"),
                Reading("CPU", None, "°C", "Temperature")]
    assert temperatures_c(readings) == {"Inlet": 22.0}


def test_no_sdr_repository_is_a_failed_command(client):
    with pytest.raises(IpmiError) as raised:
        client.sensors()
    assert raised.value.reason is Reason.COMMAND_FAILED


# --- the pyghmi adapter ----------------------------------------------------------------------------


def _attributes_set_in(function) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name) and node.value.id == "self"}


def test_adapter_sets_every_attribute_pyghmis_constructor_sets():
    assert _attributes_set_in(pyghmi_command.Command.__init__) <= _attributes_set_in(PyghmiCommand.__init__)


def test_adapter_runs_pyghmi_commands_on_our_session(fake, client):
    assert client.pyghmi.get_power() == {"powerstate": "off"}


def test_a_power_run_does_not_import_pyghmi():
    import subprocess
    import sys

    probe = ("import sys; import rackform.ipmi.fleet, rackform.ipmi.status, rackform.ipmi.discovery; "
             "print(sorted(m for m in sys.modules if m.startswith('pyghmi')))")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout == "[]\n"
