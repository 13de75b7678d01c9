"""Preflight checks: what each switch OS can be configured with. A design rackform cannot
push to a switch's OS is refused here, at validate, with the reason, rather than rendered
without the lines it needs (and found out at deploy time, or never).

Onyx switches get the onyx_switch role (roles/onyx_switch/templates/onyx.conf.j2): lossless
RoCE in the explicit DCB form, LLDP and port descriptions. Two things in a design have no
Onyx lines there:

- BGP. The routed fabric is BGP unnumbered between leaves and spines plus a bridge of
  server gateways on each leaf, rendered for Cumulus (FRR, ifupdown2) only. Onyx would need
  routed ports with addresses of their own, server-facing VLAN interfaces and
  `router bgp` lines; the design names none of those addresses, so an AS number on an Onyx
  switch would be a switch that runs no BGP while its peers wait for it.
- A DSCP -> switch priority map other than Onyx's default (DSCP / 8 under `qos trust L3`).
  The role relies on that default and writes no map of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.checks.roce import switch_settings
from rackform.model.site import Site, Switch

ONYX = "onyx"
FABRIC_ROLES = ("leaf", "spine")
"""Switches that get the design's RoCE settings (the `fabric_switches` group)."""


def onyx_default_priority(dscp: int) -> int:
    """Onyx's DSCP -> switch priority map under `qos trust L3`: eight DSCPs per priority.
    (The same rule as the onyx_switch module's `onyx_default_priority`.)"""
    return dscp // 8


def _device_key(switch: Switch) -> str:
    return f"racks[{switch.device.rack}].devices[{switch.name}]"


@check
def onyx_runs_no_bgp(site: Site) -> Iterator[Finding]:
    """No Onyx switch has an AS number: rackform renders BGP for Cumulus (FRR) only."""
    for switch in site.switches.values():
        if switch.os != ONYX or switch.asn is None:
            continue
        yield Finding(
            "onyx_runs_no_bgp", "error", switch.loc, f"{_device_key(switch)}.switch.asn",
            f"{switch.role} {switch.name} runs Onyx, and rackform renders no BGP for Onyx: the routed fabric "
            "(BGP unnumbered, routed ports, the leaves' server gateways) is configured on Cumulus Linux only, "
            f"so AS {switch.asn} would be a switch that peers with no one; drop switch.asn to keep it layer-2 "
            "(as the reference site's Onyx pair), or run the fabric's routed switches on Cumulus (docs/fabric.md)",
        )


def _dscp_map_problem(dscp_to_priority) -> str | None:
    wrong = {dscp: priority for dscp, priority in sorted(dscp_to_priority.items())
             if onyx_default_priority(dscp) != priority}
    if not wrong:
        return None
    return ", ".join(f"DSCP {dscp} -> {priority} (Onyx's default gives {onyx_default_priority(dscp)})"
                     for dscp, priority in wrong.items())


@check
def onyx_dscp_map_is_default(site: Site) -> Iterator[Finding]:
    """An Onyx leaf or spine maps DSCP to priority as Onyx's default does (DSCP / 8):
    the onyx_switch role writes no DSCP map of its own."""
    site_wide: list[Switch] = []
    site_problem = None
    for switch in site.switches.values():
        if switch.os != ONYX or switch.role not in FABRIC_ROLES:
            continue
        overrides = switch.device.roce_overrides
        problem = _dscp_map_problem(switch_settings(site.fabric, overrides).dscp_to_priority)
        if problem is None:
            continue
        if overrides is not None and overrides.dscp_to_priority is not None:
            yield Finding(
                "onyx_dscp_map_is_default", "error", switch.device.loc,
                f"{_device_key(switch)}.roce_overrides.dscp_to_priority",
                f"{switch.name} runs Onyx, whose DSCP map rackform does not set: its override maps {problem}; "
                "rackform relies on Onyx's default map (DSCP / 8) and pushes no other, so the switch would "
                "classify that traffic on another priority than the design says; use the default map for Onyx switches "
                "(or a Cumulus switch, whose map rackform writes)",
            )
        else:
            site_wide.append(switch)
            site_problem = problem
    if site_wide:
        key = "fabric.switch.dscp_to_priority"
        names = ", ".join(switch.name for switch in site_wide)
        run = "runs" if len(site_wide) == 1 else "run"
        yield Finding(
            "onyx_dscp_map_is_default", "error", site.origin(key, site.fabric_loc), key,
            f"the design maps {site_problem}, but {names} {run} Onyx, whose DSCP map rackform does not set: it relies "
            "on Onyx's default map (DSCP / 8) and pushes no other, so the switch would classify that traffic on "
            "another priority than the design says; use the default map (e.g. DSCP 26 -> 3, 48 -> 6) or Cumulus switches, "
            "whose map rackform writes",
        )
