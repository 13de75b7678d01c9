"""Preflight checks: every one runs on the loaded model before anything touches hardware.

Each family of checks lives in its own module; each check is a plain function
`check(site) -> Iterable[Finding]` registered with `@check`. `run_checks` runs all
of them in registration order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rackform.checks.findings import Finding
from rackform.model.site import Site

CheckFn = Callable[[Site], Iterable[Finding]]
REGISTRY: list[CheckFn] = []


def check(fn: CheckFn) -> CheckFn:
    """Register a preflight check."""
    REGISTRY.append(fn)
    return fn


def run_checks(site: Site) -> list[Finding]:
    _import_check_modules()
    findings: list[Finding] = []
    for fn in REGISTRY:
        findings.extend(fn(site))
    return findings


def _import_check_modules() -> None:
    # Imported for their @check registrations; order here is report order.
    from rackform.checks import (  # noqa: F401
        addresses,
        bandwidth,
        cabling,
        kubernetes,
        racks,
        roce,
    )


__all__ = ["Finding", "check", "run_checks", "REGISTRY"]
