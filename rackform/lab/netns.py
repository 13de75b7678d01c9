"""Thin, idempotent helpers around `ip`: namespaces, veth pairs, bridges, addresses.

Each helper first looks at what exists (`ip -j`), so calling it twice changes nothing;
each returns True when it changed something. A failing command raises LabError with
the command line and its stderr.
"""

from __future__ import annotations

import hashlib
import json
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from rackform.lab import LabError, run

NETNS_DIR = Path("/run/netns")
IFNAME_MAX = 15  # the kernel's IFNAMSIZ less the NUL


def short_ifname(preferred: str, salt: str) -> str:
    """`preferred` when it fits the kernel's 15 characters, else a stable hashed name."""
    if len(preferred) <= IFNAME_MAX:
        return preferred
    return "rf" + hashlib.sha1(salt.encode()).hexdigest()[: IFNAME_MAX - 2]


def _ip(netns: str | None, *args: str) -> list[str]:
    return ["ip", *(["-n", netns] if netns else []), *args]


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def list_netns(prefix: str) -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob(f"{prefix}*")) if NETNS_DIR.exists() else []


def add_netns(name: str) -> bool:
    if netns_exists(name):
        return False
    run(["ip", "netns", "add", name])
    run(_ip(name, "link", "set", "lo", "up"))
    return True


def delete_netns(name: str) -> bool:
    """Delete a namespace; the veths inside go with it, and so do their peers."""
    if not netns_exists(name):
        return False
    run(["ip", "netns", "del", name])
    return True


def link(name: str, netns: str | None = None) -> dict | None:
    """The link's `ip -j link show` record, or None when it does not exist."""
    result = run(_ip(netns, "-j", "link", "show", "dev", name), check=False)
    if result.returncode != 0:
        return None
    records = json.loads(result.stdout or "[]")
    return records[0] if records else None


def add_bridge(name: str, mtu: int, mac: str) -> bool:
    """A bridge with a fixed MAC (else it takes its lowest port's, and changes with them)."""
    if link(name) is not None:
        return False
    # No STP and no forwarding delay: lab ports forward as soon as they come up.
    run(["ip", "link", "add", name, "address", mac, "mtu", str(mtu), "type", "bridge", "stp_state", "0",
         "forward_delay", "0"])
    run(["ip", "link", "set", name, "up"])
    return True


def delete_link(name: str, netns: str | None = None) -> bool:
    if link(name, netns) is None:
        return False
    # A veth whose peer's namespace was just deleted vanishes a moment later by
    # itself: losing that race is not an error.
    result = run(_ip(netns, "link", "del", name), check=False)
    if result.returncode != 0 and link(name, netns) is not None:
        raise LabError(f"`ip link del {name}` failed: {result.stderr.strip()}")
    return True


def add_veth(name: str, netns: str | None, mac: str, mtu: int,
             peer: str, peer_netns: str | None, peer_mac: str, peer_mtu: int) -> bool:
    """A veth pair created straight in its namespaces (None: the root namespace), both ends up.

    The two ends may have different MTUs, as a server NIC (9000) and a switch port (9216)
    do: each end drops frames larger than its own MTU.
    """
    if link(name, netns) is not None:
        return False
    run(["ip", "link", "add", "name", name, *(["netns", netns] if netns else []),
         "address", mac, "mtu", str(mtu), "type", "veth",
         "peer", "name", peer, *(["netns", peer_netns] if peer_netns else []),
         "address", peer_mac, "mtu", str(peer_mtu)])
    run(_ip(netns, "link", "set", name, "up"))
    run(_ip(peer_netns, "link", "set", peer, "up"))
    return True


def set_master(name: str, bridge: str) -> bool:
    record = link(name)
    if record is not None and record.get("master") == bridge:
        return False
    run(["ip", "link", "set", name, "master", bridge])
    return True


def addresses(name: str, netns: str | None = None) -> set[IPv4Interface]:
    result = run(_ip(netns, "-j", "-4", "addr", "show", "dev", name))
    return {IPv4Interface(f"{a['local']}/{a['prefixlen']}")
            for record in json.loads(result.stdout or "[]") for a in record.get("addr_info", [])}


def add_address(name: str, address: IPv4Interface, netns: str | None = None) -> bool:
    if address in addresses(name, netns):
        return False
    run(_ip(netns, "addr", "add", str(address), "dev", name))
    return True


def set_default_route(gateway: IPv4Address, netns: str) -> bool:
    current = run(_ip(netns, "-j", "route", "show", "default")).stdout
    if any(r.get("gateway") == str(gateway) for r in json.loads(current or "[]")):
        return False
    run(_ip(netns, "route", "replace", "default", "via", str(gateway)))
    return True


def flush_neighbours(name: str) -> None:
    """Forget ARP entries learned on a link, so a rebuilt node is reachable at once."""
    if link(name) is not None:
        run(["ip", "neigh", "flush", "dev", name], check=False)
