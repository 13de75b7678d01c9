"""What rackform asks of one BMC, over one open LanSession: power, boot device, sensors,
firmware, FRU and its LAN MAC.

Power changes are confirmed by reading the state back until it matches, with a timeout
(docs/domain.md, "IPMI safety rules": confirm every power change). Sensors, FRU decoding and the boot device go
through pyghmi's command layer run on our session (rackform.ipmi.pyghmi_layer), so SDR and
FRU decoding is pyghmi's, maintained upstream, while the transport and its cipher policy
are ours. pyghmi is imported only when one of those is used: a fleet power run does not
pay for it (about 11 MiB).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from rackform.ipmi.errors import IpmiError, Reason
from rackform.ipmi.module_utils import load
from rackform.ipmi.session import LanSession

_policy = load("rackform_ipmi_policy")  # the read-back rules the Ansible module runs too

log = logging.getLogger(__name__)

# netfn, command pairs (IPMI 2.0 tables G-1 and the DCMI 1.5 specification)
GET_DEVICE_ID = (0x06, 0x01)
GET_CHASSIS_STATUS = (0x00, 0x01)
CHASSIS_CONTROL = (0x00, 0x02)
GET_LAN_CONFIGURATION = (0x0C, 0x02)
DCMI_GET_POWER_READING = (0x2C, 0x02)
DCMI_GROUP = 0xDC
DCMI_MEASUREMENT_ACTIVE = 0x40
LAN_PARAMETER_MAC = 5
GET_FRU_AREA_INFO = (0x0A, 0x10)
READ_FRU_DATA = (0x0A, 0x11)
FRU_FIRST_CHUNK = 128
FRU_SMALLEST_CHUNK = 8
FRU_TOO_LONG = frozenset({0xC8, 0xC9, 0xCA})  # request too long, out of range, cannot return that many

CHASSIS_CONTROL_CODES = _policy.CHASSIS_CONTROL_CODES
POWER_ACTIONS = _policy.POWER_ACTIONS
EXPECTED_STATE = _policy.EXPECTED_STATE
"""The power state each action ends in, which the read-back must show."""

BOOT_DEVICES = {"pxe": "network", "disk": "hd", "cdrom": "optical", "bios": "setup", "none": "default"}
"""rackform's boot device names -> pyghmi's (`none` clears any override)."""


@dataclass(frozen=True, slots=True)
class ConfirmPolicy:
    """How a power change is confirmed: poll the state until it matches, within a deadline."""

    timeout_s: float = 30.0
    soft_timeout_s: float = 300.0
    """A soft power off waits for the OS to shut down."""
    first_poll_s: float = 0.0
    """The first read-back goes right after the BMC accepted the command."""
    poll_interval_s: float = 1.0
    """Then once a second at most: BMCs crash when hammered (Ironic waits 5 s between commands)."""

    def deadline_s(self, action: str) -> float:
        return self.soft_timeout_s if action == "soft" else self.timeout_s


@dataclass(frozen=True, slots=True)
class PowerChange:
    action: str
    before: str
    after: str
    changed: bool
    waited_s: float


@dataclass(frozen=True, slots=True)
class Reading:
    name: str
    value: float | None
    units: str
    kind: str  # pyghmi's sensor type: Temperature, Power, Fan ...


@dataclass(frozen=True, slots=True)
class Inventory:
    """What a BMC's FRU says the machine is; None where it does not say."""

    serial: str | None = None
    product: str | None = None
    manufacturer: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceId:
    manufacturer_id: int
    product_id: int
    firmware: str  # as ipmitool prints it: major.minor (BCD), e.g. 1.00


class BmcClient:
    """One BMC's operations over an open session. One caller at a time."""

    def __init__(self, session: LanSession, confirm: ConfirmPolicy = ConfirmPolicy(),
                 sleep: Callable[[float], None] = time.sleep):
        self.session = session
        self.confirm = confirm
        self._sleep = sleep
        self._pyghmi = None  # pyghmi's command layer, built (and pyghmi imported) on first use

    @property
    def address(self) -> str:
        return self.session.address

    @property
    def pyghmi(self):
        """pyghmi's Command on this session (rackform.ipmi.pyghmi_layer)."""
        if self._pyghmi is None:
            from rackform.ipmi.pyghmi_layer import PyghmiCommand

            self._pyghmi = PyghmiCommand(self.session)
        return self._pyghmi

    # --- power ---------------------------------------------------------------------------------

    def power_state(self) -> str:
        """`on` or `off`, from Get Chassis Status."""
        return self._power_from(self.session.command(*GET_CHASSIS_STATUS))

    def power_state_steps(self):
        """`power_state` as the session's steps (rackform.ipmi.loop runs many at once)."""
        return self._power_from((yield from self.session.command_steps(*GET_CHASSIS_STATUS)))

    def _power_from(self, data: bytes) -> str:
        if not data:
            raise IpmiError(Reason.PROTOCOL, f"{self.address} sent an empty chassis status")
        return "on" if data[0] & 0x01 else "off"

    def set_power(self, action: str) -> PowerChange:
        """Carry out a power action and confirm it by reading the state back.

        Converges: `on` when on, `off`/`soft` when off send nothing. `cycle` and `reset`
        of a host that is off power it on instead (IPMI leaves an off chassis off).
        """
        def command_steps(*request):
            return _policy.called(lambda: self.session.command(*request))

        return _policy.run_blocking(self._set_power_steps(
            action, lambda: _policy.called(self.power_state), command_steps, _policy.blocking_pauses(self._sleep)))

    def set_power_steps(self, action: str, pause_steps):
        """`set_power` as the session's steps; each pause is `pause_steps(seconds)`."""
        return self._set_power_steps(action, self.power_state_steps, self.session.command_steps, pause_steps)

    def _set_power_steps(self, action: str, read_steps, command_steps, pause_steps):
        if action not in CHASSIS_CONTROL_CODES:
            raise ValueError(f"unknown power action {action!r} (expected one of {', '.join(POWER_ACTIONS)})")
        before = yield from read_steps()
        sent, expected = _policy.power_plan(action, before)
        if sent is None:
            return PowerChange(action, before, before, changed=False, waited_s=0.0)
        yield from command_steps(*CHASSIS_CONTROL, bytes((CHASSIS_CONTROL_CODES[sent],)))
        log.debug("%s: chassis control %s sent (was %s)", self.address, sent, before)
        after, waited_s, confirmed = yield from _policy.await_power_steps(
            read_steps, expected, self.confirm.deadline_s(action), self.confirm.poll_interval_s,
            self.confirm.first_poll_s, pause_steps)
        if not confirmed:
            raise IpmiError(Reason.NOT_CONFIRMED, f"{self.address} accepted the change but still reads "
                                                  f"{after} (expected {expected}) after {waited_s:.1f} s")
        return PowerChange(action, before, after, changed=True, waited_s=waited_s)

    # --- boot device ---------------------------------------------------------------------------

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        """Boot from `device` next time (one time unless persistent): pxe, disk, cdrom, bios, none."""
        if device not in BOOT_DEVICES:
            raise ValueError(f"unknown boot device {device!r} (expected one of {', '.join(BOOT_DEVICES)})")
        self._pyghmi_call(lambda: self.pyghmi.set_bootdev(BOOT_DEVICES[device], persist=persistent),
                          "Set System Boot Options")

    # --- identity and inventory ----------------------------------------------------------------

    def device_id(self) -> DeviceId:
        data = self.session.command(*GET_DEVICE_ID)
        if len(data) < 11:
            raise IpmiError(Reason.PROTOCOL, f"{self.address} sent a short device id ({len(data)} bytes)")
        manufacturer = int.from_bytes(data[6:9], "little") & 0x0FFFFF
        product = struct.unpack_from("<H", data, 9)[0]
        return DeviceId(manufacturer, product, f"{data[2] & 0x7F}.{data[3]:02x}")

    def firmware(self) -> str:
        return self.device_id().firmware

    def fru(self) -> dict[str, str] | None:
        """The board/product FRU fields (serial, product, manufacturer), or None where not offered.

        The bytes are read here, in chunks that shrink when the BMC says they are too big
        (pyghmi asks for 224 and gives up on ipmi_sim's 0xC8); pyghmi decodes them.
        """
        try:
            image = self.fru_image()
        except IpmiError as error:
            if error.reason is Reason.COMMAND_FAILED:
                return None  # no FRU device 0 (ipmi_sim unless configured; some blades)
            raise
        if not image:
            return None
        from rackform.ipmi.pyghmi_layer import decode_fru

        try:
            info = decode_fru(image)
        except (IndexError, ValueError) as error:
            raise IpmiError(Reason.PROTOCOL, f"{self.address}: undecodable FRU data ({error})") from None
        if not info:
            return None
        return {key: str(value).strip() for key, value in info.items()
                if isinstance(value, (str, int)) and str(value).strip()}

    def fru_image(self, fru_id: int = 0) -> bytes:
        """The raw FRU inventory area `fru_id` (Get FRU Inventory Area Info, then Read FRU Data)."""
        info = self.session.command(*GET_FRU_AREA_INFO, bytes((fru_id,)))
        if len(info) < 3:
            raise IpmiError(Reason.PROTOCOL, f"{self.address} sent a short FRU area info")
        size, unit = info[0] | info[1] << 8, 2 if info[2] & 0x01 else 1  # bit 0: accessed by words
        image, offset, chunk = bytearray(), 0, FRU_FIRST_CHUNK
        while offset < size:
            count = min(chunk, size - offset)
            response = self.session.request(*READ_FRU_DATA, bytes((fru_id, (offset // unit) & 0xFF,
                                                                   (offset // unit) >> 8, count // unit or 1)))
            if response.completion_code in FRU_TOO_LONG and chunk > FRU_SMALLEST_CHUNK:
                chunk //= 2
                continue
            if response.completion_code or not response.data or response.data[0] == 0:
                if response.completion_code:
                    raise IpmiError(Reason.COMMAND_FAILED, f"{self.address} answered Read FRU Data with "
                                                           f"completion code {response.completion_code:#04x}",
                                    completion_code=response.completion_code)
                break
            image += response.data[1:]
            offset += response.data[0] * unit
        return bytes(image[:size])

    def inventory(self) -> Inventory:
        """Serial, product and manufacturer from FRU 0 (product area, else chassis, else board)."""
        info = self.fru() or {}

        def first(*keys: str) -> str | None:
            return next((info[key] for key in keys if info.get(key)), None)

        return Inventory(serial=first("Serial Number", "Chassis serial number", "Board serial number"),
                         product=first("Product name", "Board product name"),
                         manufacturer=first("Manufacturer", "Board manufacturer"))

    def serial(self) -> str | None:
        """The product serial from FRU 0 (else chassis, else board), None when not offered."""
        return self.inventory().serial

    def lan_mac(self, channel: int | None = None) -> str | None:
        """The BMC's own MAC (LAN configuration parameter 5); None when it reports none."""
        if channel is None:
            capabilities = self.session.capabilities
            channel = capabilities.channel if capabilities else 1
        response = self.session.request(*GET_LAN_CONFIGURATION, bytes((channel, LAN_PARAMETER_MAC, 0, 0)))
        if response.completion_code or len(response.data) < 7:
            return None
        mac = response.data[1:7]
        if not any(mac) or mac == b"\xff" * 6:
            return None
        return ":".join(f"{byte:02x}" for byte in mac)

    # --- sensors -------------------------------------------------------------------------------

    def sensors(self) -> list[Reading]:
        """Every sensor with a reading, through the BMC's SDR repository (pyghmi decodes it)."""
        readings = self._pyghmi_call(lambda: list(self.pyghmi.get_sensor_data()), "sensor read")
        return [Reading(r.name, r.value, r.units or "", r.type or "") for r in readings]

    def power_draw_w(self, readings: list[Reading] | None = None) -> float | None:
        """The node's power draw: DCMI's reading when the BMC has one, else its watt sensors."""
        dcmi = self._dcmi_power_w()
        if dcmi is not None:
            return dcmi
        return power_from_sensors(self.sensors() if readings is None else readings)

    def _dcmi_power_w(self) -> float | None:
        response = self.session.request(*DCMI_GET_POWER_READING, bytes((DCMI_GROUP, 0x01, 0x00, 0x00)))
        data = response.data
        if response.completion_code or len(data) < 18 or data[0] != DCMI_GROUP:
            return None
        if not data[17] & DCMI_MEASUREMENT_ACTIVE:
            return None
        return float(struct.unpack_from("<H", data, 1)[0])

    def _pyghmi_call(self, call, what: str):
        from pyghmi import exceptions as pyghmi_exceptions

        try:
            return call()
        except pyghmi_exceptions.IpmiException as error:
            code = getattr(error, "ipmicode", None)
            raise IpmiError(Reason.COMMAND_FAILED, f"{self.address}: {what} failed: {error}",
                            completion_code=code) from None


def power_from_sensors(readings: list[Reading]) -> float | None:
    """The node's draw from its watt sensors: the largest one.

    A BMC that has a system-level sensor and per-PSU ones reports the total as the
    largest; summing would count twice.
    """
    watts = [r.value for r in readings if r.units == "W" and r.value is not None]
    return max(watts) if watts else None


def temperatures_c(readings: list[Reading]) -> dict[str, float]:
    return {r.name: r.value for r in readings if r.units in ("°C", "C") and r.value is not None}
