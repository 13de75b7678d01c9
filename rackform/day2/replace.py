"""`node replace`: read the swapped server's BMC, record its new facts, re-image it over PXE.

The BMC is read with the site's login first (a board whose BMC kept its settings, as in
the lab), then the factory login (a new board fresh from the factory). The host's
host_vars get the new serial and BMC MAC (round-trip edit: every other line stays); the
management MAC is read again from this machine's neighbour table where it answers.
"""

from __future__ import annotations

import sys

from rackform.day2.files import FileChange
from rackform.day2.yamledit import YamlFile, set_key
from rackform.model.site import Host, Site


def read_swapped(args, site: Site, host: Host):
    """(NewBmc facts, which login worked) or (None, why)."""
    from rackform.day2 import wire
    from rackform.ipmi import credentials as creds
    from rackform.ipmi.cli_options import credential_source, fleet_from
    from rackform.ipmi.fleet import BmcTarget

    target = BmcTarget(host.name, str(host.bmc_address))
    tried = []
    sources = []
    try:
        sources.append(("site login", credential_source(args, site.name, args.root)))
    except creds.CredentialsUnavailable as error:
        tried.append(f"site login: {error}")
    sources.append(("factory login", creds.factory_credentials()))
    for label, source in sources:
        result = wire.read_bmcs(fleet_from(args, source), [target])[0]
        if result.ok:
            return result.value, label
        tried.append(f"{label}: {result.describe()}")
    return None, "; ".join(tried)


def file_changes(site: Site, root, host: Host, facts) -> list[FileChange]:
    from pathlib import Path

    from rackform.day2.mgmtmac import from_neighbours

    where = host.var_locs.get("serial") or host.vars_loc
    path = Path(where.path)
    full = path if path.is_absolute() else root / path
    document = YamlFile.load(full)
    data = document.data
    if facts.serial:
        set_key(data, "serial", facts.serial, after="bmc_mac")
    if facts.bmc_mac and data.get("bmc_mac") != facts.bmc_mac:
        set_key(data, "bmc_mac", facts.bmc_mac, after="bmc_address")
    if host.management_address is not None:
        mac = from_neighbours([str(host.management_address)])
        if mac and data.get("management_mac") != mac:
            set_key(data, "management_mac", mac, after="management_address")
    relative = full.relative_to(root) if full.is_absolute() and full.is_relative_to(root) else path
    return [FileChange(relative, document.original, document.text())]


def reimage(args, site: Site, host: Host) -> int:
    """One-time PXE boot and a power cycle through the BMC (the provision stage hardens it after)."""
    from rackform.day2 import wire
    from rackform.ipmi import credentials as creds
    from rackform.ipmi.cli_options import credential_source, fleet_from
    from rackform.ipmi.fleet import BmcTarget

    target = BmcTarget(host.name, str(host.bmc_address))
    errors = []
    for source in (lambda: credential_source(args, site.name, args.root), creds.factory_credentials):
        try:
            fleet = fleet_from(args, source())
        except creds.CredentialsUnavailable as error:
            errors.append(str(error))
            continue
        result = wire.power(fleet, [target], "cycle", boot="pxe")[0]
        if result.ok:
            print(f"{host.name}: next boot PXE, power cycled through {host.bmc_address}")
            return 0
        errors.append(result.describe())
    print(f"rackform: {host.name}: re-image through {host.bmc_address} failed: {'; '.join(errors)}", file=sys.stderr)
    return 1
