"""A site's BMCs at a glance: each node's power state, draw, temperatures and firmware, and
the measured power of each rack against its budget (`rackform bmc status SITE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackform.ipmi.client import BmcClient, Inventory, Reading, temperatures_c
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


def read_node_status(client: BmcClient) -> NodeStatus:
    """One session's worth: chassis status, the sensor readings, the DCMI reading, device id, FRU."""
    power = client.power_state()
    readings = _sensors_if_offered(client)
    return NodeStatus(power=power, power_draw_w=client.power_draw_w(readings),
                      temperatures_c=temperatures_c(readings), firmware=client.firmware(),
                      inventory=client.inventory())


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
