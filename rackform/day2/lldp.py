"""A new node's fabric cabling, as the leaves hear it on LLDP.

Every leaf runs lldpd (real lldpd in the lab, Cumulus's own on hardware); `lldpcli -f json
show neighbors` there lists, per switch port, the neighbour's system name, port (its
interface name: the lab's lldpd sends `portidsubtype ifname`) and chassis facts (its MAC
and the management addresses it advertises). A new node is a system name the site does
not know, heard on leaf ports the cabling plan leaves free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rackform.fabric.check_parse import _first, _lldp_interfaces  # lldpcli's JSON shapes, read once
from rackform.fabric.live import LiveError, SshTransport, Target
from rackform.model.site import Site

LLDP_SCRIPT = "lldpcli -f json show neighbors\n"


@dataclass(frozen=True, slots=True)
class Heard:
    """One neighbour one leaf port hears."""

    switch: str
    switch_port: str
    system: str | None
    port: str | None
    chassis_mac: str | None
    mgmt_ips: tuple[str, ...]


def parse(switch: str, text: str) -> list[Heard]:
    try:
        data = json.loads(text or "{}")
    except ValueError as error:
        raise LiveError(f"{switch}: `lldpcli -f json show neighbors` did not print JSON: {error}") from None
    heard = []
    for local_port, facts in _lldp_interfaces((data.get("lldp") or {}).get("interface")):
        chassis = _first(facts.get("chassis"))
        system = next((name for name, value in chassis.items() if isinstance(value, dict)), None)
        details = chassis.get(system, {}) if system else chassis
        if system is None and "name" in chassis:
            system = _first(chassis["name"]).get("value")
        chassis_id = _first(details.get("id"))
        ips = details.get("mgmt-ip") or []
        ips = [ips] if isinstance(ips, str) else list(ips)
        port = _first(_first(facts.get("port")).get("id"))
        heard.append(Heard(switch, local_port, system, port.get("value"),
                           chassis_id.get("value") if chassis_id.get("type") == "mac" else None,
                           tuple(ip for ip in ips if ":" not in ip)))
    return heard


def leaves(site: Site) -> list[Target]:
    """The leaves LLDP is read on (Linux switches only: Onyx is not read over LLDP here)."""
    return [Target(switch.name, switch.os, str(switch.management_address))
            for switch in site.switches.values()
            if switch.role == "leaf" and switch.os == "cumulus" and switch.management_address is not None]


Reader = Callable[[Target], str]


def ssh_reader(transport: SshTransport) -> Reader:
    return lambda target: transport.run_script(target, LLDP_SCRIPT)


def read(site: Site, reader: Reader) -> list[Heard]:
    heard = []
    for target in leaves(site):
        heard += parse(target.name, reader(target))
    return heard


def cabled_ports(site: Site) -> set[tuple[str, str]]:
    return {(end.device, end.port) for cable in site.cables for end in (cable.a, cable.b)}


def strangers(site: Site, heard: Iterable[Heard]) -> list[Heard]:
    """Neighbours on leaf ports the plan leaves free, from systems the site does not know."""
    known = set(site.hosts) | set(site.switches)
    cabled = cabled_ports(site)
    return [item for item in heard
            if (item.switch, item.switch_port) not in cabled and item.system not in known]


def by_system(heard: Iterable[Heard]) -> dict[str, list[Heard]]:
    systems: dict[str, list[Heard]] = {}
    for item in heard:
        systems.setdefault(item.system or f"chassis {item.chassis_mac}", []).append(item)
    return systems
