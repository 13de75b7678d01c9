"""`rackform fabric check`: do the two ends of every fabric link agree on lossless RoCE?

Per link (host to leaf, leaf to spine) and per setting — PFC priorities, trust mode,
DSCP -> priority -> traffic class, CNP priority, ECN, MTU (host below switch less L2
overhead), speed — the check compares:

- the design's two ends with each other (`kind: design`), with the same rules as the
  preflight (`rackform.checks.roce`), but reported per link;
- with live devices (`kind: live`): what each end runs against what the design wants
  there, and the two live ends against each other;
- LLDP (`kind: lldp`): the neighbour each end sees against the cabling plan.

Every mismatch names its link and setting and carries both ends' design values and,
when live, both ends' live values. A value a device cannot give is listed once under
"not readable here (REASON)", never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rackform.checks.roce import L2_OVERHEAD_B
from rackform.fabric.check_ends import (
    CONFIG_PREFIX,
    HOST_CONFIG_SETTINGS,
    DesignEnds,
    EndValues,
    FabricLink,
    RocePath,
    fabric_links,
    live_end,
    live_host_wide,
)
from rackform.fabric.check_parse import LldpNeighbor
from rackform.fabric.live import LiveDevice, Unreadable
from rackform.model.schema import RoceIntent
from rackform.model.site import Endpoint, Site

SETTING_TITLES = {
    "link_state": "link state",
    "description": "port description",
    "pfc_priorities": "PFC priorities",
    "trust": "trust mode",
    "roce_path": "RoCE DSCP -> priority -> traffic class",
    "cnp_priority": "CNP priority",
    "ecn": "ECN",
    "ecn_thresholds_kb": "ECN thresholds min/max",
    "pfc_watchdog": "PFC watchdog",
    "mtu": "MTU",
    "mtu_persisted": "MTU in /etc/network/interfaces",
    "speed_gbps": "speed Gb/s",
    "bgp_unnumbered": "BGP unnumbered session",
    "lldp": "LLDP neighbour",
    "roce_host_config": "roce_host settings (/etc/rackform/roce-host.json)",
    "roce_host_unit": "roce_host boot unit (rackform-roce-host.service)",
    "nccl_ib_tc": "NCCL_IB_TC in /etc/nccl.conf",
    "net.ipv4.tcp_ecn": "ECN sysctl net.ipv4.tcp_ecn",
    "reachable": "reachable",
}
SETTING_TITLES.update({f"{CONFIG_PREFIX}{name}": f"{SETTING_TITLES[name]} in roce-host.json"
                       for name in HOST_CONFIG_SETTINGS})
SETTING_ORDER = {name: index for index, name in enumerate(SETTING_TITLES)}
UNREADABLE_SHOWN = 8
"""Endpoints named per "not readable" line; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Mismatch:
    link: str
    """`host:port - switch:port`, `device (host-wide)` or a device name."""
    setting: str
    kind: str
    """design | live | lldp | unreachable"""
    message: str
    design: dict[str, object] = field(default_factory=dict)
    """Endpoint -> the design's value there."""
    live: dict[str, object] = field(default_factory=dict)
    """Endpoint -> the live value there (or Unreadable)."""


@dataclass(slots=True)
class FabricReport:
    site: str
    live_source: str | None
    """Where live values came from (`lab chktest`, `devices`), None for a design-only check."""
    links_checked: int = 0
    devices_read: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    unreadable: dict[tuple[str, tuple[str, ...]], list[str]] = field(default_factory=dict)
    """(reason, settings) -> endpoints where those settings cannot be read for that reason."""

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def links_with_mismatches(self) -> int:
        return len({mismatch.link for mismatch in self.mismatches})


# ---------------------------------------------------------------- value text


def value_text(value: object) -> str:
    """A value as the report prints it: `[3]` for priorities, `on`/`off`, `not set` ..."""
    if isinstance(value, Unreadable):
        return str(value)
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return f"[{', '.join(map(str, value))}]"
    return str(value)


# ---------------------------------------------------------------- rules: do two ends agree?

Rule = Callable[[RoceIntent, FabricLink, EndValues, EndValues], "str | None"]


def _readable(*values: object) -> bool:
    """Values a rule can compare: read, and set."""
    return all(value is not None and not isinstance(value, Unreadable) for value in values)


def _pfc_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    pa, pb = a.get("pfc_priorities"), b.get("pfc_priorities")
    if not _readable(pa, pb):
        return None
    want = (roce.priority,)
    if pa == want and pb == want:
        return None
    notes = []
    if pa != pb:
        notes.append("pause frames for a priority only one end honours drop packets")
    for end, found in ((link.a, pa), (link.b, pb)):
        if roce.priority not in found:
            notes.append(f"RoCE on priority {roce.priority} is not lossless at {end}")
        if roce.cnp_priority in found:
            notes.append(f"{end} pauses the CNP priority {roce.cnp_priority}, which must run without PFC")
        extra = [p for p in found if p not in (roce.priority, roce.cnp_priority)]
        if extra:
            notes.append(f"extra lossless priorities {list(extra)} at {end} can deadlock the fabric")
    return (f"{link.a} {value_text(pa)}, {link.b} {value_text(pb)}: PFC belongs on exactly [{roce.priority}] "
            f"at both ends (fabric.roce.priority); " + "; ".join(dict.fromkeys(notes)))


def _trust_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    ta, tb = a.get("trust"), b.get("trust")
    if not _readable(ta, tb) or ta == tb:
        return None
    return f"{link.a} trusts {ta}, {link.b} trusts {tb}: both ends must classify RoCE the same way"


def _roce_path_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    ra, rb = a.get("roce_path"), b.get("roce_path")
    if not _readable(ra, rb):
        return None
    want = RocePath(roce.dscp, roce.priority, roce.priority)
    if ra == want and rb == want:
        return None
    return f"{link.a} {ra}, {link.b} {rb}: RoCE needs {want} at both ends (fabric.roce)"


def _cnp_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    problems = []
    for end, values in ((link.a, a), (link.b, b)):
        found = values.get("cnp_priority", "absent")
        if found == "absent" or not _readable(found):
            continue
        if found != roce.cnp_priority:
            problems.append(f"{end} puts CNP (DSCP {roce.cnp_dscp}) on priority {value_text(found)}, "
                            f"the design on {roce.cnp_priority}")
        elif found == roce.priority:
            problems.append(f"{end} puts CNP on the RoCE priority {found}: notifications queue behind "
                            "the traffic they throttle")
    return "; ".join(problems) or None


def _ecn_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    ea, eb = a.get("ecn"), b.get("ecn")
    problems = []
    if _readable(ea, eb) and ea != eb:
        problems.append(f"ECN is {value_text(ea)} at {link.a} but {value_text(eb)} at {link.b}: congestion "
                        "control needs it at both ends or neither")
    for end, values in ((link.a, a), (link.b, b)):
        marks = values.get("ecn_thresholds_kb")
        if _readable(marks) and _readable(marks.min_kb, marks.max_kb) and marks.min_kb >= marks.max_kb:
            problems.append(f"{end} ECN minimum {marks.min_kb} KB is not below maximum {marks.max_kb} KB")
    return "; ".join(problems) or None


def _mtu_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    ma, mb = a.get("mtu"), b.get("mtu")
    if not _readable(ma, mb):
        return None
    if link.host_link:
        if ma + L2_OVERHEAD_B <= mb:
            return None
        return (f"host MTU {ma} at {link.a} + {L2_OVERHEAD_B} B of L2 overhead = {ma + L2_OVERHEAD_B} B exceeds "
                f"MTU {mb} at {link.b}: full-size frames are dropped")
    if ma == mb:
        return None
    return f"MTU {ma} at {link.a} but {mb} at {link.b}: frames above {min(ma, mb)} B are dropped one way"


def _speed_rule(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> str | None:
    sa, sb = a.get("speed_gbps"), b.get("speed_gbps")
    if not _readable(sa, sb) or sa == sb:
        return None
    return f"{link.a} at {sa} Gb/s, {link.b} at {sb} Gb/s: both ends of a cable run one speed"


PAIR_RULES: dict[str, Rule] = {
    "pfc_priorities": _pfc_rule,
    "trust": _trust_rule,
    "roce_path": _roce_path_rule,
    "cnp_priority": _cnp_rule,
    "ecn": _ecn_rule,
    "mtu": _mtu_rule,
    "speed_gbps": _speed_rule,
}


def _design_speed_problem(link: FabricLink) -> str | None:
    """A host port faster than its switch port trains down; switch-to-switch ports should match."""
    if link.host_link and link.a_speed_gbps > link.b_speed_gbps:
        return (f"host port {link.a} ({link.a_speed_gbps}G) on switch port {link.b} ({link.b_speed_gbps}G): "
                f"the link trains at {link.b_speed_gbps}G")
    if not link.host_link and link.a_speed_gbps != link.b_speed_gbps:
        return f"{link.a} is {link.a_speed_gbps}G but {link.b} is {link.b_speed_gbps}G"
    return None


# ---------------------------------------------------------------- the check


def _settings(a: EndValues, b: EndValues) -> list[str]:
    return sorted(set(a) | set(b), key=lambda name: SETTING_ORDER.get(name, len(SETTING_ORDER)))


def _pair(link: FabricLink, a: EndValues, b: EndValues, setting: str) -> dict[str, object]:
    return {str(end): values[setting] for end, values in ((link.a, a), (link.b, b)) if setting in values}


def design_mismatches(roce: RoceIntent, link: FabricLink, a: EndValues, b: EndValues) -> list[Mismatch]:
    """Where the design's two ends of a link disagree (speed aside: `design_speed_mismatch`)."""
    found = []
    for setting, rule in PAIR_RULES.items():
        problem = rule(roce, link, a, b) if setting != "speed_gbps" else None
        if problem:
            found.append(Mismatch(str(link), setting, "design", problem, design=_pair(link, a, b, setting)))
    return found


def design_speed_mismatch(link: FabricLink) -> Mismatch | None:
    problem = _design_speed_problem(link)
    if problem is None:
        return None
    design = {str(link.a): link.a_speed_gbps, str(link.b): link.b_speed_gbps}
    return Mismatch(str(link), "speed_gbps", "design", problem, design=design)


def live_mismatches(roce: RoceIntent, link: FabricLink, design: tuple[EndValues, EndValues],
                    live: tuple[EndValues, EndValues]) -> list[Mismatch]:
    """Each setting where an end runs something else than the design wants there, or where
    the two live ends disagree; one mismatch per setting with all four values."""
    found = []
    (design_a, design_b), (live_a, live_b) = design, live
    for setting in _settings(design_a, design_b):
        drifts = []
        for end, want, values in ((link.a, design_a, live_a), (link.b, design_b, live_b)):
            if (setting in want and setting in values and not isinstance(values[setting], Unreadable)
                    and values[setting] != want[setting]):
                drifts.append(f"{end} runs {value_text(values[setting])}, the design says "
                              f"{value_text(want[setting])}")
        rule = PAIR_RULES.get(setting)
        disagreement = rule(roce, link, live_a, live_b) if rule else None
        if disagreement and not drifts and rule(roce, link, design_a, design_b):
            disagreement = None  # the design itself disagrees: reported once, as kind design
        if drifts and disagreement and setting != "mtu" and live_a.get(setting) == live_b.get(setting):
            disagreement = None  # both ends drifted alike: the drifts say it all
        if drifts or disagreement:
            message = "; ".join(drifts + ([disagreement] if disagreement else []))
            found.append(Mismatch(str(link), setting, "live", message, design=_pair(link, design_a, design_b, setting),
                                  live=_pair(link, live_a, live_b, setting)))
    return found


# ---- LLDP


def _neighbour_name(neighbour: LldpNeighbor, macs: Mapping[str, str]) -> str:
    """`device:port` of an LLDP neighbour: port ID by name, else by MAC, else its description.

    The system name is cut to its first label: lldpd sends the FQDN once the host resolves
    it (`node-2.chktest.rackform.test` after /etc/hosts names the domain); design names
    never hold a dot.
    """
    system = (neighbour.system or "?").split(".", 1)[0]
    port = neighbour.port_id
    if neighbour.port_id_type == "mac" and port:
        port = macs.get(port.lower(), port)
        port = port.split(":", 1)[1] if port.startswith(f"{system}:") else port
    elif neighbour.port_id_type not in ("ifname", None) and neighbour.port_descr:
        port = neighbour.port_descr
    return f"{system}:{port or '?'}"


def _mac_index(live: Mapping[str, LiveDevice]) -> dict[str, str]:
    """MAC -> `device:port` over every port read; a bridge shares its first port's MAC, so
    ports come before the bridges, bonds and VLANs built on them."""
    index: dict[str, str] = {}
    for device in live.values():
        for name, link in device.links.items():
            if link.mac and link.kind not in ("bridge", "bond", "vlan"):
                index.setdefault(link.mac.lower(), f"{device.name}:{name}")
    return index


def lldp_mismatch(link: FabricLink, live: Mapping[str, LiveDevice],
                  macs: Mapping[str, str]) -> tuple[Mismatch | None, dict[str, object]]:
    """The LLDP neighbour each end sees against the cabling plan; also returns what each end saw."""
    seen: dict[str, object] = {}
    problems = []
    for end, other in ((link.a, link.b), (link.b, link.a)):
        device = live.get(end.device)
        if device is None or device.error is not None:
            seen[str(end)] = Unreadable(f"unreachable: {device.error}" if device else "not read")
            continue
        if isinstance(device.lldp, Unreadable):
            seen[str(end)] = device.lldp
            continue
        names = [_neighbour_name(n, macs) for n in device.lldp.get(end.port, [])]
        seen[str(end)] = ", ".join(names) if names else "none"
        if names == [str(other)]:
            continue  # a cable has one far end: a second neighbour is a hub, a loop or a stale entry
        problems.append(f"{end} sees {', '.join(names)}" if names else f"{end} sees no LLDP neighbour")
    if not problems:
        return None, seen
    message = "; ".join(problems) + f"; the cabling plan (cabling[{link.cable_index}]) says {link.a} <-> {link.b}"
    design = {str(link.a): str(link.b), str(link.b): str(link.a)}
    return Mismatch(str(link), "lldp", "lldp", message, design=design, live=seen), seen


# ---- the whole site


def check_fabric(site: Site, live: Mapping[str, LiveDevice] | None = None,
                 live_source: str | None = None) -> FabricReport:
    """Check every fabric link of the site, against live devices when `live` is given."""
    report = FabricReport(site.name, live_source if live is not None else None)
    roce = site.fabric.roce
    design = DesignEnds(site)
    macs = _mac_index(live) if live is not None else {}
    agreeing_kinds: set[tuple] = set()
    """(end kind, end kind, host link?) whose design values agree: most links of a big site."""
    for link in fabric_links(site):
        report.links_checked += 1
        speed_mismatch = design_speed_mismatch(link)
        if speed_mismatch is not None:
            report.mismatches.append(speed_mismatch)
        kinds = (design.kind(link.a.device), design.kind(link.b.device), link.host_link)
        if live is None and kinds in agreeing_kinds:
            continue
        speed = min(link.a_speed_gbps, link.b_speed_gbps)
        design_a, design_b = design.end(link, link.a, speed), design.end(link, link.b, speed)
        found = design_mismatches(roce, link, design_a, design_b)
        if found:
            report.mismatches += found
        else:
            agreeing_kinds.add(kinds)
        if live is None:
            continue
        live_a, live_b = (_live(site, live, end) for end in link.ends)
        report.mismatches += live_mismatches(roce, link, (design_a, design_b), (live_a, live_b))
        lldp, seen = lldp_mismatch(link, live, macs)
        if lldp is not None:
            report.mismatches.append(lldp)
        _note_unreadable(report, link, ({**live_a, "lldp": seen[str(link.a)]},
                                        {**live_b, "lldp": seen[str(link.b)]}))
    if live is not None:
        report.devices_read = len(live)
        report.mismatches += _device_mismatches(site, design, live)
    return report


def _live(site: Site, live: Mapping[str, LiveDevice], end: Endpoint) -> EndValues:
    device = live.get(end.device)
    if device is None:
        return {"link_state": Unreadable("not read")}
    return live_end(site, device, end.port)


def _note_unreadable(report: FabricReport, link: FabricLink, ends: Iterable[EndValues]) -> None:
    for end, values in zip(link.ends, ends):
        by_reason: dict[str, list[str]] = {}
        for setting, value in values.items():
            if isinstance(value, Unreadable) and not value.reason.startswith("unreachable"):
                by_reason.setdefault(value.reason, []).append(setting)
        for reason, settings in by_reason.items():
            report.unreadable.setdefault((reason, tuple(settings)), []).append(str(end))


def _device_mismatches(site: Site, design: DesignEnds, live: Mapping[str, LiveDevice]) -> list[Mismatch]:
    found = []
    for name, device in live.items():
        if device.error is not None:
            found.append(Mismatch(name, "reachable", "unreachable", f"{name} could not be read: {device.error}"))
            continue
        host = site.hosts.get(name)
        if host is None:
            continue
        want, have = design.host_wide(host), live_host_wide(device)
        for setting, wanted in want.items():
            value = have.get(setting)
            if isinstance(value, Unreadable) or value == wanted:
                continue
            title = SETTING_TITLES.get(setting, setting)
            found.append(Mismatch(f"{name} (host-wide)", setting, "live",
                                  f"{name}: {title} is {value_text(value)}, the design wants {wanted}",
                                  design={name: wanted}, live={name: value}))
    return found
