"""`inventory/host_vars/<name>.yml`: the facts of one host or switch.

Addresses, MACs, serial and place in the rack come from the inventory and the
design; each fabric port names its far end from the cabling plan. A device's
`roce_overrides` become host-level values of the site-wide `fabric_*` variables,
so Ansible's precedence (host_vars over group_vars) applies them. The inventory's other
host variables (`ansible_port`, `http_proxy` ...) follow unchanged; the `inventory_variables`
check refuses one that rackform writes itself. No secret is ever written here by rackform:
BMC credentials arrive through ansible-vault (issue 4).
"""

from __future__ import annotations

from rackform.model.site import Device, Endpoint, Host, Site, Switch
from rackform.render.address_text import address_text

PeerIndex = dict[tuple[str, str], Endpoint]

# roce_overrides field -> the variable it overrides, on each side of a link.
_HOST_OVERRIDES = {
    "trust": "fabric_host_trust",
    "pfc_priorities": "fabric_host_pfc_priorities",
    "mtu": "fabric_host_mtu",
    "ecn": "fabric_host_ecn",
    "roce_tos": "fabric_host_roce_tos",
}
_SWITCH_OVERRIDES = {
    "trust": "fabric_switch_trust",
    "pfc_priorities": "fabric_switch_pfc_priorities",
    "mtu": "fabric_switch_mtu",
    "ecn": "fabric_switch_ecn_enabled",
    "dscp_to_priority": "fabric_switch_dscp_to_priority",
}


def peer_index(site: Site) -> PeerIndex:
    """(device, port) -> the endpoint at the other end of its cable; both directions."""
    peers: PeerIndex = {}
    for cable in site.cables:
        peers[(cable.a.device, cable.a.port)] = cable.b
        peers[(cable.b.device, cable.b.port)] = cable.a
    return peers


def _place(device: Device) -> dict:
    return {
        "device_name": device.name,
        "block_type": device.block.name,
        "rack_name": device.rack,
        "rack_position_u": device.position_u,
    }


def _overrides(device: Device, names: dict[str, str]) -> dict:
    if device.roce_overrides is None:
        return {}
    values = device.roce_overrides.model_dump(exclude_none=True)
    return {names[key]: value for key, value in values.items() if key in names}


def _present(**values) -> dict:
    return {key: value for key, value in values.items() if value is not None}


def _text(value) -> str | None:
    return None if value is None else address_text(value)


def gpu_vars(host: Host) -> dict:
    """What the host's block promises its GPUs to be: the gpu_node role checks them.

    The model is the catalog model's first token (`H100-SXM5-80GB` -> `H100`), the
    part nvidia-smi's name carries. A host whose block has no GPUs gets none.
    """
    node = host.block.node
    if node is None or node.gpus is None:
        return {}
    gpus = node.gpus
    return {
        "gpu_node_expected_count": gpus.count,
        "gpu_node_expected_model": gpus.model.split("-", 1)[0],
        "gpu_node_nvswitches": gpus.nvswitches,
    }


def host_vars(host: Host, peers: PeerIndex, storage: dict | None = None) -> dict:
    """What rackform writes for a host (with its `storage` variables, rackform.render.storage_vars),
    then the inventory's own variables of the host."""
    own = {**own_host_vars(host, peers), **(storage or {})}
    return {**own, **host.user_vars} if host.user_vars else own


def own_host_vars(host: Host, peers: PeerIndex) -> dict:
    """The variables rackform derives for a host (none of the inventory's pass-through ones).

    Built key by key, the ones without a value left out (10,000 hosts: no `_present` dicts
    made and filtered); tests/unit/test_host_vars_plain.py holds the keys, their order and
    values to a plain version."""
    fabric_ports: dict[str, dict] = {}
    host_name, addresses, macs = host.name, host.fabric_addresses, host.fabric_macs
    for port in host.ports.values():
        if port.role != "fabric":
            continue
        name = port.name
        peer = peers.get((host_name, name))
        address = addresses.get(name)
        mac = macs.get(name)
        if peer is None and address is None and mac is None:
            continue
        entry: dict = {} if address is None else {"address": address_text(address)}
        if mac is not None:
            entry["mac"] = mac
        if port.speed_gbps is not None:
            entry["speed_gbps"] = port.speed_gbps
        if peer is not None:
            entry["peer_switch"] = peer.device
            entry["peer_port"] = peer.port
        fabric_ports[name] = entry
    own: dict = {}
    if host.management_address is not None:
        own["ansible_host"] = own["management_address"] = address_text(host.management_address)
    if host.management_mac is not None:
        own["management_mac"] = host.management_mac
    if host.bmc_address is not None:
        own["bmc_address"] = address_text(host.bmc_address)
    if host.bmc_mac is not None:
        own["bmc_mac"] = host.bmc_mac
    if host.serial is not None:
        own["serial_number"] = host.serial
    device = host.device
    own["device_name"] = device.name
    own["block_type"] = device.block.name
    own["rack_name"] = device.rack
    own["rack_position_u"] = device.position_u
    own["host_role"] = host.role
    own["fabric_ports"] = fabric_ports
    own.update(gpu_vars(host))
    if device.roce_overrides is not None:
        own.update(_overrides(device, _HOST_OVERRIDES))
    return own


def switch_vars(switch: Switch, peers: PeerIndex, switches: dict[str, Switch]) -> dict:
    """What rackform writes for a managed switch, then the inventory's own variables of it."""
    own = own_switch_vars(switch, peers, switches)
    return {**own, **switch.user_vars} if switch.user_vars else own


def own_switch_vars(switch: Switch, peers: PeerIndex, switches: dict[str, Switch]) -> dict:
    ports: dict[str, dict] = {}
    for port in switch.ports.values():
        peer = peers.get((switch.name, port.name))
        if peer is None:
            continue
        far_switch = switches.get(peer.device)
        ports[port.name] = {
            "peer": peer.device,
            "peer_port": peer.port,
            "description": str(peer),
            "speed_gbps": port.speed_gbps,
            # Leaf-spine links run BGP unnumbered; links to hosts do not.
            "bgp_peer": far_switch is not None and far_switch.role in ("leaf", "spine"),
        }
    return {
        **_present(
            ansible_host=_text(switch.management_address),
            management_address=_text(switch.management_address),
            management_mac=switch.management_mac,
            serial_number=switch.serial,
        ),
        **_place(switch.device),
        **_present(switch_role=switch.role, switch_os=switch.os, switch_fabric=switch.fabric, switch_asn=switch.asn),
        "switch_ports": ports,
        **_overrides(switch.device, _SWITCH_OVERRIDES),
    }
