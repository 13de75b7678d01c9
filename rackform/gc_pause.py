"""`cyclic_gc_paused`: run a phase that only allocates without the cyclic garbage collector.

Load, check and render build data and drop almost nothing that holds a reference cycle, so
the collector finds nothing to free. Yet it walks every container they create that is still
alive, again on each of its rounds, and the more a site has, the more there is to walk: on a
10,000-node site that made the checks and the inventory build grow 14-16x for 10x the nodes.
Reference counting still frees everything else at once; cycles made meanwhile wait for the
collector's next round after the phase. `load_site` pauses the collector the same way.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; restore it as it was (also on an error)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
