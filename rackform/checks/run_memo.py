"""What several checks derive from the same site, worked out once per `run_checks`.

The memo lives only while `run_checks` runs its checks (`one_run`): a check called on
its own, or a site changed between two runs, derives everything afresh, so nothing can
go stale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from rackform.model.site import Site

T = TypeVar("T")

_memo: dict[str, tuple[Site, object]] | None = None


@contextmanager
def one_run() -> Iterator[None]:
    """Remember what `derived` builds until the block ends."""
    global _memo
    outer, _memo = _memo, {}
    try:
        yield
    finally:
        _memo = outer


def derived(site: Site, name: str, build: Callable[[Site], T]) -> T:
    """build(site), once per run of the checks for the same site (every time outside a run)."""
    if _memo is None:
        return build(site)
    known = _memo.get(name)
    if known is not None and known[0] is site:
        return known[1]  # type: ignore[return-value]
    value = build(site)
    _memo[name] = (site, value)
    return value
