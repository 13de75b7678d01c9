"""Runs every preflight check on a loaded site: `run_checks(site)` -> the findings, in report order.

The families of checks are imported when the checks run (`check_modules`), not when this module
is: whoever needs only `Finding` (rackform.checks.findings) or `@check` (rackform.checks.registry)
does not pay for every family, nor for what they import (k8s and render).
"""

from __future__ import annotations

from types import ModuleType

from rackform.checks.findings import Finding
from rackform.checks.registry import REGISTRY, CheckFn
from rackform.checks.run_memo import one_run
from rackform.gc_pause import cyclic_gc_paused
from rackform.model.site import Site


def run_checks(site: Site) -> list[Finding]:
    findings: list[Finding] = []
    # The checks only allocate (rackform.gc_pause); what several of them derive from the
    # site is derived once (rackform.checks.run_memo).
    with cyclic_gc_paused(), one_run():
        for fn in registered_checks():
            findings.extend(fn(site))
    return findings


def check_modules() -> tuple[ModuleType, ...]:
    """One module per family of checks, in report order: the physical layer first."""
    from rackform.checks import (addresses, bandwidth, cabling, host_keys, inventory, kubernetes, mirror, platform,
                                 racks, roce, storage, switch_os, topology)

    return (racks, addresses, inventory, host_keys, cabling, topology, roce, switch_os, kubernetes, mirror, platform,
            storage, bandwidth)


def registered_checks() -> list[CheckFn]:
    """Every check, in `check_modules` order (importing a family registers its checks via @check)."""
    rank = {module.__name__: index for index, module in enumerate(check_modules())}
    return sorted(REGISTRY, key=lambda fn: rank.get(fn.__module__, len(rank)))
