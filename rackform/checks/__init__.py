"""Preflight checks: every one runs on the loaded model before anything touches hardware.

Each family of checks lives in its own module; each check is a plain function
`check(site) -> Iterable[Finding]` registered with `@check`. `run_checks` runs all
of them in registration order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rackform.checks.findings import Finding
from rackform.checks.run_memo import one_run
from rackform.gc_pause import cyclic_gc_paused
from rackform.model.site import Site

CheckFn = Callable[[Site], Iterable[Finding]]
REGISTRY: list[CheckFn] = []


def check(fn: CheckFn) -> CheckFn:
    """Register a preflight check."""
    REGISTRY.append(fn)
    return fn


# Report order: one module per family of checks, the physical layer first.
CHECK_MODULES = ("racks", "addresses", "inventory", "host_keys", "cabling", "topology", "roce", "switch_os",
                 "kubernetes", "mirror", "platform", "storage", "bandwidth")


def run_checks(site: Site) -> list[Finding]:
    findings: list[Finding] = []
    # The checks only allocate (rackform.gc_pause); what several of them derive from the
    # site is derived once (rackform.checks.run_memo).
    with cyclic_gc_paused(), one_run():
        for fn in registered_checks():
            findings.extend(fn(site))
    return findings


def registered_checks() -> list[CheckFn]:
    """Every check, in CHECK_MODULES order (imports register them via @check)."""
    import importlib

    modules = [f"{__name__}.{name}" for name in CHECK_MODULES]
    for module in modules:
        importlib.import_module(module)
    rank = {module: index for index, module in enumerate(modules)}
    return sorted(REGISTRY, key=lambda fn: rank.get(fn.__module__, len(rank)))


__all__ = ["Finding", "check", "run_checks", "REGISTRY"]
