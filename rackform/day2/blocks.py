"""Which catalog block a BMC's FRU describes: (manufacturer, product) against (vendor, name).

An exact match of the product name with a block's display name (ignoring case, spaces and
punctuation) wins; otherwise every server block of that vendor whose catalog name (`dgx-h100`)
or display name the product name contains, or that contains it, is a candidate. One candidate
is the answer; several are ambiguous: a person picks (`--block`), never rackform by guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rackform.day2.errors import refuse
from rackform.model.schema import BlockType


def _norm(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def candidates(catalog: Mapping[str, BlockType], manufacturer: str | None, product: str | None) -> list[BlockType]:
    servers = [block for block in catalog.values() if block.category != "switch"]
    vendor = _norm(manufacturer)
    if vendor:
        servers = [block for block in servers if _norm(block.vendor) and
                   (_norm(block.vendor) in vendor or vendor in _norm(block.vendor))]
    wanted = _norm(product)
    if not wanted:
        return sorted(servers, key=lambda block: block.name)
    exact = [block for block in servers if _norm(block.display_name) == wanted]
    if exact:
        return exact
    return sorted((block for block in servers
                   if _norm(block.name) in wanted or wanted in _norm(block.display_name)),
                  key=lambda block: block.name)


def identify(catalog: Mapping[str, BlockType], manufacturer: str | None, product: str | None, where: str,
             chosen: str | None = None, ask=None) -> BlockType:
    """The block of one BMC; `chosen` (--block) settles it; `ask(candidates) -> name` when interactive.

    BadInput (exit 2) for no candidate, an unknown `chosen`, or an ambiguity nobody can settle.
    """
    if chosen is not None:
        if chosen not in catalog or catalog[chosen].category == "switch":
            raise refuse(None, "--block", f"{chosen!r} is not a server block of the catalog "
                                          f"({', '.join(sorted(n for n, b in catalog.items() if b.category != 'switch'))})")
        return catalog[chosen]
    found = candidates(catalog, manufacturer, product)
    said = f"FRU manufacturer {manufacturer!r}, product {product!r}"
    if len(found) == 1:
        return found[0]
    if not found:
        raise refuse(None, "block", f"{where}: {said} matches no block of the catalog (topologies/blocks/); "
                                    f"add the block or name it with --block")
    names = ", ".join(f"{block.name} ({block.display_name})" for block in found)
    if ask is not None:
        answer = ask(found)
        if answer in {block.name for block in found}:
            return catalog[answer]
    raise refuse(None, "block", f"{where}: ambiguous block type: {said} fits {names}; choose one with --block")
