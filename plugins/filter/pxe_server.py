"""Filters of the pxe_server role: the DHCP reservations and the network's netmask.

`pxe_server_hosts` reads every client's variables once, in one pass: the play runs
on the PXE host alone, so the site is walked once, never once per host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping


def pxe_server_hosts(names: Iterable[str], hostvars: Mapping) -> list[dict[str, str]]:
    """{name, mac, address, role} for each named host that has a management MAC and address.

    Hosts without a MAC cannot be reserved (the preflight checks report them); a host
    named twice is listed once. MACs are lower-case, as DHCP clients and iPXE write them.
    """
    reservations: list[dict[str, str]] = []
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        variables = hostvars[name]
        mac = variables.get("management_mac")
        address = variables.get("management_address")
        if mac and address:
            reservations.append({"name": str(name), "mac": str(mac).lower(), "address": str(address),
                                 "role": str(variables.get("host_role") or "")})
    return reservations


def pxe_server_netmask(prefix: str) -> str:
    """`10.64.0.0/16` -> `255.255.0.0`."""
    return str(ipaddress.IPv4Network(prefix, strict=False).netmask)


class FilterModule:
    def filters(self):
        return {"pxe_server_hosts": pxe_server_hosts, "pxe_server_netmask": pxe_server_netmask}
