"""Generate a synthetic site of N server nodes for the scale benchmark.

    .venv/bin/python bench/gen_site.py 1000 --root /tmp/scale-1000

writes, under ROOT, a copy of the real catalog (topologies/blocks), a site design
(topologies/sites/scale.yaml) and its Ansible inventory (inventories/scale/ with
hosts.yml and one host_vars file per host and managed switch).

The fabric is a 5-stage Clos, the way large RoCE sites are cabled:
- a pod is up to 14 racks; each rack has a leaf pair and an unmanaged OOB switch;
  every host is dual-homed (fab0 to leaf a, fab1 to leaf b, GPU nodes 4 ports each);
- each leaf has 4 uplinks (swp29-swp32), one to each of its pod's 4 spines;
- spine j of every pod uplinks (swp29-swp32) to the 4 super-spines of plane j,
  one port per pod, so a 32-port super-spine bounds the site at 32 pods.
Addresses are sequential in /16 management and OOB networks and one /16 per fabric
rail inside a /12 compute fabric: enough for ~64k hosts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
SITE_NAME = "scale"

LEAF_DOWNLINK_PORTS = 28
"""swp1-swp28 face hosts; swp29-swp32 are uplinks."""
UPLINK_FIRST_PORT = 29
SPINES_PER_POD = 4
SUPER_SPINES_PER_PLANE = 4
RACKS_PER_POD = LEAF_DOWNLINK_PORTS // 2
"""A spine's swp1-swp28 take one leaf each: 14 racks of two leaves."""
MAX_PODS = 32
"""Ports of a super-spine (SN2700): one per pod."""

# Private 4-byte ASNs (RFC 6996): one per leaf, one per pod's spines, one for the super-spines.
LEAF_ASN_BASE = 4_200_000_000
SPINE_ASN_BASE = 4_210_000_000
SUPER_SPINE_ASN = 4_220_000_000

MANAGEMENT_PREFIX = "10.0.0.0/16"
OOB_PREFIX = "10.1.0.0/16"
FABRIC_PREFIX = "10.128.0.0/12"
FIRST_ADDRESS_OFFSET = 256
"""Addresses start at x.x.1.0: x.x.0.0/24 keeps the gateway and the API VIP."""


@dataclass(frozen=True, slots=True)
class RackKind:
    """One rack design: which block fills it, how many, and how each node is cabled."""

    block: str
    prefix: str
    """Device name prefix (`cmp` gives cmp-0001)."""
    blocks_per_rack: int
    nodes_per_block: int
    fabric_ports_per_node: int
    """Cabled fabric ports, alternating between leaf a and leaf b."""
    power_budget_w: int


RACK_KINDS = {
    # 7 x 2U = 14U, 28 nodes; 7 x 2.2 kW nameplate + network ~ 16.7 kW.
    "hci": RackKind("hci", "hci", 7, 4, 2, 25_000),
    "compute": RackKind("compute", "cmp", 7, 4, 2, 25_000),
    # 3 x 10U DGX-2 (the seed's GPU block) = 30U; 3 x 10 kW nameplate + network ~ 31.3 kW.
    "gpu": RackKind("dgx2", "dgx", 3, 1, 4, 40_000),
    # 8 x 4U = 32U, 8 nodes; 8 x 1.2 kW + network ~ 10.9 kW.
    "storage": RackKind("stor-xl", "stor", 8, 1, 2, 15_000),
}
POD_PATTERN = ("compute", "gpu", "compute", "storage", "compute", "gpu") + ("compute",) * 8
FIRST_POD_HCI_RACKS = (0, 2, 4)
"""The management plane: three HCI racks in the first pod, one control-plane host in each."""
LEAF_POSITIONS_U = (38, 39)
OOB_POSITION_U = 41
SWITCH_BLOCK = "sn2700"
OOB_BLOCK = "oob-switch"


@dataclass(slots=True)
class Host:
    name: str
    fabric_ports: list[str]


@dataclass(slots=True)
class Device:
    name: str
    block: str
    position_u: int
    hosts: list[str] | None = None
    """Explicit host names, only for a partly populated last block."""
    switch: str | None = None
    """The `switch:` flow mapping, for switches."""


@dataclass(slots=True)
class Rack:
    name: str
    power_budget_w: int
    devices: list[Device] = field(default_factory=list)


@dataclass(slots=True)
class Plan:
    """Everything the writers need: racks, hosts, managed switches and cables."""

    racks: list[Rack] = field(default_factory=list)
    hosts: list[Host] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    cables: list[tuple[str, str]] = field(default_factory=list)
    control_plane: list[str] = field(default_factory=list)
    """The first host of each HCI rack."""


# ---------------------------------------------------------------- planning


def rack_kinds(pods: int):
    """(pod, kind) for every server rack, in order."""
    for pod in range(pods):
        for index, kind in enumerate(POD_PATTERN):
            yield pod, "hci" if pod == 0 and index in FIRST_POD_HCI_RACKS else kind


def plan_site(nodes: int, rack_units: dict[str, int]) -> Plan:
    """Racks, hosts, switches and cables of an N-node site; `rack_units` per block, from the catalog."""
    if nodes < 3:
        raise ValueError("a site needs at least 3 nodes (the management plane)")
    plan = Plan()
    counters: dict[str, int] = {}
    leaves_in_pod: list[list[str]] = []
    for pod, kind_name in rack_kinds(MAX_PODS):
        if len(plan.hosts) >= nodes:
            break
        if pod == len(leaves_in_pod):
            leaves_in_pod.append([])
        rack_number = len(plan.racks) + 1
        leaves = plan_server_rack(plan, RACK_KINDS[kind_name], rack_number, nodes, counters, rack_units)
        leaves_in_pod[pod].extend(leaves)
    if len(plan.hosts) < nodes:
        raise ValueError(f"{nodes} nodes do not fit {MAX_PODS} pods of {RACKS_PER_POD} racks (at most {len(plan.hosts)})")
    plan_spines(plan, leaves_in_pod)
    return plan


def plan_server_rack(
    plan: Plan, kind: RackKind, rack_number: int, nodes: int, counters: dict[str, int], rack_units: dict[str, int]
) -> list[str]:
    """One rack of `kind` (cut short at `nodes` hosts), its leaf pair and OOB switch, cabled."""
    rack = Rack(f"r{rack_number:04d}", kind.power_budget_w)
    leaves = [f"leaf-{rack_number:04d}-{side}" for side in "ab"]
    next_leaf_port = 1
    for slot in range(kind.blocks_per_rack):
        if len(plan.hosts) >= nodes:
            break
        counters[kind.prefix] = counters.get(kind.prefix, 0) + 1
        name = f"{kind.prefix}-{counters[kind.prefix]:04d}"
        block_rack_units = rack_units[kind.block]
        wanted = min(kind.nodes_per_block, nodes - len(plan.hosts))
        host_names = [name] if kind.nodes_per_block == 1 else [f"{name}-n{i}" for i in range(1, wanted + 1)]
        partial = kind.nodes_per_block > 1 and wanted < kind.nodes_per_block
        rack.devices.append(Device(name, kind.block, 1 + slot * block_rack_units, host_names if partial else None))
        for host_name in host_names:
            ports = [f"fab{n}" for n in range(kind.fabric_ports_per_node)]
            plan.hosts.append(Host(host_name, ports))
            if kind.block == "hci" and slot == 0 and host_name == host_names[0]:
                plan.control_plane.append(host_name)
            for n, port in enumerate(ports):
                plan.cables.append((f"{host_name}:{port}", f"{leaves[n % 2]}:swp{next_leaf_port + n // 2}"))
            next_leaf_port += (len(ports) + 1) // 2
    for leaf, position_u in zip(leaves, LEAF_POSITIONS_U):
        asn = LEAF_ASN_BASE + len(plan.switches) + 1
        rack.devices.append(Device(leaf, SWITCH_BLOCK, position_u, switch=f"{{role: leaf, os: cumulus, fabric: compute, asn: {asn}}}"))
        plan.switches.append(leaf)
    rack.devices.append(Device(f"oob-{rack_number:04d}", OOB_BLOCK, OOB_POSITION_U, switch="{role: oob, os: unmanaged}"))
    plan.racks.append(rack)
    return leaves


def plan_spines(plan: Plan, leaves_in_pod: list[list[str]]) -> None:
    """A network rack per pod (4 spines) and a core rack (the super-spine planes), cabled."""
    for pod, leaves in enumerate(leaves_in_pod, start=1):
        rack = Rack(f"net-p{pod:02d}", 5_000)
        for j in range(1, SPINES_PER_POD + 1):
            spine = f"spine-{pod:02d}-{j}"
            asn = SPINE_ASN_BASE + pod
            rack.devices.append(Device(spine, SWITCH_BLOCK, j, switch=f"{{role: spine, os: cumulus, fabric: compute, asn: {asn}}}"))
            plan.switches.append(spine)
            for leaf_index, leaf in enumerate(leaves, start=1):
                plan.cables.append((f"{leaf}:swp{UPLINK_FIRST_PORT + j - 1}", f"{spine}:swp{leaf_index}"))
            for k in range(1, SUPER_SPINES_PER_PLANE + 1):
                plan.cables.append((f"{spine}:swp{UPLINK_FIRST_PORT + k - 1}", f"ss-{j}-{k}:swp{pod}"))
        plan.racks.append(rack)
    core = Rack("core", 15_000)
    for j in range(1, SPINES_PER_POD + 1):
        for k in range(1, SUPER_SPINES_PER_PLANE + 1):
            name = f"ss-{j}-{k}"
            core.devices.append(Device(name, SWITCH_BLOCK, len(core.devices) + 1, switch=f"{{role: spine, os: cumulus, fabric: compute, asn: {SUPER_SPINE_ASN}}}"))
            plan.switches.append(name)
    plan.racks.append(core)


# ---------------------------------------------------------------- writing


def address(prefix: str, index: int) -> IPv4Address:
    return IPv4Address(prefix.split("/")[0]) + FIRST_ADDRESS_OFFSET + index


def mac(kind: int, index: int) -> str:
    return "02:%02x:%02x:%02x:%02x:%02x" % (kind, *index.to_bytes(4, "big"))


def site_yaml(plan: Plan, nodes: int) -> str:
    # Sites too small for three HCI racks (< ~60 nodes) take their first three hosts, all HCI.
    control_plane = plan.control_plane if len(plan.control_plane) >= 3 else [host.name for host in plan.hosts[:3]]
    lines = [
        f"# Synthetic site of {nodes} nodes, made by bench/gen_site.py for the scale benchmark.",
        f"site: {SITE_NAME}",
        f"description: Synthetic {nodes}-node site (bench/gen_site.py)",
        "power_basis: max",
        "racks:",
    ]
    for rack in plan.racks:
        lines += [f"  - name: {rack.name}", "    height_u: 42", f"    power_budget_w: {rack.power_budget_w}", "    devices:"]
        for device in rack.devices:
            extra = f", hosts: [{', '.join(device.hosts)}]" if device.hosts else ""
            extra += f", switch: {device.switch}" if device.switch else ""
            lines.append(f"      - {{name: {device.name}, block: {device.block}, position_u: {device.position_u}{extra}}}")
    lines += [
        "networks:",
        f"  - {{name: mgmt, purpose: management, prefix: {MANAGEMENT_PREFIX}, gateway: 10.0.0.1}}",
        f"  - {{name: oob, purpose: oob, prefix: {OOB_PREFIX}}}",
        f"  - {{name: compute, purpose: compute_fabric, prefix: {FABRIC_PREFIX}}}",
        "extends: [roce, kubernetes]  # the fleet's shared settings, as the shipped sites use them",
        "cabling:",
        *(f"  - {{a: {a}, b: {b}}}" for a, b in plan.cables),
        "kubernetes:",
        f"  control_plane: [{', '.join(control_plane)}]",
        "  api_vip: 10.0.0.5",
    ]
    return "\n".join(lines) + "\n"


def host_vars(host: Host, index: int) -> str:
    lines = [
        f"management_address: {address(MANAGEMENT_PREFIX, index)}",
        f'management_mac: "{mac(0x00, index)}"',
        f"bmc_address: {address(OOB_PREFIX, index)}",
        f'bmc_mac: "{mac(0x01, index)}"',
        f"serial: SN-{host.name.upper()}",
        "fabric_ports:",
    ]
    fabric_base = IPv4Address(FABRIC_PREFIX.split("/")[0])
    for n, port in enumerate(host.fabric_ports):
        rail_address = fabric_base + (n << 16) + FIRST_ADDRESS_OFFSET + index
        lines.append(f'  {port}: {{mac: "{mac(0x10 + n, index)}", address: {rail_address}/16}}')
    return "\n".join(lines) + "\n"


def switch_vars(name: str, index: int) -> str:
    return (
        f"management_address: {address(MANAGEMENT_PREFIX, index)}\n"
        f'management_mac: "{mac(0x00, index)}"\n'
        f"serial: SN-{name.upper()}\n"
    )


def catalog_rack_units(blocks: Path) -> dict[str, int]:
    """Height of every block the generator places, read from the catalog copy."""
    wanted = {kind.block for kind in RACK_KINDS.values()} | {SWITCH_BLOCK, OOB_BLOCK}
    found = {path.stem: path for path in blocks.glob("*.yaml")}
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"the catalog lacks block(s) the generator uses: {', '.join(sorted(missing))}")
    rack_units = {name: int(yaml.safe_load(found[name].read_text())["rack_units"]) for name in wanted}
    for kind in RACK_KINDS.values():
        if kind.blocks_per_rack * rack_units[kind.block] >= min(LEAF_POSITIONS_U):
            raise ValueError(f"{kind.blocks_per_rack} x {kind.block} do not fit below the leaves at U{min(LEAF_POSITIONS_U)}")
    return rack_units


def write_site(root: Path, nodes: int) -> Path:
    """Write catalog, design and inventory of an N-node site under `root`; return `root`."""
    root.mkdir(parents=True, exist_ok=True)
    blocks = root / "topologies" / "blocks"
    shutil.rmtree(blocks, ignore_errors=True)
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", blocks)
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    shutil.copy(REPO_ROOT / "topologies" / "defaults.yaml", root / "topologies" / "defaults.yaml")
    shutil.rmtree(root / "topologies" / "profiles", ignore_errors=True)
    shutil.copytree(REPO_ROOT / "topologies" / "profiles", root / "topologies" / "profiles")
    plan = plan_site(nodes, catalog_rack_units(blocks))
    (root / "topologies" / "sites").mkdir(parents=True, exist_ok=True)
    (root / "topologies" / "sites" / f"{SITE_NAME}.yaml").write_text(site_yaml(plan, nodes))
    inventory = root / "inventories" / SITE_NAME
    shutil.rmtree(inventory, ignore_errors=True)
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars").mkdir()
    names = [host.name for host in plan.hosts] + plan.switches
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n" + "".join(f"    {name}:\n" for name in names))
    for index, host in enumerate(plan.hosts):
        (inventory / "host_vars" / f"{host.name}.yml").write_text(host_vars(host, index))
    for offset, name in enumerate(plan.switches):
        (inventory / "host_vars" / f"{name}.yml").write_text(switch_vars(name, len(plan.hosts) + offset))
    (inventory / "group_vars" / "all.yml").write_text(
        "ansible_user: root\nntp_servers: [10.0.0.1]\ndns_servers: [10.0.0.1]\ntimezone: Etc/UTC\ndomain: scale.rackform.test\n"
    )
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nodes", type=int, help="number of server nodes (hosts)")
    parser.add_argument("--root", type=Path, required=True, help="folder to write the site into")
    args = parser.parse_args(argv)
    write_site(args.root, args.nodes)
    print(f"wrote site '{SITE_NAME}' ({args.nodes} nodes) under {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
