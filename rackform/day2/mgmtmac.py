"""A new node's management MAC: the PXE server's DHCP leases, else the neighbour table.

The PXE server (dnsmasq) records each lease as `EXPIRY MAC ADDRESS HOSTNAME CLIENT-ID`;
the node's lease is the one for the address or host name it advertises on LLDP. Without a
lease file, the address it advertises is sent one UDP datagram (which makes the kernel resolve it) and this machine's neighbour
table gives the MAC that answered: that works where rackform runs on the management
network, as in the lab.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from pathlib import Path

from rackform.ipmi.discovery import neighbour_mac


def from_leases(leases: Path, addresses: Iterable[str], hostname: str | None) -> str | None:
    wanted = set(addresses)
    try:
        lines = leases.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):  # the newest lease last
        fields = line.split()
        if len(fields) >= 4 and (fields[2] in wanted or (hostname and fields[3] == hostname)):
            return fields[1].lower()
    return None


def from_neighbours(addresses: Iterable[str]) -> str | None:
    for address in addresses:
        _nudge(address)
        mac = neighbour_mac(address)
        if mac:
            return mac
    return None


def management_mac(addresses: Iterable[str], hostname: str | None, leases: Path | None = None) -> tuple[str | None, str]:
    """(MAC or None, where it came from)."""
    addresses = list(addresses)
    if leases is not None:
        mac = from_leases(leases, addresses, hostname)
        if mac:
            return mac, f"DHCP lease in {leases}"
    mac = from_neighbours(addresses)
    if mac:
        return mac, f"neighbour table ({', '.join(addresses)})"
    return None, "no lease and no neighbour entry"


def _nudge(address: str, wait_s: float = 0.5) -> None:
    """Send one datagram (discard port) so the kernel resolves the address's MAC."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.sendto(b"", (address, 9))
        except OSError:
            return
    time.sleep(wait_s)
