"""Preflight checks: Kubernetes. An odd-sized control plane of management-plane hosts,
spread over racks where there are several."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.site import Site
from rackform.model.source import Loc

# etcd keeps quorum with a majority: an even member count adds a failure point and
# no fault tolerance; beyond seven members writes slow down for no gain.
CONTROL_PLANE_SIZES = (1, 3, 5, 7)
CONTROL_PLANE_ROLE = "management_plane"


@check
def control_plane_count(site: Site) -> Iterator[Finding]:
    """The control plane has 1, 3, 5 or 7 distinct members."""
    if site.kubernetes is None or site.kubernetes_loc is None:
        return
    members = site.kubernetes.control_plane
    for name, times in Counter(members).items():
        if times > 1:
            yield Finding(
                "control_plane_count", "error", _control_plane_loc(site), "kubernetes.control_plane",
                f"{name} is listed {times} times; each control-plane host once",
            )
    count = len(set(members))
    if count % 2 == 0:
        yield Finding(
            "control_plane_count", "error", _control_plane_loc(site), "kubernetes.control_plane",
            f"{count} control-plane hosts ({', '.join(members)}): etcd needs an odd count "
            f"({', '.join(map(str, CONTROL_PLANE_SIZES))}); {count} tolerates no more failures than {count - 1}",
        )
    elif count > CONTROL_PLANE_SIZES[-1]:
        yield Finding(
            "control_plane_count", "warning", _control_plane_loc(site), "kubernetes.control_plane",
            f"{count} control-plane hosts: more than {CONTROL_PLANE_SIZES[-1]} etcd members slow every write; "
            f"use one of {', '.join(map(str, CONTROL_PLANE_SIZES))}",
        )


@check
def control_plane_hosts(site: Site) -> Iterator[Finding]:
    """Each control-plane member is a host of the site with the management_plane role."""
    if site.kubernetes is None or site.kubernetes_loc is None:
        return
    management = sorted(host.name for host in site.hosts.values() if host.role == CONTROL_PLANE_ROLE)
    offered = ", ".join(management) or "none in this site (place an hci block)"
    for name in dict.fromkeys(site.kubernetes.control_plane):
        host = site.hosts.get(name)
        if host is None:
            close = difflib.get_close_matches(name, management, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            yield Finding(
                "control_plane_hosts", "error", _control_plane_loc(site), "kubernetes.control_plane",
                f"no host named '{name}'{hint}; management-plane hosts: {offered}",
            )
        elif host.role != CONTROL_PLANE_ROLE:
            yield Finding(
                "control_plane_hosts", "error", _control_plane_loc(site), "kubernetes.control_plane",
                f"{name} is a {host.role} host ({host.block.name}); the control plane runs on "
                f"{CONTROL_PLANE_ROLE} hosts: {offered}",
            )


@check
def control_plane_spread(site: Site) -> Iterator[Finding]:
    """Warn when every control-plane host sits in one rack although the site has several."""
    if site.kubernetes is None or site.kubernetes_loc is None or len(site.racks) < 2:
        return
    members = [site.hosts[name] for name in site.kubernetes.control_plane if name in site.hosts]
    racks = {host.device.rack for host in members}
    if len(members) > 1 and len(racks) == 1:
        yield Finding(
            "control_plane_spread", "warning", _control_plane_loc(site), "kubernetes.control_plane",
            f"all {len(members)} control-plane hosts are in rack {racks.pop()} of {len(site.racks)} racks: "
            "losing that rack's power or switches loses the cluster",
        )


def _control_plane_loc(site: Site) -> Loc:
    """The line that set the control plane (the site's, a profile's); the section's when built in."""
    assert site.kubernetes_loc is not None
    return site.origin("kubernetes.control_plane", site.kubernetes_loc)
