"""Where preflight checks register: `@check` adds a function to `REGISTRY`.

Its own module, below the families of checks, so that a family registers its checks
without importing the module that imports every family (`rackform.checks.runner`).
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
