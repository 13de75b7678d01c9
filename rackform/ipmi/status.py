"""A site's BMCs at a glance: each node's power state, draw, temperatures and firmware, whether
a weak login (cipher suite 0, IPMI 1.5) still gets in, and the measured power of each rack
against its budget (`rackform bmc status SITE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackform.ipmi import prelogin
from rackform.ipmi.client import BmcClient, DeviceId, Inventory, Reading, temperatures_c
from rackform.ipmi.errors import IpmiError, Reason
from rackform.ipmi.fleet import BmcTarget, NodeResult
from rackform.model.site import Site


@dataclass(frozen=True, slots=True)
class NodeStatus:
    power: str
    power_draw_w: float | None
    temperatures_c: dict[str, float] = field(default_factory=dict)
    firmware: str | None = None
    inventory: Inventory = Inventory()
    """Serial and product from the BMC's FRU, where it offers them."""
    device: DeviceId | None = None
    weak_logins: tuple[str, ...] = ()
    """What still gets in without the protection of suites 17/3: `cipher_suite_0`, `ipmi_1.5`."""


CIPHER_SUITE_0, IPMI_15 = "cipher_suite_0", "ipmi_1.5"
WEAK_LOGIN_NAMES = {CIPHER_SUITE_0: "suite 0", IPMI_15: "IPMI 1.5"}


def read_node_status(client: BmcClient) -> NodeStatus:
    """One session's worth: chassis status, the sensor readings, the DCMI reading, device id, FRU;
    then, each on its own, a suite 0 login and what the BMC said about IPMI 1.5 before the login."""
    power = client.power_state()
    readings = _sensors_if_offered(client)
    device = client.device_id()
    return NodeStatus(power=power, power_draw_w=client.power_draw_w(readings),
                      temperatures_c=temperatures_c(readings), firmware=device.firmware,
                      inventory=client.inventory(), device=device, weak_logins=weak_logins(client))


def weak_logins(client: BmcClient) -> tuple[str, ...]:
    """Which weak logins the BMC still lets in: a suite 0 session as this login's user with a
    password nobody holds (it sends no password: suite 0 has none), and IPMI 1.5 sessions as
    Get Channel Authentication Capabilities reported them before the login."""
    session = client.session
    found = []
    try:
        if prelogin.suite0_gets_in(session.address, session.user, session.port, session.timeouts.reply_s,
                                   1 + session.timeouts.resends):
            found.append(CIPHER_SUITE_0)
    except prelogin.BmcSilent as error:
        raise IpmiError(Reason.TIMEOUT, f"{session.address} stopped answering during a suite 0 login: {error}") from None
    if session.capabilities is not None and session.capabilities.ipmi15_open:
        found.append(IPMI_15)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class WeakLoginVerdict:
    open: tuple[str, ...]
    """Weak logins that still get in and the site does not accept: the status fails."""
    accepted: dict[str, str]
    """Weak logins that get in, with the site's reason for this BMC model."""


def weak_login_verdict(site: Site, result: NodeResult[NodeStatus]) -> WeakLoginVerdict | None:
    """The node's open weak logins, split by whether the site's `provisioning.bmc_exceptions`
    accepts them for this BMC model (Get Device ID manufacturer, product)."""
    if not result.ok or not result.value.weak_logins:
        return None
    device = result.value.device
    accepted, still_open = {}, []
    for opening in result.value.weak_logins:
        reason = next((entry.reason for entry in site.provisioning.bmc_exceptions
                       if device is not None and entry.manufacturer_id == device.manufacturer_id
                       and entry.product_id in (None, device.product_id) and opening in entry.allow), None)
        if reason is None:
            still_open.append(opening)
        else:
            accepted[opening] = reason
    return WeakLoginVerdict(tuple(still_open), accepted)


def serial_mismatch(site: Site, result: NodeResult[NodeStatus]) -> str | None:
    """Why this BMC may belong to another machine: its FRU serial differs from the inventory's.

    Compared only where both are known. A mismatch usually means a BMC address typed into the
    wrong host_vars file, or a machine swapped in the rack without updating the inventory.
    """
    if not result.ok:
        return None
    expected = site.hosts[result.node].serial if result.node in site.hosts else None
    found = result.value.inventory.serial
    if expected is None or found is None or found == expected:
        return None
    return f"serial mismatch: the BMC says {found}, the inventory says {expected}"


def _sensors_if_offered(client: BmcClient) -> list[Reading]:
    try:
        return client.sensors()
    except IpmiError as error:
        if error.reason is Reason.COMMAND_FAILED:  # no SDR repository: nothing to read
            return []
        raise


def site_targets(site: Site) -> list[BmcTarget]:
    """Every host with a BMC address, in rack order (rack, then position, then host)."""
    return [BmcTarget(host_name, str(site.hosts[host_name].bmc_address))
            for rack in site.racks for device in sorted(rack.devices, key=lambda d: d.position_u)
            for host_name in device.host_names
            if host_name in site.hosts and site.hosts[host_name].bmc_address is not None]


@dataclass(frozen=True, slots=True)
class RackPower:
    rack: str
    budget_w: int
    measured_w: float
    nodes_measured: int
    nodes_with_bmc: int

    @property
    def over_budget(self) -> bool:
        return self.measured_w > self.budget_w

    @property
    def share(self) -> float:
        return self.measured_w / self.budget_w if self.budget_w else 0.0


def rack_power(site: Site, results: list[NodeResult[NodeStatus]]) -> list[RackPower]:
    """Measured draw per rack (nodes that reported one) against the rack's power budget.

    Switches and nodes without a reading add nothing: `nodes_measured` says how complete
    the figure is.
    """
    by_node = {result.node: result for result in results}
    racks = []
    for rack in site.racks:
        nodes = [name for device in rack.devices for name in device.host_names if name in by_node]
        readings = [by_node[name].value.power_draw_w for name in nodes
                    if by_node[name].ok and by_node[name].value.power_draw_w is not None]
        racks.append(RackPower(rack.name, rack.power_budget_w, float(sum(readings)), len(readings), len(nodes)))
    return racks


def rack_of_hosts(site: Site) -> dict[str, str]:
    return {name: rack.name for rack in site.racks for device in rack.devices for name in device.host_names}
