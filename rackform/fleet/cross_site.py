"""Checks across the sites of one repo: what no single site's checks can see.

- every site has its own name (two site files naming the same `site:`);
- sites that route to each other (a `routed:` group of topologies/rollout.yaml) have
  management and out-of-band prefixes that do not overlap, and no management or BMC
  address in common: one repo must not hand two sites the same addresses.

Each finding points at the line of the second site that takes what the first has.
Cost is linear in the addresses of a group (a dict of address -> first owner).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rackform.checks.findings import Finding
from rackform.model.site import Site

ROUTED_PURPOSES = ("management", "oob")


def cross_site_findings(sites: Mapping[str, Site], routed: Iterable[Iterable[str]] = ()) -> list[Finding]:
    findings = unique_site_names(sites)
    for group in routed:
        members = [sites[name] for name in group if name in sites]
        findings += overlapping_prefixes(members)
        findings += shared_addresses(members)
    return findings


def unique_site_names(sites: Mapping[str, Site]) -> list[Finding]:
    """`sites` is keyed by file name; a site whose `site:` is another's name collides."""
    seen: dict[str, str] = {}
    findings = []
    for file_name, site in sorted(sites.items()):
        if site.name in seen:
            findings.append(Finding("unique_site_names", "error", _site_loc(site), "site",
                                    f"site name '{site.name}' is also the name of topologies/sites/"
                                    f"{seen[site.name]}.yaml; every site needs its own (its state, lab and "
                                    f"build folder are named after it)"))
        seen.setdefault(site.name, file_name)
    return findings


def overlapping_prefixes(sites: list[Site]) -> list[Finding]:
    findings = []
    taken: list[tuple[str, str, object]] = []  # (site, network, prefix)
    for site in sites:
        for name, network in site.networks.items():
            if network.purpose not in ROUTED_PURPOSES:
                continue
            for other_site, other_name, other_prefix in taken:
                if other_site != site.name and network.prefix.overlaps(other_prefix):
                    findings.append(Finding(
                        "routed_prefixes_distinct", "error", site.network_locs[name], f"networks[{name}].prefix",
                        f"{network.prefix} overlaps {other_prefix} ({other_site}'s {other_name}); sites "
                        f"{other_site} and {site.name} route to each other (topologies/rollout.yaml routed:)"))
            taken.append((site.name, name, network.prefix))
    return findings


def shared_addresses(sites: list[Site]) -> list[Finding]:
    findings = []
    owner: dict[object, tuple[str, str]] = {}  # address -> (site, device)
    for site in sites:
        for device, key, address, loc in _addresses(site):
            first = owner.setdefault(address, (site.name, device))
            if first[0] != site.name:
                findings.append(Finding("routed_addresses_distinct", "error", loc, key,
                                        f"{address} is also {first[1]}'s address in site {first[0]}; the "
                                        f"sites route to each other"))
    return findings


def _addresses(site: Site):
    for host in site.hosts.values():
        for key in ("management_address", "bmc_address"):
            address = getattr(host, key)
            if address is not None:
                yield host.name, key, address, host.var_locs.get(key, host.vars_loc or host.loc)
    for switch in site.switches.values():
        if switch.management_address is not None:
            yield (switch.name, "management_address", switch.management_address,
                   switch.var_locs.get("management_address", switch.vars_loc or switch.loc))


def _site_loc(site: Site):
    return site.loc
