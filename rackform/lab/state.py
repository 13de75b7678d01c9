"""What a running lab is made of, written to /run/rackform/labs/<site>/state.json.

`rackform lab up` writes the whole plan here *before* creating anything, so `down`
can remove every piece even after an up that failed halfway, and so another process
(the BMC emulator's chassis hook) can power a node given only the site and node names.
Nothing secret goes in: paths to the lab key, never the key.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rackform.lab import LabError

STATE_DIR = Path(os.environ.get("RACKFORM_LAB_STATE_DIR", "/run/rackform/labs"))
LABS_DIR = Path(os.environ.get("RACKFORM_LAB_DIR", "/var/lib/rackform/labs"))
FORMAT_VERSION = 1


@dataclass(slots=True)
class NodeSpec:
    """One container: a host, or a switch that runs a Linux network OS (Cumulus)."""

    name: str
    kind: str  # host | switch
    os: str  # debian | cumulus
    role: str
    machine: str  # systemd-nspawn -M
    netns: str
    node_dir: str
    mgmt_ifname: str  # inside the node: mgmt0 on hosts, eth0 on Cumulus
    mgmt_root_ifname: str  # the veth's other end, on the management bridge
    mgmt_mac: str
    mgmt_address: str | None  # "10.10.0.11/24"
    gateway: str | None

    @property
    def identity_dir(self) -> Path:
        """Files that survive a reimage: hostname, machine-id, host keys, authorized_keys."""
        return Path(self.node_dir) / "identity"

    @property
    def upper_dir(self) -> Path:
        return Path(self.node_dir) / "upper"

    @property
    def work_dir(self) -> Path:
        return Path(self.node_dir) / "work"

    @property
    def merged_dir(self) -> Path:
        return Path(self.node_dir) / "merged"

    @property
    def console_log(self) -> Path:
        return Path(self.node_dir) / "console.log"

    @property
    def address(self) -> str | None:
        return self.mgmt_address.split("/")[0] if self.mgmt_address else None


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A cable between two emulated nodes: one veth pair."""

    a_node: str
    a_port: str
    a_mac: str
    a_mtu: int
    b_node: str
    b_port: str
    b_mac: str
    b_mtu: int


@dataclass(slots=True)
class BridgeSpec:
    """A network the controller is on: management, or out-of-band for the BMCs."""

    purpose: str
    name: str
    mtu: int
    addresses: list[str]  # on the bridge in the root namespace: gateway, Onyx switch addresses


@dataclass(slots=True)
class LabState:
    site: str
    root: str
    base_dir: str
    lab_dir: str
    bridges: dict[str, BridgeSpec]
    nodes: dict[str, NodeSpec]
    links: list[LinkSpec]
    not_emulated: dict[str, str] = field(default_factory=dict)  # device -> why
    version: int = FORMAT_VERSION

    @property
    def ssh_key(self) -> Path:
        return Path(self.lab_dir) / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return Path(self.lab_dir) / "ssh" / "known_hosts"

    def node(self, name: str) -> NodeSpec:
        try:
            return self.nodes[name]
        except KeyError:
            raise LabError(f"lab {self.site} has no node {name!r} (nodes: {', '.join(self.nodes)})") from None


def state_file(site: str, state_dir: Path = STATE_DIR) -> Path:
    return state_dir / site / "state.json"


def save(state: LabState, state_dir: Path = STATE_DIR) -> Path:
    path = state_file(state.site, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(state), indent=2))  # nodes stay in site order
    temporary.replace(path)  # readers never see half a file
    return path


def load(site: str, state_dir: Path = STATE_DIR) -> LabState | None:
    path = state_file(site, state_dir)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("version") != FORMAT_VERSION:
        raise LabError(f"{path}: state format {data.get('version')}, expected {FORMAT_VERSION}; "
                       f"run `rackform lab down {site}` with the version that wrote it")
    return LabState(
        site=data["site"], root=data["root"], base_dir=data["base_dir"], lab_dir=data["lab_dir"],
        bridges={k: BridgeSpec(**v) for k, v in data["bridges"].items()},
        nodes={k: NodeSpec(**v) for k, v in data["nodes"].items()},
        links=[LinkSpec(**link) for link in data["links"]],
        not_emulated=data.get("not_emulated", {}),
    )


def require(site: str, state_dir: Path = STATE_DIR) -> LabState:
    state = load(site, state_dir)
    if state is None:
        raise LabError(f"lab {site} is not up (no {state_file(site, state_dir)}); run `rackform lab up {site}`")
    return state


def remove(site: str, state_dir: Path = STATE_DIR) -> None:
    folder = state_dir / site
    for item in folder.glob("*"):
        item.unlink()
    if folder.exists():
        folder.rmdir()
