"""The shape of rackform's input files, as pydantic models.

These are the file formats a person edits (catalog blocks, site designs, inventory
host variables). Unknown keys are refused so a typo never passes silently.
`rackform.model.loader` turns a validation failure into `file:line: key: message`.
Cross-references (a block named by a device, a port named by a cable) are resolved
later, in `rackform.model.site`.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, StrictBool, model_validator
from pydantic_core import PydanticCustomError

Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
"""A DNS-label-safe name: lowercase letters, digits and inner hyphens."""

_MAC_SPELLINGS = re.compile(
    r"[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}"  # aa:bb:cc:dd:ee:ff, AA-BB-CC-DD-EE-FF
    r"|[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4}"  # aabb.ccdd.eeff
    r"|[0-9a-f]{12}"  # aabbccddeeff
)
SEXAGESIMAL_BASE = 60
"""YAML 1.1 reads an unquoted 52:54:00:12:34:56 as a base-60 integer."""


def _unquoted_mac_hint(number: int) -> str:
    """What an unquoted MAC that YAML read as an integer was probably written as."""
    groups = []
    while number:
        number, digit = divmod(number, SEXAGESIMAL_BASE)
        groups.insert(0, f"{digit:02d}")
    if len(groups) == 6:
        return f'unquoted MAC read by YAML as a number: quote it, e.g. "{":".join(groups)}"'
    return "unquoted MAC read by YAML as a number: quote it"


_CANONICAL_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
"""The form normalise_mac returns; such a text is returned as it is."""


def normalise_mac(value: object) -> str:
    """A MAC in any common spelling -> lower-case colon form (02:0a:0a:00:00:0f)."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise PydanticCustomError("mac_address", _unquoted_mac_hint(value))
    text = value.strip().lower() if isinstance(value, str) else None
    if text is not None and _CANONICAL_MAC.fullmatch(text):
        return text  # already the stored form (one of _MAC_SPELLINGS): every MAC a rendered site holds
    if text is None or not _MAC_SPELLINGS.fullmatch(text):
        raise PydanticCustomError(
            "mac_address", "not a MAC address (write aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff, aabb.ccdd.eeff or aabbccddeeff)"
        )
    digits = re.sub(r"[^0-9a-f]", "", text)
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


Mac = Annotated[str, BeforeValidator(normalise_mac)]
"""A MAC address in any common spelling, stored lower-case and colon separated."""

Priority = Annotated[int, Field(ge=0, le=7)]
Dscp = Annotated[int, Field(ge=0, le=63)]
PositiveInt = Annotated[int, Field(gt=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# ---------------------------------------------------------------- catalog blocks


class Power(Strict):
    typical_w: PositiveInt
    """Draw under a typical training load, for the whole chassis."""
    max_w: PositiveInt
    """Nameplate maximum for the whole chassis: what rack budgets are checked against."""


class Drives(Strict):
    count: PositiveInt
    media: Literal["nvme", "ssd", "hdd"]
    form_factor: Literal["2.5in", "3.5in", "m.2", "u.2"] | None = None
    size_tb: float | None = None


class PortGroup(Strict):
    role: Literal["fabric", "management", "bmc"]
    pattern: str = Field(pattern=r"\{n\}")
    """Port names, `{n}` numbered from `first`: `fab{n}` gives fab0, fab1 ..."""
    first: int = 0
    count: PositiveInt
    speed_gbps: PositiveInt


class Gpus(Strict):
    count: PositiveInt
    model: str
    memory_gb: PositiveInt
    nvswitches: int = 0


class NodeSpec(Strict):
    """What one node of a block carries (a 4-node HCI block has four of these)."""

    cpu_cores: int = 0
    memory_gb: PositiveInt
    drives: list[Drives] = []
    ports: list[PortGroup]
    gpus: Gpus | None = None


SwitchOs = Literal["onyx", "cumulus", "unmanaged"]


class SwitchSpec(Strict):
    os: list[SwitchOs] = Field(min_length=1)
    """Switch operating systems this model ships with."""
    ports: PositiveInt
    speed_gbps: PositiveInt
    asic: str | None = None


class Protection(Strict):
    """How a storage block protects data: `data_units` of every `data_units + parity_units` hold data."""

    scheme: str = Field(min_length=1)
    """For people: `erasure 8+2`, `raid6 10+2`, `mirror` (1+1) ..."""
    data_units: PositiveInt
    parity_units: Annotated[int, Field(ge=0)]


class StorageSpec(Strict):
    """What a storage block offers for data sets: its drives of `data_media`, less protection."""

    data_media: list[Literal["nvme", "ssd", "hdd"]] = Field(min_length=1)
    """The drives that hold data sets (the others cache or hold metadata)."""
    protection: Protection


class BlockType(Strict):
    """One building-block type of the catalog (`topologies/blocks/<name>.yaml`)."""

    name: Name
    display_name: str
    vendor: str
    category: Literal["hci", "compute", "storage", "gpu", "switch"]
    rack_units: PositiveInt
    nodes: PositiveInt = 1
    power: Power
    node: NodeSpec | None = None
    """Per-node figures; every category but `switch` has them."""
    switch: SwitchSpec | None = None
    """Switch figures; only `switch` blocks have them."""
    storage: StorageSpec | None = None
    """Usable capacity for data sets; only `storage` blocks have it."""
    sources: dict[str, str] = Field(min_length=1)
    """Where each figure comes from, keyed by field."""


# ---------------------------------------------------------------- site design


class StoragePlacement(Strict):
    """How one storage device serves the site's data sets over NFS (docs/storage.md)."""

    nfs_server: Literal["kernel", "ganesha"] = "kernel"
    """kernel: Linux nfsd; ganesha: NFS-Ganesha in user space (the lab's: its kernel has no nfsd)."""
    nfs_rdma: bool = True
    """Serve NFS over RDMA too (port 20049) where the server can: kernel nfsd on RDMA NICs."""


class SwitchPlacement(Strict):
    role: Literal["leaf", "spine", "management", "oob"]
    os: SwitchOs
    fabric: Name | None = None
    """The fabric network (by name) a leaf or spine belongs to."""
    asn: Annotated[int, Field(ge=1, le=4294967295)] | None = None


class RoceOverrides(Strict):
    """Per-device departures from the site's fabric settings (rarely right; checked)."""

    pfc_priorities: list[Priority] | None = None
    trust: Literal["dscp", "pcp"] | None = None
    mtu: PositiveInt | None = None
    ecn: bool | None = None
    dscp_to_priority: dict[Dscp, Priority] | None = None
    roce_tos: Annotated[int, Field(ge=0, le=255)] | None = None


class DevicePlacement(Strict):
    name: Name
    block: Name
    position_u: PositiveInt
    """Lowest rack unit the device occupies (U1 is at the bottom)."""
    hosts: list[Name] | None = None
    """Host names of the populated nodes; default: the device name (one node) or name-nN."""
    switch: SwitchPlacement | None = None
    roce_overrides: RoceOverrides | None = None
    storage: StoragePlacement | None = None
    """How a storage device serves its data sets; only storage blocks (docs/storage.md)."""


class Rack(Strict):
    name: Name
    height_u: PositiveInt = 42
    power_budget_w: PositiveInt
    devices: list[DevicePlacement] = []


class Network(Strict):
    name: Name
    purpose: Literal["management", "oob", "compute_fabric", "storage_fabric"]
    prefix: IPv4Network
    gateway: IPv4Address | None = None


class RoceIntent(Strict):
    """What the design wants: the values both sides must implement."""

    priority: Priority = 3
    dscp: Dscp = 26
    cnp_priority: Priority = 6
    cnp_dscp: Dscp = 48


class Ecn(Strict):
    enabled: bool = True
    min_kb: PositiveInt = 150
    max_kb: PositiveInt = 1500


class SwitchQos(Strict):
    trust: Literal["dscp", "pcp"] = "dscp"
    pfc_priorities: list[Priority] = [3]
    dscp_to_priority: dict[Dscp, Priority] = {26: 3, 48: 6}
    ecn: Ecn = Ecn()
    pfc_watchdog: bool = True
    mtu: PositiveInt = 9216


class HostQos(Strict):
    trust: Literal["dscp", "pcp"] = "dscp"
    pfc_priorities: list[Priority] = [3]
    roce_tos: Annotated[int, Field(ge=0, le=255)] = 106
    """IP ToS byte of RoCE traffic: DSCP << 2 plus the ECN-capable bits."""
    ecn: bool = True
    mtu: PositiveInt = 9000


class Fabric(Strict):
    no_single_point_of_failure: bool = True
    """Every GPU node's fabric ports reach at least two different leaf switches."""
    roce: RoceIntent = RoceIntent()
    switch: SwitchQos = SwitchQos()
    host: HostQos = HostQos()


class Cable(Strict):
    a: str = Field(pattern=r"^[^:\s]+:\S+$")
    """`device:port`, e.g. `gpu-1:fab0` or `leaf-1:swp1`."""
    b: str = Field(pattern=r"^[^:\s]+:\S+$")


class Kubernetes(Strict):
    version: str = Field(pattern=r"^1\.\d+\.\d+$")
    control_plane: list[Name] = Field(min_length=1)
    api_vip: IPv4Address | None = None
    pod_prefix: IPv4Network = IPv4Network("10.244.0.0/16")
    service_prefix: IPv4Network = IPv4Network("10.96.0.0/12")
    cni: Literal["kube-router", "calico", "cilium", "flannel"] = "calico"
    """kube-router: routes between nodes and NetworkPolicy (rackform renders its DaemonSet);
    calico: the tigera-operator from the site's mirror plus the Installation rackform renders."""
    cert_expiry_margin_days: int = Field(default=30, ge=1, le=364)
    """`rackform verify` fails a control-plane node with a kubeadm certificate that expires within
    this many days (docs/operations.md, "Certificates"). kubeadm's certificates last a year, so a
    margin of 365 or more would fail a cluster just renewed."""


class Mirror(Strict):
    """The site mirror: apt repository, OCI registry and Helm charts served from one machine
    of the site, which every node installs from (docs/site-format.md, "Site mirror")."""

    host: Name | None = None
    """The server of the site that serves it (its management address is the mirror's)."""
    address: IPv4Address | None = None
    """Instead of `host`: the address of a mirror machine the site design does not model."""
    air_gapped: bool = True
    """The rendered project names no upstream address; `rackform validate` refuses one that does."""

    @model_validator(mode="after")
    def _one_place(self) -> "Mirror":
        if (self.host is None) == (self.address is None):
            raise ValueError("give the mirror's host (a server of the site) or its address, one of the two")
        return self


class BmcException(Strict):
    """A BMC model whose firmware keeps a weak login open whatever is set (docs/ipmi.md)."""

    model: str = Field(min_length=1)
    """What the model is, for people: e.g. `OpenIPMI ipmi_sim`."""
    manufacturer_id: int = Field(ge=0, le=0xFFFFF)
    """Get Device ID's manufacturer (IANA enterprise number), as `ipmitool mc info` shows it."""
    product_id: int | None = Field(default=None, ge=0, le=0xFFFF)
    """Get Device ID's product id; left out: every product of that manufacturer."""
    allow: list[Literal["cipher_suite_0", "ipmi_1.5"]] = Field(min_length=1)
    reason: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    """Why the site accepts it (the firmware ignores the setting, a ticket number ...)."""

    @property
    def as_role_var(self) -> dict:
        return {"manufacturer_id": self.manufacturer_id, "product_id": self.product_id, "allow": list(self.allow),
                "reason": self.reason}


class Provisioning(Strict):
    max_fail_percentage: int = Field(default=25, ge=0, le=100)
    """The provision stage goes on while at most this share (percent) of the servers has failed,
    each failed server failing alone; beyond it the whole stage stops: then something is wrong
    with the site (the OOB network, a factory password), not with one BMC."""
    bmc_exceptions: list[BmcException] = []
    """BMC models accepted with cipher suite 0 or IPMI 1.5 still open: `rackform bmc status` reports
    them without failing and the provision stage's hardening does not fail them."""


class DataSet(Strict):
    """A data set the site serves from a storage block over NFS (docs/storage.md)."""

    name: Name
    tenant: Name
    """The owning tenant (topologies/platform/<site>.yaml): its namespace gets the claim."""
    size_gb: PositiveInt
    mode: Literal["ro", "rw"]
    """ro: training data, read-only to every client; rw: a tenant's scratch."""
    server: Name
    """The storage host that serves it."""
    path: str | None = Field(default=None, pattern=r"^/[^\s]*$")
    """Folder on the server; default /srv/data-sets/<name>."""
    clients: list[Name] | None = None
    """The hosts that may mount it; default: the site's GPU hosts."""


class SiteFile(Strict):
    """A site design (`topologies/sites/<site>.yaml`)."""

    site: Name
    extends: list[Name] = []
    """Profiles (`topologies/profiles/<name>.yaml`) this site builds on, lowest first; the
    fleet defaults (`topologies/defaults.yaml`) lie under them (`rackform.model.layers`)."""
    description: str = ""
    lab_only: StrictBool = False
    """The site exists only as `rackform lab up`'s machines, which get new SSH host keys at every
    start: the one kind of site that may turn host key checking off (rackform.checks.host_keys)."""
    power_basis: Literal["max", "typical"] = "max"
    """Which catalog figure the rack budgets are checked against."""
    racks: list[Rack] = Field(min_length=1)
    networks: list[Network] = Field(min_length=1)
    fabric: Fabric = Fabric()
    cabling: list[Cable] = []
    kubernetes: Kubernetes | None = None
    mirror: Mirror | None = None
    """Where every node gets its packages and images (a site without one reaches its own sources)."""
    provisioning: Provisioning = Provisioning()
    data_sets: list[DataSet] = []


# ---------------------------------------------------------------- inventory


class FabricPort(Strict):
    mac: Mac | None = None
    address: IPv4Interface | None = None


class HostVars(Strict):
    """Concrete facts about one host or switch (`inventories/<site>/host_vars/<host>.yml`)."""

    management_address: IPv4Address
    management_mac: Mac | None = None
    bmc_address: IPv4Address | None = None
    bmc_mac: Mac | None = None
    serial: str | None = None
    fabric_ports: dict[str, FabricPort] = {}


class GroupVarsAll(Strict):
    """Site-wide connection and OS settings (`inventories/<site>/group_vars/all.yml`)."""

    ansible_user: str = "root"
    ansible_ssh_private_key_file: str | None = None
    ntp_servers: list[str] = []
    dns_servers: list[IPv4Address] = []
    timezone: str = "Etc/UTC"
    domain: str = "cluster.local"
