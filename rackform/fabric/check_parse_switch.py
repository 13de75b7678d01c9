"""Parsers for what switches print or keep in files: Cumulus Linux's ifupdown2 files,
frr.conf and QoS datapath file, and Onyx's `show running-config` and LLDP neighbours.

Both switch OSes come out as one `SwitchQos`, so the check compares them the same way.
Pure functions, tested against outputs recorded from the lab and the Onyx emulator
(tests/unit/data/fabric_check/).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rackform.fabric.check_parse import LldpNeighbor

KB_BYTES = 1024  # Onyx ECN thresholds are in KB; Cumulus counts bytes

# ---------------------------------------------------------------- Cumulus: ifupdown2, FRR


@dataclass(frozen=True, slots=True)
class InterfaceStanza:
    """An `iface` stanza of /etc/network/interfaces: the settings rackform compares."""

    name: str
    mtu: int | None
    alias: str | None
    source: str
    """The file it was read from."""


def _sourced_files(main_text: str, files: Mapping[str, str]) -> list[str]:
    """The files `source` lines of /etc/network/interfaces pull in, in order."""
    sourced = []
    for line in main_text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "source":
            sourced += sorted(path for path in files if fnmatch.fnmatch(path, words[1]))
    return sourced


def parse_interfaces(files: Mapping[str, str], main: str = "/etc/network/interfaces") -> dict[str, InterfaceStanza]:
    """/etc/network/interfaces and the fragments it sources -> iface name -> stanza.

    A later stanza for the same interface adds to the earlier one, as ifupdown2 merges them.
    """
    stanzas: dict[str, InterfaceStanza] = {}
    main_text = files.get(main, "")
    for path in [main, *_sourced_files(main_text, files)]:
        current: str | None = None
        for raw in files.get(path, "").splitlines():
            line = raw.split("#", 1)[0].rstrip()
            words = line.split()
            if not words:
                continue
            if not raw[0].isspace():
                current = words[1] if words[0] == "iface" and len(words) > 1 else None
                if current is not None and current not in stanzas:
                    stanzas[current] = InterfaceStanza(current, None, None, path)
                continue
            if current is None:
                continue
            stanza = stanzas[current]
            if words[0] == "mtu" and len(words) == 2 and words[1].isdigit():
                stanzas[current] = InterfaceStanza(current, int(words[1]), stanza.alias, path)
            elif words[0] == "alias" and len(words) > 1:
                stanzas[current] = InterfaceStanza(current, stanza.mtu, line.split(None, 1)[1].strip(), path)
    return stanzas


@dataclass(frozen=True, slots=True)
class FrrBgp:
    """The BGP part of frr.conf that leaf-spine links depend on."""

    asn: int | None
    unnumbered_ports: frozenset[str]
    """Interfaces with `neighbor PORT interface ...` (BGP unnumbered)."""


def parse_frr_bgp(text: str) -> FrrBgp:
    asn = None
    ports = set()
    for line in text.splitlines():
        words = line.split()
        if words[:2] == ["router", "bgp"] and len(words) >= 3 and words[2].isdigit():
            asn = int(words[2])
        elif len(words) >= 3 and words[0] == "neighbor" and words[2] == "interface":
            ports.add(words[1])
    return FrrBgp(asn, frozenset(ports))


# ---------------------------------------------------------------- switch QoS, either OS


@dataclass(frozen=True, slots=True)
class Ecn:
    traffic_classes: frozenset[int]
    min_kb: int | None
    max_kb: int | None


@dataclass(slots=True)
class SwitchQos:
    """What a switch does with RoCE traffic, the same shape for every switch OS.

    Per-port values fall back to the switch-wide ones (`*_default`).
    """

    source: str
    trust_default: str | None = None
    trust_by_port: dict[str, str] = field(default_factory=dict)
    dscp_to_priority: dict[int, int] = field(default_factory=dict)
    priority_to_tc: dict[int, int] = field(default_factory=dict)
    pfc_default: tuple[int, ...] = ()
    pfc_by_port: dict[str, tuple[int, ...]] = field(default_factory=dict)
    ecn_default: Ecn | None = None
    ecn_by_port: dict[str, Ecn] = field(default_factory=dict)
    pfc_watchdog_ports: set[str] | None = field(default_factory=set)
    """None where the source cannot say."""
    mtu_by_port: dict[str, int] = field(default_factory=dict)
    description_by_port: dict[str, str] = field(default_factory=dict)

    def trust(self, port: str) -> str | None:
        return self.trust_by_port.get(port, self.trust_default)

    def pfc(self, port: str) -> tuple[int, ...]:
        return self.pfc_by_port.get(port, self.pfc_default)

    def ecn(self, port: str) -> Ecn | None:
        return self.ecn_by_port.get(port, self.ecn_default)

    def traffic_class(self, priority: int | None) -> int | None:
        if priority is None:
            return None
        return self.priority_to_tc.get(priority, priority)  # both OSes default to identity


def default_dscp_to_priority() -> dict[int, int]:
    """The map both Onyx and ConnectX NICs use unless told otherwise: 8 DSCPs per priority."""
    return {dscp: dscp >> 3 for dscp in range(64)}


# ---- Cumulus Linux: /etc/cumulus/datapath/qos/qos_features.conf


def _conf_value(text: str):
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [item.strip() for item in text[1:-1].split(",") if item.strip()]
    return text


def parse_conf_lines(text: str) -> dict[str, object]:
    """`key = value` lines (lists as `[a, b]`), comments dropped: Cumulus datapath files."""
    values: dict[str, object] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = _conf_value(value)
    return values


def expand_port_set(text: str, known_ports: Iterable[str] = ()) -> set[str]:
    """`swp1-swp4,swp6` or `swp1-4` -> {swp1..swp4, swp6}; `allports` -> the known ports."""
    ports: set[str] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == "allports":
            ports |= set(known_ports)
            continue
        match = re.fullmatch(r"([A-Za-z]+)(\d+)-(?:[A-Za-z]+)?(\d+)", item)
        if match:
            prefix, first, last = match.group(1), int(match.group(2)), int(match.group(3))
            ports |= {f"{prefix}{n}" for n in range(first, last + 1)}
        else:
            ports.add(item)
    return ports


def _ints(value) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(sorted({int(item) for item in items if str(item).strip().lstrip("-").isdigit()}))


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def _group_names(values: Mapping[str, object], feature: str) -> list[str]:
    """Port groups of a feature: its `port_group_list`, else every `feature.NAME.port_set`."""
    listed = values.get(f"{feature}.port_group_list")
    if isinstance(listed, list):
        return listed
    prefix = f"{feature}."
    return sorted({key[len(prefix):].rsplit(".", 1)[0] for key in values
                   if key.startswith(prefix) and key.endswith(".port_set")})


def parse_cumulus_qos(text: str, source: str, known_ports: Iterable[str] = ()) -> SwitchQos:
    """qos_features.conf -> SwitchQos: trust source, DSCP -> priority (`traffic.cos_N.
    priority_source.dscp`), priority -> traffic class (`cos_egr_queue.cos_N.uc`), PFC and
    ECN port groups (`pfc.GROUP.*`, `ecn_red.GROUP.*`), PFC watchdog port groups."""
    values = parse_conf_lines(text)
    known = list(known_ports)
    qos = SwitchQos(source=source)
    trusted = values.get("traffic.packet_priority_source_set")
    if isinstance(trusted, list):
        qos.trust_default = "dscp" if "dscp" in trusted else "pcp" if "802.1p" in trusted else None
    for key, value in values.items():
        match = re.fullmatch(r"traffic\.cos_(\d)\.priority_source\.dscp", key)
        if match:
            for dscp in _ints(value):
                qos.dscp_to_priority[dscp] = int(match.group(1))
        match = re.fullmatch(r"cos_egr_queue\.cos_(\d)\.uc", key)
        if match and str(value).strip().isdigit():
            qos.priority_to_tc[int(match.group(1))] = int(str(value).strip())
    for group in _group_names(values, "pfc"):
        priorities = _ints(values.get(f"pfc.{group}.cos_list", []))
        # Lossless needs both: sending pause frames (tx) and honouring them (rx).
        if not (_true(values.get(f"pfc.{group}.tx_enable", "true"))
                and _true(values.get(f"pfc.{group}.rx_enable", "true"))):
            priorities = ()
        for port in expand_port_set(str(values.get(f"pfc.{group}.port_set", "")), known):
            qos.pfc_by_port[port] = tuple(sorted(set(qos.pfc_by_port.get(port, ())) | set(priorities)))
    for group in _group_names(values, "ecn_red"):
        if not _true(values.get(f"ecn_red.{group}.ecn_enable", "false")):
            continue
        priorities = _ints(values.get(f"ecn_red.{group}.cos_list", []))
        ecn = Ecn(
            traffic_classes=frozenset(qos.traffic_class(p) for p in priorities),
            min_kb=_kb(values.get(f"ecn_red.{group}.min_threshold_bytes")),
            max_kb=_kb(values.get(f"ecn_red.{group}.max_threshold_bytes")),
        )
        for port in expand_port_set(str(values.get(f"ecn_red.{group}.port_set", "")), known):
            qos.ecn_by_port[port] = ecn
    # The file is where the watchdog lives (NVUE writes it here too): no group, no watchdog.
    qos.pfc_watchdog_ports = set()
    for group in _group_names(values, "pfc_watchdog"):
        qos.pfc_watchdog_ports |= expand_port_set(str(values.get(f"pfc_watchdog.{group}.port_set", "")), known)
    return qos


def _kb(value) -> int | None:
    text = str(value).strip() if value is not None else ""
    return round(int(text) / KB_BYTES) if text.isdigit() else None


# ---- Onyx: show running-config


_ONYX_PORT = r"interface ethernet 1/(\d+)"
ONYX_ROCE_PRIORITY = 3
ONYX_ECN_DEFAULT_KB = (150, 1500)
"""What `roce lossless` sets on its own (docs/domain.md, "Lossless RoCE": Onyx ECN defaults min 150 KB / max 1500 KB)."""


def onyx_port_name(number: int | str) -> str:
    """Onyx prints `interface ethernet 1/5`; the design names that port `Eth1/5`."""
    return f"Eth1/{number}"


def parse_onyx_running_config(text: str, source: str) -> SwitchQos:
    """`show running-config` of an Onyx switch -> SwitchQos.

    Ports without `dcb priority-flow-control mode on` leave PFC to DCBX: no PFC is
    assumed there. Trust L3 is DSCP; Onyx maps DSCP to priority 8 to 1 unless told
    otherwise. `roce lossless` alone means PFC on 3, trust L3 and ECN on traffic class 3
    on every port (Onyx's profile defaults).
    """
    qos = SwitchQos(source=source, trust_default="pcp", dscp_to_priority=default_dscp_to_priority())
    global_pfc: set[int] = set()
    pfc_ports: set[str] = set()
    roce_lossless = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line in ("roce", "roce lossless"):
            roce_lossless = True
            continue
        match = re.fullmatch(r"dcb priority-flow-control priority (\d) enable", line)
        if match:
            global_pfc.add(int(match.group(1)))
            continue
        match = re.fullmatch(_ONYX_PORT + r" (.*)", line)
        if match:
            _onyx_port_line(qos, onyx_port_name(match.group(1)), match.group(2), pfc_ports)
    if roce_lossless:  # the profile: PFC, trust L3 and ECN on every port
        qos.trust_default = "dscp"
        qos.pfc_default = tuple(sorted(global_pfc or {ONYX_ROCE_PRIORITY}))
        qos.ecn_default = Ecn(frozenset({ONYX_ROCE_PRIORITY}), *ONYX_ECN_DEFAULT_KB)
        return qos
    for port in pfc_ports:
        qos.pfc_by_port[port] = tuple(sorted(global_pfc))
    return qos


def _onyx_port_line(qos: SwitchQos, port: str, setting: str, pfc_ports: set[str]) -> None:
    words = setting.split()
    if words[:1] == ["mtu"] and len(words) >= 2 and words[1].isdigit():
        qos.mtu_by_port[port] = int(words[1])
    elif words[:1] == ["description"]:
        qos.description_by_port[port] = setting.split(None, 1)[1].strip().strip('"') if len(words) > 1 else ""
    elif words[:2] == ["qos", "trust"] and len(words) == 3:
        qos.trust_by_port[port] = {"l3": "dscp", "l2": "pcp"}.get(words[2].lower(), words[2].lower())
    elif words[:3] == ["dcb", "priority-flow-control", "mode"] and len(words) >= 4 and words[3] == "on":
        pfc_ports.add(port)
    elif words[:1] == ["pfc-wd"]:
        qos.pfc_watchdog_ports.add(port)
    else:
        match = re.fullmatch(r"traffic-class (\d) congestion-control ecn minimum-(absolute|relative) (\d+) "
                             r"maximum-(?:absolute|relative) (\d+)", setting)
        if match:
            absolute = match.group(2) == "absolute"
            current = qos.ecn_by_port.get(port)
            classes = (current.traffic_classes if current else frozenset()) | {int(match.group(1))}
            qos.ecn_by_port[port] = Ecn(classes, int(match.group(3)) if absolute else None,
                                        int(match.group(4)) if absolute else None)


# ---- Onyx: show lldp interfaces ethernet remote

_ONYX_LLDP_PORT = re.compile(r"(?:Ethernet|Eth)\s*1/(\d+)", re.I)
_ONYX_PORT_ID_TYPES = {"mac": "mac", "mac address": "mac", "interface name": "ifname", "ifname": "ifname"}
"""Onyx's port id subtypes, as lldpcli names them (others, like `local`, stay as printed)."""


def _onyx_field(line: str, name: str) -> tuple[str, str | None] | None:
    """`Remote port-id: fab1; port id subtype: local` -> ("fab1", "local"); None if not that field."""
    prefix = f"Remote {name}:"
    if not line.startswith(prefix):
        return None
    value, _, subtype = line[len(prefix):].partition(";")
    subtype = subtype.split(":", 1)[1].strip() if ":" in subtype else None
    return value.strip(), subtype


def parse_onyx_lldp_remote(text: str) -> dict[str, list[LldpNeighbor]]:
    """`show lldp interfaces ethernet remote` of an Onyx switch -> port (`Eth1/5`) -> the
    neighbours seen on it (`LldpNeighbor`, as lldpcli's parser gives them). A block per port
    (`Ethernet 1/5` or `Eth1/5`), one `Remote Index` per neighbour, then its fields (`Remote
    port-id: X; port id subtype: Y`, `Remote port description`, `Remote system name`)."""
    found: dict[str, list[dict]] = {}
    port: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        header = _ONYX_LLDP_PORT.fullmatch(line)
        if header:
            port = onyx_port_name(header.group(1))
            found.setdefault(port, [])
            continue
        if port is None or not line:
            continue
        if line.startswith("Remote Index:"):
            found[port].append({})
            continue
        if not found[port]:
            continue
        facts = found[port][-1]
        for name, key in (("port-id", "port_id"), ("port description", "port_descr"), ("system name", "system")):
            parsed = _onyx_field(line, name)
            if parsed is not None:
                facts[key] = parsed[0] or None
                if key == "port_id" and parsed[1]:
                    facts["port_id_type"] = _ONYX_PORT_ID_TYPES.get(parsed[1].lower(), parsed[1].lower())
    return {port: [LldpNeighbor(system=f.get("system"), port_id=f.get("port_id"), port_id_type=f.get("port_id_type"),
                                port_descr=f.get("port_descr")) for f in facts]
            for port, facts in found.items() if facts}
