"""Names for a new node, by the pattern the site already uses for its block.

A site names its devices and hosts `<prefix><number>` (`gpu-1`, `gpu-2`, `mgmt-3`). A new
node of a block takes the prefix most of that block's hosts share and the next number
after the highest in use; with no host of the block yet, the prefix of the block's
category (`gpu-`, `stor-`, `cpu-`, `hci-`), as the shipped sites write them. A name some
device, host or switch already has is never handed out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from rackform.model.site import Site

NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<number>\d+)$")
CATEGORY_PREFIX = {"gpu": "gpu-", "storage": "stor-", "compute": "cpu-", "hci": "hci-"}


def pattern_of(names: Iterable[str]) -> tuple[str, int] | None:
    """(prefix, highest number) shared by most of `names`, or None when none is numbered."""
    numbered = [(match["prefix"], int(match["number"])) for name in names if (match := NUMBERED.match(name))]
    if not numbered:
        return None
    prefix, _count = Counter(prefix for prefix, _number in numbered).most_common(1)[0]
    return prefix, max(number for p, number in numbered if p == prefix)


def taken_names(site: Site) -> set[str]:
    return {device.name for device in site.devices()} | set(site.hosts) | set(site.switches)


def next_name(prefix: str, after: int, taken: set[str]) -> str:
    number = after + 1
    while f"{prefix}{number}" in taken:
        number += 1
    return f"{prefix}{number}"


def host_name(site: Site, block_name: str, taken: set[str] | None = None) -> str:
    """The next host name of `block_name` in `site`'s pattern."""
    taken = taken_names(site) if taken is None else taken
    same_block = [host.name for host in site.hosts.values() if host.block.name == block_name]
    found = pattern_of(same_block)
    if found is None:
        prefix = CATEGORY_PREFIX.get(site.catalog[block_name].category, f"{block_name}-")
        return next_name(prefix, 0, taken)
    return next_name(*found, taken)


def device_name(site: Site, block_name: str, host: str, taken: set[str] | None = None) -> str:
    """A one-node block's device is named as its host; a chassis of several nodes as the block's others."""
    if site.catalog[block_name].nodes == 1:
        return host
    taken = (taken_names(site) if taken is None else taken) | {host}
    found = pattern_of(device.name for device in site.devices() if device.block.name == block_name)
    return next_name(*found, taken) if found else next_name(f"{block_name}-", 0, taken)
