"""`rendered_yaml`: a YAML file's bytes that still hold the data render wrote them from.

The stage digest (rackform.render.digest) reads inventory files as data, key by key.
Parsing back a file render has just written cost two thirds of the digest (most of the
time `rackform plan` spends beyond load, check and render), so render hands the data on
with the bytes and the digest hashes that instead.

The digest must stay exactly what it would be from the file on disk: state/<site>.json
and the Pulumi `Playbook` resources hold digests, and a different one would make every
deployed site look changed. It is, because `yamltext.dump` writes data only in forms
that load back as the same data (the characters YAML's reader rejects or reads as a line
break, NEL, U+2028, DEL and the other C1 controls, only as escapes). Should a text ever
hold one raw, that promise would not hold: such a file is handed on as plain bytes, to be
parsed like a file from disk.
tests/unit/test_digest_rendered_data.py holds the two equal for every stage of every
shipped site, a generated large one, and written-out tricky values.

To everything else a `RenderedYaml` is its bytes: written, compared and hashed as such.
Bytes made from it (a slice, `+`, the file read back) are plain bytes, read the slow way;
pickling keeps only the bytes. The data must not change once it is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from rackform.render import yamltext

_T = TypeVar("_T")

_NOT_ROUND_TRIPPED = re.compile(
    rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbf[\xbe\xbf]"
)
"""UTF-8 of what YAML's reader refuses (controls but tab, LF, CR; DEL; C1; U+FFFE/U+FFFF) or reads
as a line break (NEL, U+2028, U+2029): a string holding one may not load back as written."""
_ASCII_ROUND_TRIPPED = bytes(range(0x20, 0x7F)) + b"\t\n\r"
"""The ASCII bytes _NOT_ROUND_TRIPPED does not match. Nearly every rendered file is ASCII:
deleting these leaves nothing exactly when the pattern finds nothing, in a tenth of its time."""


def _round_trips(content: bytes) -> bool:
    """Whether _NOT_ROUND_TRIPPED finds nothing in content."""
    if content.isascii():
        return not content.translate(None, _ASCII_ROUND_TRIPPED)
    return _NOT_ROUND_TRIPPED.search(content) is None


class RenderedYaml(bytes):
    """The bytes of a rendered YAML file, with `data`: what they load back as."""

    data: Any
    _derived: dict

    def derived(self, compute: Callable[[Any], _T]) -> _T:
        """compute(self.data), computed once per function for this file (stages share files)."""
        try:
            return self._derived[compute]
        except KeyError:
            value = self._derived[compute] = compute(self.data)
            return value

    def __reduce__(self):
        return bytes, (bytes(self),)


def rendered_yaml(data: dict | list, header: str = "") -> bytes:
    """`data` as a YAML document (`yamltext.dump`): a RenderedYaml carrying `data`, or plain
    bytes where the text may not load back as `data` exactly."""
    content = yamltext.dump(data, header).encode()
    if not _round_trips(content):
        return content
    rendered = RenderedYaml(content)
    rendered.data = data
    rendered._derived = {}
    return rendered
