"""One sorting layer in the pickler for every dynamic resource, however many the program makes.

Pulumi's SDK pickles each dynamic resource's provider (`pulumi.dynamic.dynamic.serialize_provider`)
through pickle's pure-Python `_Pickler`, whose dict methods it replaces with sorting ones for the
call; it puts `pickle.Pickler` back afterwards but leaves its replacements on `_Pickler`. The next
resource then wraps the sorting method it finds, so the Nth dynamic resource of a program pickles
each dict through N nested calls: quadratic in the resources, and past about 960 of them (a site of
1,000 servers with its BareMetalNodes) the program dies with RecursionError.
`one_sorting_pickler` puts `_Pickler` back as it was once the resource is made, so every provider
is pickled through one sorting layer: the same bytes (sorted once is sorted), in linear time.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator

REPLACED = ("_batch_setitems", "save_dict")
"""What serialize_provider replaces on pickle._Pickler and leaves there."""


@contextlib.contextmanager
def one_sorting_pickler() -> Iterator[None]:
    """Around a dynamic resource's construction: pickle._Pickler as it was before, afterwards."""
    kept = {name: pickle._Pickler.__dict__[name] for name in REPLACED}  # noqa: SLF001 - the class the SDK patches
    try:
        yield
    finally:
        for name, method in kept.items():
            setattr(pickle._Pickler, name, method)  # noqa: SLF001
