"""The resolved site: racks, devices, hosts, switches, cables and networks as objects.

Built once by `rackform.model.loader.load_site`; checks, renderers and the Pulumi
program all read this and never re-derive it. Block *types* (catalog) stay
separate from placed *instances* (devices), as in NetBox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path
from typing import Any

from rackform.model.schema import (
    BlockType,
    Fabric,
    GroupVarsAll,
    Kubernetes,
    Mirror,
    Network,
    Provisioning,
    RoceOverrides,
    StoragePlacement,
    SwitchPlacement,
)
from rackform.model.source import Loc

# How each switch OS names its front-panel ports: one place for this fact.
SWITCH_PORT_PATTERNS = {"cumulus": "swp{n}", "onyx": "Eth1/{n}", "unmanaged": "port{n}"}

# Block categories whose nodes are servers (everything but switches) and the
# Ansible group each category's hosts land in.
HOST_ROLE_BY_CATEGORY = {
    "hci": "management_plane",
    "compute": "compute",
    "storage": "storage",
    "gpu": "gpu",
}


@dataclass(slots=True)
class Port:
    name: str
    role: str  # fabric | management | bmc
    speed_gbps: int


@dataclass(slots=True)
class Device:
    """A block instance placed in a rack."""

    name: str
    block: BlockType
    rack: str
    position_u: int
    host_names: list[str]
    loc: Loc
    switch: SwitchPlacement | None = None
    roce_overrides: RoceOverrides | None = None
    storage: StoragePlacement | None = None

    @property
    def top_u(self) -> int:
        return self.position_u + self.block.rack_units - 1

    def power_w(self, basis: str) -> int:
        """Chassis power on the given basis, scaled to the populated nodes."""
        full = self.block.power.max_w if basis == "max" else self.block.power.typical_w
        if self.switch is not None or self.block.nodes == 1:
            return full
        return round(full * len(self.host_names) / self.block.nodes)


DATA_SETS_ROOT = "/srv/data-sets"
"""Where a data set's folder is on its server unless the design names a path."""


@dataclass(frozen=True, slots=True)
class DataSet:
    """A data set of the site, resolved: its server and clients are hosts of the site."""

    name: str
    tenant: str
    size_gb: int
    mode: str  # ro | rw
    server: str
    """Host name of the storage host that serves it."""
    path: str
    """Its folder on the server (DATA_SETS_ROOT/<name> unless the design names one)."""
    clients: tuple[str, ...]
    """Host names that may mount it, sorted (default: the site's GPU hosts)."""
    loc: Loc
    """Where the design declares it (file and line), for findings."""
    client_locs: tuple[Loc, ...] = ()
    """Where each name of `clients` is written, when the design lists them."""


@dataclass(slots=True)
class Rack:
    name: str
    height_u: int
    power_budget_w: int
    devices: list[Device]
    loc: Loc
    budget_loc: Loc
    height_loc: Loc


@dataclass(slots=True)
class Host:
    """One server node: what Ansible manages and what a BMC powers."""

    name: str
    device: Device
    role: str
    ports: dict[str, Port]
    loc: Loc
    """Where the host is declared in the site design."""
    vars_loc: Loc | None = None
    """Where its inventory variables are (None: missing from the inventory)."""
    management_address: IPv4Address | None = None
    management_mac: str | None = None
    bmc_address: IPv4Address | None = None
    bmc_mac: str | None = None
    serial: str | None = None
    fabric_addresses: dict[str, IPv4Interface] = field(default_factory=dict)
    fabric_macs: dict[str, str] = field(default_factory=dict)
    var_locs: dict[str, Loc] = field(default_factory=dict)
    """Line of each inventory key, for errors about addresses and MACs."""
    user_vars: dict = field(default_factory=dict)
    """The inventory's other variables, passed through unchanged (rackform.model.inventory)."""

    @property
    def block(self) -> BlockType:
        return self.device.block


@dataclass(slots=True)
class Switch:
    name: str
    device: Device
    role: str  # leaf | spine | management | oob
    os: str
    fabric: str | None
    asn: int | None
    ports: dict[str, Port]
    loc: Loc
    vars_loc: Loc | None = None
    management_address: IPv4Address | None = None
    management_mac: str | None = None
    serial: str | None = None
    var_locs: dict[str, Loc] = field(default_factory=dict)
    user_vars: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Endpoint:
    device: str
    port: str

    def __str__(self) -> str:
        return f"{self.device}:{self.port}"


@dataclass(frozen=True, slots=True)
class Cable:
    a: Endpoint
    b: Endpoint
    loc: Loc


@dataclass(slots=True)
class Site:
    name: str
    description: str
    power_basis: str
    racks: list[Rack]
    networks: dict[str, Network]
    network_locs: dict[str, Loc]
    fabric: Fabric
    fabric_loc: Loc
    cables: list[Cable]
    kubernetes: Kubernetes | None
    kubernetes_loc: Loc | None
    hosts: dict[str, Host]
    switches: dict[str, Switch]
    catalog: dict[str, BlockType]
    group_vars: GroupVarsAll
    site_path: Path
    inventory_path: Path
    loc: Loc
    extra_inventory_keys: dict[str, Loc] = field(default_factory=dict)
    user_inventory: Any = None
    """Groups and group variables of the user's inventory (rackform.model.inventory.UserInventory)."""
    provisioning: Provisioning = field(default_factory=Provisioning)
    origins: dict[str, Loc] = field(default_factory=dict)
    """`fabric.switch.mtu` -> the file and line that set it (site, profile or fleet defaults)."""
    mirror: Mirror | None = None
    mirror_loc: Loc | None = None
    """The `mirror:` line that set the section (the site's or a shared file's)."""
    lab_only: bool = False
    """`lab_only: true` in the site file: the site is only ever `rackform lab up`'s machines."""
    data_sets: list[DataSet] = field(default_factory=list)
    """The data sets the storage hosts serve, in design order (docs/storage.md)."""

    def origin(self, key: str, fallback: Loc) -> Loc:
        """Where the setting `key` was set; `fallback` for a built-in default."""
        return self.origins.get(key, fallback)

    def devices(self):
        for rack in self.racks:
            yield from rack.devices

    def network_for(self, purpose: str) -> Network | None:
        for network in self.networks.values():
            if network.purpose == purpose:
                return network
        return None

    def hosts_in_role(self, role: str) -> list[Host]:
        return [host for host in self.hosts.values() if host.role == role]
