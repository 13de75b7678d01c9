"""Preflight checks: every one runs on the loaded model before anything touches hardware.

Each family of checks lives in its own module; each check is a plain function
`check(site) -> Iterable[Finding]` registered with `@check`. `run_checks` runs all
of them in registration order.
"""

from __future__ import annotations

from types import ModuleType

from rackform.checks.findings import Finding
from rackform.checks.registry import REGISTRY, CheckFn, check
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
    """One module per family of checks, in report order: the physical layer first.

    Imported here, when the checks run, not when the package is: whoever needs only
    `Finding` does not pay for every family (and what they import, k8s and render)."""
    from rackform.checks import (addresses, bandwidth, cabling, host_keys, inventory, kubernetes, mirror, platform,
                                 racks, roce, storage, switch_os, topology)

    return (racks, addresses, inventory, host_keys, cabling, topology, roce, switch_os, kubernetes, mirror, platform,
            storage, bandwidth)


def registered_checks() -> list[CheckFn]:
    """Every check, in `check_modules` order (importing a family registers its checks via @check)."""
    rank = {module.__name__: index for index, module in enumerate(check_modules())}
    return sorted(REGISTRY, key=lambda fn: rank.get(fn.__module__, len(rank)))


__all__ = ["Finding", "CheckFn", "check", "run_checks", "REGISTRY"]
