"""Parsers for what fabric devices print: the inputs of the live consistency check.

Pure functions from text to small records, so every one is tested against outputs
recorded from real nodes (tests/unit/data/fabric_check/). Nothing here talks to a
device; `rackform.fabric.live` collects the text, `rackform.fabric.check` compares.
Here: the snapshot framing, links, LLDP and hosts; switches are in `check_parse_switch`.

A value the output does not state stays None: "not configured" and "not readable"
are decided by the caller, which knows which command produced the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

SECTION_MARK = "@@rackform-section "
RC_MARK = "@@rackform-rc "
PRIORITY_COUNT = 8  # 802.1p priorities and traffic classes are both 0..7


class ParseError(ValueError):
    """Output that is not what the command prints; the message says what was expected."""


# ---------------------------------------------------------------- the snapshot framing


@dataclass(frozen=True, slots=True)
class Section:
    """One command's output within a device snapshot, with its exit status."""

    rc: int
    text: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


def parse_sections(text: str) -> dict[str, Section]:
    """Split a snapshot (`@@rackform-section NAME` ... `@@rackform-rc N`) into its sections."""
    sections: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(SECTION_MARK):
            name, lines = line[len(SECTION_MARK):].strip(), []
        elif line.startswith(RC_MARK) and name is not None:
            body = "\n".join(lines)
            sections[name] = Section(int(line[len(RC_MARK):].strip() or 1), body.removesuffix("\n"))
            name = None
        elif name is not None:
            lines.append(line)
    return sections


# ---------------------------------------------------------------- links: ip -j -d link, speed


@dataclass(frozen=True, slots=True)
class LinkState:
    """A network interface as the kernel reports it."""

    name: str
    mtu: int
    up: bool
    """Administratively up with a carrier (flags UP and LOWER_UP)."""
    mac: str | None
    alias: str | None
    kind: str | None
    """`linkinfo.info_kind` (veth, bridge, bond ...); None for a physical port."""


def parse_ip_links(text: str) -> dict[str, LinkState]:
    """`ip -j -d link show` -> interface name -> LinkState."""
    try:
        records = json.loads(text or "[]")
    except ValueError as error:
        raise ParseError(f"`ip -j link` did not print JSON: {error}") from None
    links = {}
    for record in records:
        flags = set(record.get("flags", ()))
        links[record["ifname"]] = LinkState(
            name=record["ifname"],
            mtu=int(record.get("mtu", 0)),
            up={"UP", "LOWER_UP"} <= flags,
            mac=record.get("address"),
            alias=record.get("ifalias"),
            kind=(record.get("linkinfo") or {}).get("info_kind"),
        )
    return links


def parse_speeds(text: str) -> dict[str, int]:
    """`grep -H . /sys/class/net/*/speed` -> interface -> Mb/s (down links print -1)."""
    speeds = {}
    for line in text.splitlines():
        match = re.fullmatch(r"/sys/class/net/([^/]+)/speed:(-?\d+)", line.strip())
        if match:
            speeds[match.group(1)] = int(match.group(2))
    return speeds


# ---------------------------------------------------------------- LLDP: lldpcli -f json show neighbors


@dataclass(frozen=True, slots=True)
class LldpNeighbor:
    """Who is at the far end of a local port, as its LLDP frames say."""

    system: str | None
    port_id: str | None
    port_id_type: str | None
    """`ifname`, `mac`, `local` ...: how to read `port_id`."""
    port_descr: str | None


def _lldp_interfaces(interfaces) -> Iterable[tuple[str, dict]]:
    # lldpcli's json prints one neighbour as an object and several as a list of
    # one-key objects (`"interface": [{"swp1": {...}}, {"swp2": {...}}]`).
    if isinstance(interfaces, dict):
        yield from interfaces.items()
    elif isinstance(interfaces, list):
        for item in interfaces:
            yield from item.items()


def _first(mapping_or_list):
    if isinstance(mapping_or_list, list):
        return mapping_or_list[0] if mapping_or_list else {}
    return mapping_or_list or {}


def parse_lldp_neighbors(text: str) -> dict[str, list[LldpNeighbor]]:
    """`lldpcli -f json show neighbors` -> local port -> neighbours seen on it."""
    try:
        data = json.loads(text or "{}")
    except ValueError as error:
        raise ParseError(f"`lldpcli -f json show neighbors` did not print JSON: {error}") from None
    neighbors: dict[str, list[LldpNeighbor]] = {}
    for local_port, facts in _lldp_interfaces((data.get("lldp") or {}).get("interface")):
        chassis = _first(facts.get("chassis"))
        # The chassis object is keyed by the system name when the neighbour sent one.
        system = next((name for name, value in chassis.items() if isinstance(value, dict)), None)
        if system is None and "name" in chassis:
            system = _first(chassis["name"]).get("value")
        port = _first(facts.get("port"))
        port_id = _first(port.get("id"))
        port_descr = port.get("descr")
        neighbors.setdefault(local_port, []).append(LldpNeighbor(
            system=system,
            port_id=port_id.get("value"),
            port_id_type=port_id.get("type"),
            port_descr=port_descr if isinstance(port_descr, str) else None,
        ))
    return neighbors


# ---------------------------------------------------------------- hosts: sysctl, ConnectX NIC QoS


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl KEY ...` lines (`key = value`) -> {key: value}."""
    values = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            key, value = line.split("=", 1)
            values[key.strip()] = " ".join(value.split())
    return values


@dataclass(frozen=True, slots=True)
class NicQos:
    """A ConnectX port's QoS as `mlnx_qos -i PORT` prints it."""

    trust: str | None
    dscp_to_priority: dict[int, int]
    pfc_priorities: tuple[int, ...]
    priority_to_tc: dict[int, int]


def parse_mlnx_qos(text: str) -> NicQos:
    """`mlnx_qos -i PORT`: `Priority trust state: dscp`, the `dscp2prio mapping` rows,
    the PFC `enabled` row under `priority 0 1 ... 7`, and `tc: N` blocks listing
    `priority: P` lines (the priorities that traffic class serves)."""
    trust = None
    dscp_map: dict[int, int] = {}
    pfc: tuple[int, ...] = ()
    priority_to_tc: dict[int, int] = {}
    current_tc: int | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Priority trust state:"):
            trust = line.split(":", 1)[1].strip() or None
            continue
        match = re.fullmatch(r"prio:(\d) dscp:([\d,]*)", line)
        if match:
            for dscp in (int(d) for d in match.group(2).split(",") if d):
                dscp_map[dscp] = int(match.group(1))
            continue
        words = line.split()
        if words[:1] == ["enabled"] and len(words) == PRIORITY_COUNT + 1:
            pfc = tuple(p for p, flag in enumerate(words[1:]) if flag == "1")
            continue
        match = re.match(r"tc: (\d)\b", line)
        if match:
            current_tc = int(match.group(1))
            continue
        match = re.fullmatch(r"priority:\s+(\d)", line)
        if match and current_tc is not None:
            priority_to_tc[int(match.group(1))] = current_tc
    if trust is None and not pfc and not dscp_map:
        raise ParseError("not `mlnx_qos -i PORT` output: no trust state, PFC row or dscp2prio map")
    return NicQos(trust, dscp_map, pfc, priority_to_tc)


def parse_traffic_class(text: str) -> int | None:
    """/sys/class/infiniband/DEV/tc/1/traffic_class: `Global tclass=106` (empty: not set)."""
    match = re.search(r"tclass=(\d+)", text)
    return int(match.group(1)) if match else None


def parse_sysfs_values(text: str) -> dict[str, str]:
    """`grep -H . FILES` -> {path: first line}."""
    values = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        if sep:
            values[path.strip()] = value.strip()
    return values


@dataclass(frozen=True, slots=True)
class HostRoceConfig:
    """What the roce_host role persisted for its boot-time unit to apply
    (/etc/rackform/roce-host.json)."""

    trust: str | None
    pfc_priorities: tuple[int, ...] | None
    roce_tos: int | None
    ecn: bool | None
    roce_priority: int | None
    cnp_priority: int | None
    mtu: int | None


def parse_roce_host_config(text: str) -> HostRoceConfig:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ParseError(f"the roce_host settings are not JSON: {error}") from None
    qos = data.get("qos") or {}
    pfc = qos.get("pfc_priorities")
    return HostRoceConfig(
        trust=qos.get("trust"),
        pfc_priorities=tuple(sorted(set(int(p) for p in pfc))) if isinstance(pfc, list) else None,
        roce_tos=_int_or_none(qos.get("roce_tos")),
        ecn=qos.get("ecn") if isinstance(qos.get("ecn"), bool) else None,
        roce_priority=_int_or_none(qos.get("roce_priority")),
        cnp_priority=_int_or_none(qos.get("cnp_priority")),
        mtu=_int_or_none(data.get("mtu")),
    )


def _int_or_none(value) -> int | None:
    return int(value) if isinstance(value, int) or (isinstance(value, str) and value.isdigit()) else None


def parse_env_lines(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines (/etc/nccl.conf), comments dropped."""
    values = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip().strip('"')
    return values
