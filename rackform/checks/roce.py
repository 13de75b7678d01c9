"""Preflight checks: lossless RoCE. Switch and host must agree on every setting that
makes RoCE lossless (PFC priority, DSCP map, trust, ECN, CNP priority, MTU).

No other tool compares the two sides of a link; this module does, on every
host-leaf link. The settings each side runs are the site's `fabric.switch` /
`fabric.host` with the device's `roce_overrides` applied: `switch_settings` and
`host_settings` compute them, for these checks and for anything that later
compares live devices against the design.

A mistake in the site-wide settings is reported once, at `fabric:`; a link is
reported on its own only when an override makes it differ from that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rackform.checks.registry import check
from rackform.checks.cabling import HostLink, leaf_links
from rackform.checks.findings import Finding
from rackform.model.schema import Fabric, RoceIntent, RoceOverrides
from rackform.model.site import Device, Site

L2_OVERHEAD_B = 14 + 4 + 4
"""What a switch port counts on top of the host's IP MTU: Ethernet header 14, 802.1Q tag 4, FCS 4."""


@dataclass(frozen=True, slots=True)
class SwitchRoceSettings:
    """What a switch port runs for RoCE."""

    trust: str
    pfc_priorities: tuple[int, ...]
    dscp_to_priority: Mapping[int, int]
    ecn: bool
    ecn_min_kb: int
    ecn_max_kb: int
    pfc_watchdog: bool
    mtu: int


@dataclass(frozen=True, slots=True)
class HostRoceSettings:
    """What a host NIC runs for RoCE."""

    trust: str
    pfc_priorities: tuple[int, ...]
    roce_tos: int
    ecn: bool
    mtu: int


def _pick(override, default):
    return default if override is None else override


def switch_settings(fabric: Fabric, overrides: RoceOverrides | None = None) -> SwitchRoceSettings:
    """A switch's effective RoCE settings: the site's `fabric.switch` with `overrides` applied."""
    base, over = fabric.switch, overrides or RoceOverrides()
    return SwitchRoceSettings(
        trust=_pick(over.trust, base.trust),
        pfc_priorities=tuple(sorted(set(_pick(over.pfc_priorities, base.pfc_priorities)))),
        dscp_to_priority=MappingProxyType(dict(_pick(over.dscp_to_priority, base.dscp_to_priority))),
        ecn=_pick(over.ecn, base.ecn.enabled),
        ecn_min_kb=base.ecn.min_kb,
        ecn_max_kb=base.ecn.max_kb,
        pfc_watchdog=base.pfc_watchdog,
        mtu=_pick(over.mtu, base.mtu),
    )


def host_settings(fabric: Fabric, overrides: RoceOverrides | None = None) -> HostRoceSettings:
    """A host's effective RoCE settings: the site's `fabric.host` with `overrides` applied."""
    base, over = fabric.host, overrides or RoceOverrides()
    return HostRoceSettings(
        trust=_pick(over.trust, base.trust),
        pfc_priorities=tuple(sorted(set(_pick(over.pfc_priorities, base.pfc_priorities)))),
        roce_tos=_pick(over.roce_tos, base.roce_tos),
        ecn=_pick(over.ecn, base.ecn),
        mtu=_pick(over.mtu, base.mtu),
    )


def link_settings(fabric: Fabric, link: HostLink) -> tuple[HostRoceSettings, SwitchRoceSettings]:
    """What each end of a host-leaf link runs: (host side, switch side)."""
    return (
        host_settings(fabric, link.host.device.roce_overrides),
        switch_settings(fabric, link.switch.device.roce_overrides),
    )


# ---------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Problem:
    fields: tuple[str, ...]
    """Settings the rule read, `side.field` (side: host, switch or roce); the first is the one to fix."""
    message: str


Rule = Callable[[RoceIntent, HostRoceSettings, SwitchRoceSettings], Iterator[Problem]]


def _pfc_priorities_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    both = f"(switch {list(switch.pfc_priorities)}, host {list(host.pfc_priorities)})"
    for side, settings in (("switch", switch), ("host", host)):
        found = list(settings.pfc_priorities)
        if found == [roce.priority]:
            continue
        missing = "" if roce.priority in found else f"; RoCE on priority {roce.priority} is not lossless"
        extra = [p for p in found if p != roce.priority]
        extra_text = f"; extra lossless priorities {extra} can deadlock the fabric" if extra else ""
        yield Problem(
            (f"{side}.pfc_priorities", "roce.priority"),
            f"{side} PFC priorities {found} {both}, but PFC belongs on exactly [{roce.priority}] "
            f"(fabric.roce.priority){missing}{extra_text}",
        )


def _pfc_agreement_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if host.pfc_priorities != switch.pfc_priorities:
        yield Problem(
            ("host.pfc_priorities", "switch.pfc_priorities"),
            f"host PFC priorities {list(host.pfc_priorities)} differ from switch PFC priorities "
            f"{list(switch.pfc_priorities)}: pause frames for a priority only one side honours drop packets",
        )


def _dscp_map_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    for what, dscp, priority in (("RoCE", roce.dscp, roce.priority), ("CNP", roce.cnp_dscp, roce.cnp_priority)):
        found = switch.dscp_to_priority.get(dscp)
        if found != priority:
            mapped = "nothing" if found is None else f"priority {found}"
            yield Problem(
                ("switch.dscp_to_priority", "roce.dscp" if what == "RoCE" else "roce.cnp_dscp"),
                f"switch dscp_to_priority maps DSCP {dscp} to {mapped}; {what} traffic needs "
                f"DSCP {dscp} -> priority {priority} (map: {dict(switch.dscp_to_priority)})",
            )


def _host_tos_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if host.roce_tos >> 2 != roce.dscp:
        wanted = (roce.dscp << 2) | (host.roce_tos & 0b11)
        yield Problem(
            ("host.roce_tos", "roce.dscp"),
            f"host roce_tos {host.roce_tos} marks DSCP {host.roce_tos >> 2}, but the RoCE DSCP is {roce.dscp} "
            f"(switch maps it to priority {switch.dscp_to_priority.get(roce.dscp, 'nothing')}): use roce_tos {wanted}",
        )


def _trust_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if host.trust != switch.trust:
        yield Problem(
            ("host.trust", "switch.trust"),
            f"host trusts {host.trust} but switch trusts {switch.trust}: both sides must classify RoCE the same way",
        )


def _enabled(flag: bool) -> str:
    return "enabled" if flag else "disabled"


def _ecn_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if host.ecn != switch.ecn:
        yield Problem(
            ("host.ecn", "switch.ecn"),
            f"ECN is {_enabled(host.ecn)} on the host but {_enabled(switch.ecn)} on the switch: "
            "congestion control needs it on both sides or neither",
        )
    if switch.ecn and switch.ecn_min_kb >= switch.ecn_max_kb:
        yield Problem(
            ("switch.ecn_min_kb", "switch.ecn_max_kb"),
            f"switch ECN min_kb {switch.ecn_min_kb} is not below max_kb {switch.ecn_max_kb}",
        )


def _cnp_priority_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if roce.cnp_priority == roce.priority:
        yield Problem(
            ("roce.cnp_priority", "roce.priority"),
            f"CNP priority {roce.cnp_priority} is the RoCE priority: congestion notifications must not queue "
            "behind the traffic they throttle; use a separate strict priority (usually 6)",
        )
        return
    for side, settings in (("switch", switch), ("host", host)):
        if roce.cnp_priority in settings.pfc_priorities:
            yield Problem(
                (f"{side}.pfc_priorities", "roce.cnp_priority"),
                f"{side} PFC priorities {list(settings.pfc_priorities)} include the CNP priority "
                f"{roce.cnp_priority}: CNP runs without PFC",
            )


def _mtu_rule(roce: RoceIntent, host: HostRoceSettings, switch: SwitchRoceSettings) -> Iterator[Problem]:
    if host.mtu + L2_OVERHEAD_B > switch.mtu:
        yield Problem(
            ("host.mtu", "switch.mtu"),
            f"host MTU {host.mtu} + {L2_OVERHEAD_B} B of L2 overhead = {host.mtu + L2_OVERHEAD_B} B exceeds the "
            f"switch MTU {switch.mtu}: full-size frames are dropped; use host MTU <= {switch.mtu - L2_OVERHEAD_B}",
        )


# ---------------------------------------------------------------- site-level and per-link reporting

_SITE_KEYS = {
    "switch.ecn": "fabric.switch.ecn.enabled",
    "switch.ecn_min_kb": "fabric.switch.ecn.min_kb",
    "switch.ecn_max_kb": "fabric.switch.ecn.max_kb",
}


def _site_key(field: str) -> str:
    return _SITE_KEYS.get(field, f"fabric.{field}")


def _responsible_override(problem: Problem, link: HostLink) -> tuple[Device, str] | None:
    """The device whose override set a setting the problem read, and that setting."""
    devices = {"host": link.host.device, "switch": link.switch.device}
    for field in problem.fields:
        side, name = field.split(".", 1)
        device = devices.get(side)
        if device is not None and device.roce_overrides is not None:
            if getattr(device.roce_overrides, name, None) is not None:
                return device, name
    return None


def _roce_findings(site: Site, check_name: str, rule: Rule) -> Iterator[Finding]:
    roce = site.fabric.roce
    site_problems = list(rule(roce, host_settings(site.fabric), switch_settings(site.fabric)))
    for problem in site_problems:
        key = _site_key(problem.fields[0])
        yield Finding(check_name, "error", site.origin(key, site.fabric_loc), key, problem.message)
    already_reported = {problem.message for problem in site_problems}

    effective_host: dict[str, HostRoceSettings] = {}
    effective_switch: dict[str, SwitchRoceSettings] = {}
    for link in leaf_links(site):
        host_device, switch_device = link.host.device, link.switch.device
        if host_device.roce_overrides is None and switch_device.roce_overrides is None:
            continue
        if host_device.name not in effective_host:
            effective_host[host_device.name] = host_settings(site.fabric, host_device.roce_overrides)
        if switch_device.name not in effective_switch:
            effective_switch[switch_device.name] = switch_settings(site.fabric, switch_device.roce_overrides)
        for problem in rule(roce, effective_host[host_device.name], effective_switch[switch_device.name]):
            responsible = _responsible_override(problem, link)
            if problem.message in already_reported or responsible is None:
                continue
            device, setting = responsible
            yield Finding(
                check_name, "error", device.loc,
                f"racks[{device.rack}].devices[{device.name}].roce_overrides.{setting}",
                f"link {link}: {problem.message}",
            )


@check
def roce_pfc_priorities(site: Site) -> Iterator[Finding]:
    """PFC is enabled on exactly the design's RoCE priority, on both sides."""
    return _roce_findings(site, "roce_pfc_priorities", _pfc_priorities_rule)


@check
def roce_pfc_agreement(site: Site) -> Iterator[Finding]:
    """Host and switch enable PFC on the same priorities."""
    return _roce_findings(site, "roce_pfc_agreement", _pfc_agreement_rule)


@check
def roce_dscp_map(site: Site) -> Iterator[Finding]:
    """The switch maps the RoCE DSCP to the RoCE priority and the CNP DSCP to the CNP priority."""
    return _roce_findings(site, "roce_dscp_map", _dscp_map_rule)


@check
def roce_host_tos(site: Site) -> Iterator[Finding]:
    """The host marks RoCE packets with the design's DSCP (roce_tos >> 2)."""
    return _roce_findings(site, "roce_host_tos", _host_tos_rule)


@check
def roce_trust(site: Site) -> Iterator[Finding]:
    """Host and switch trust the same marking (DSCP or PCP)."""
    return _roce_findings(site, "roce_trust", _trust_rule)


@check
def roce_ecn(site: Site) -> Iterator[Finding]:
    """ECN is on at both ends or neither, with min_kb below max_kb."""
    return _roce_findings(site, "roce_ecn", _ecn_rule)


@check
def roce_cnp_priority(site: Site) -> Iterator[Finding]:
    """CNP has its own priority, and that priority has no PFC."""
    return _roce_findings(site, "roce_cnp_priority", _cnp_priority_rule)


@check
def roce_mtu(site: Site) -> Iterator[Finding]:
    """Host MTU plus L2 overhead fits in the switch MTU."""
    return _roce_findings(site, "roce_mtu", _mtu_rule)


@check
def roce_overrides_apply(site: Site) -> Iterator[Finding]:
    """Warn about overrides that do nothing: roce_tos on a switch, dscp_to_priority on a host."""
    for device in site.devices():
        overrides = device.roce_overrides
        if overrides is None:
            continue
        side, ignored = ("switch", "roce_tos") if device.switch is not None else ("host", "dscp_to_priority")
        if getattr(overrides, ignored) is not None:
            yield Finding(
                "roce_overrides_apply", "warning", device.loc,
                f"racks[{device.rack}].devices[{device.name}].roce_overrides.{ignored}",
                f"{device.name} is a {side}: roce_overrides.{ignored} has no effect there; remove it",
            )
