"""A small, fast YAML writer for the plain data rackform emits.

PyYAML's dumper spends ~130 us per host_vars file in its Python representer;
a 10,000-node site has 10,000 of them. The emitted data is only dicts, lists,
str, int, float, bool, None and (from inventory variables) dates, so this writer handles exactly that, block style, in a
fraction of the time. An inventory's Ansible vault value (`rackform.model.source.VaultValue`)
is written back as it came, `!vault |` over its ciphertext. Strings are written plain only when PyYAML's own resolver
reads them back as strings (no `yes`, `1e3`, `12:30:00` surprises); everything
else is double-quoted with JSON escapes, which YAML accepts as-is. Multi-line
strings become literal blocks (`|`) so generated text stays readable, and a one-line
string too long for one line (MAX_LINE) a folded block (`>-`) broken at its spaces.
"""

from __future__ import annotations

import datetime
import json
import re
from functools import lru_cache
from typing import Any

import yaml

from rackform.model.source import VAULT_TAG, VaultValue

_RESOLVER = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
# Characters that are safe in a plain scalar in both block and flow context.
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./@+-]*")
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+){2,}(?:/[0-9]+)?")
"""Digits with two dots or more (IPv4 addresses, with a prefix length or not, versions): no
YAML 1.1 int, float or timestamp looks like that, so they are plain strings without asking
the resolver (one call each cost ~2 us, and a site's addresses are all different)."""
_YAML_UNSAFE = "\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff"
"""Characters YAML's reader refuses raw (DEL, the C1 controls, U+FEFF inside a document, U+FFFE/F)
or reads as line breaks (NEL U+0085, U+2028, U+2029): written only as escapes in double quotes."""
_UNSAFE = re.compile(f"[{_YAML_UNSAFE}]")
_LITERAL_LINE = re.compile(rf"( *[^\s\x00-\x1f{_YAML_UNSAFE}]([^\x00-\x1f{_YAML_UNSAFE}]*[^\s\x00-\x1f{_YAML_UNSAFE}])?)?")
"""A line a literal block keeps as it is: printable, no trailing blank; indented by spaces
(never the first line, which sets the block's indentation)."""
_INDENT = "  "
MAX_LINE = 160
"""The longest line yamllint (ansible-lint's production profile) accepts in the rendered project."""


# Words YAML 1.1 reads as booleans or null when they start with a letter
# (PyYAML knows yes/no/on/off/true/false/null; y and n are quoted to be safe).
_WORDS = frozenset({"yes", "no", "on", "off", "true", "false", "y", "n", "null"})


_SCALARS: dict[str, str] = {}
"""scalar()'s answers: keys and most values (names, roles, ports) recur in every file."""
_SCALARS_MAX = 1 << 17
"""Entries kept before the memo starts over (a 10,000-node site has ~100k distinct strings)."""


def scalar(value: str) -> str:
    """A string as a one-line YAML scalar that loads back as the same string."""
    written = _SCALARS.get(value)  # not try/except: half the values (addresses, MACs) are new
    if written is None:
        if len(_SCALARS) >= _SCALARS_MAX:
            _SCALARS.clear()
        written = _SCALARS[value] = _scalar(value)
    return written


def _scalar(value: str) -> str:
    if _PLAIN.fullmatch(value):
        if value[0].isalpha() or value[0] == "_":
            # Letter-first plain text is a string unless it is one of the words above.
            if value.lower() not in _WORDS:
                return value
        elif _DOTTED.fullmatch(value) or _resolves_to_str(value):
            return value
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return _UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", json.dumps(value, ensure_ascii=False))


@lru_cache(maxsize=65536)
def _resolves_to_str(value: str) -> bool:
    """Whether PyYAML reads this plain scalar as a string (not int, float, date ...)."""
    return _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == _STR_TAG


def _atom(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return scalar(value)
    if kind is VaultValue:  # one line: a flow context (the block form is _write_entry's)
        return f"{VAULT_TAG} {json.dumps(str(value))}"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if value is None:
        return "null"
    if kind is float:
        return _float(value)
    if isinstance(value, datetime.date):  # dates and times of inventory variables, as YAML wrote them
        return str(value)
    raise TypeError(f"cannot write {kind.__name__} as YAML: {value!r}")


def _float(value: float) -> str:
    """A float YAML 1.1 reads back as the same float (`1e+20` alone would be a string)."""
    if value != value:
        return ".nan"
    if value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "." not in text:
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0" + (f"e{exponent}" if exponent else "")
    return text


def _literal_block(value: str, indent: str) -> str | None:
    """`|` block text for a multi-line string, or None when it would not round-trip."""
    body = value[:-1] if value.endswith("\n") else value
    lines = body.split("\n")
    if not lines[0] or lines[0][0] == " " or not all(_LITERAL_LINE.fullmatch(line) for line in lines):
        return None
    header = "|" if value.endswith("\n") else "|-"
    if value.endswith("\n\n"):
        return None
    return header + "".join(f"\n{indent}{line}" if line else "\n" for line in lines)


def _folded_block(value: str, indent: str) -> str | None:
    """`>-` block text for a one-line string too long after its key, on lines of its own at most
    MAX_LINE long where it has spaces to break at; None when it would not round-trip. A break is
    only made at a single space between two other characters: folding reads it back as that space."""
    if not value or not value.isprintable() or value[0] == " " or value[-1] == " ":
        return None
    width = max(MAX_LINE - len(indent), 40)
    breaks = [index for index in range(1, len(value) - 1)
              if value[index] == " " and value[index - 1] != " " and value[index + 1] != " "]
    lines, start = [], 0
    while breaks and len(value) - start > width:
        fitting = [index for index in breaks if index - start <= width]
        end = fitting[-1] if fitting else breaks[0]  # a word longer than the width keeps its line
        lines.append(value[start:end])
        start = end + 1
        breaks = [index for index in breaks if index > end]
    lines.append(value[start:])
    return ">-" + "".join(f"\n{indent}{line}" for line in lines)


def _is_flat_list(value: list) -> bool:
    return all(item is None or isinstance(item, (str, int, bool, float)) and type(item) is not VaultValue
               for item in value)


_KEY_PREFIXES: dict[str, dict[Any, str]] = {}
"""indent -> key -> `<indent><key>:`: the same few keys open the lines of every file."""


def _key_prefixes(indent: str) -> dict[Any, str]:
    prefixes = _KEY_PREFIXES.get(indent)
    if prefixes is None:
        prefixes = _KEY_PREFIXES[indent] = {}
    return prefixes


def _write(value: Any, indent: str, out: list[str]) -> None:
    """Append the block-style lines of a mapping or sequence (non-empty) to `out`."""
    if type(value) is dict:
        prefixes = _KEY_PREFIXES.get(indent) or _key_prefixes(indent)
        append = out.append
        for key, item in value.items():
            # The usual entries inline (a str key; a one-line str, an int, a bool or a
            # non-empty dict value), the rest through _write_entry; both write exactly the
            # same text.
            prefix = prefixes.get(key) if type(key) is str else None
            if prefix is None:
                prefix = f"{indent}{_atom(key)}:"
                if type(key) is str and len(prefixes) < _SCALARS_MAX:
                    prefixes[key] = prefix
            kind = type(item)
            if kind is str:
                if "\n" not in item:
                    line = _SCALARS.get(item) or scalar(item)
                    if len(prefix) + 1 + len(line) <= MAX_LINE:
                        append(f"{prefix} {line}")
                        continue
            elif kind is int:
                append(f"{prefix} {item}")
                continue
            elif kind is dict:
                if item:
                    append(prefix)
                    _write(item, indent + _INDENT, out)
                    continue
            elif kind is bool:
                append(f"{prefix} true" if item else f"{prefix} false")
                continue
            _write_entry(prefix, item, indent, out)
    else:
        for item in value:
            if type(item) is dict and item:
                first, *rest = _lines_of(item, indent + _INDENT)
                out.append(f"{indent}- {first[len(indent) + 2:]}")
                out.extend(rest)
            else:
                _write_entry(f"{indent}-", item, indent, out)


def _lines_of(value: Any, indent: str) -> list[str]:
    lines: list[str] = []
    _write(value, indent, lines)
    return lines


def _write_entry(prefix: str, item: Any, indent: str, out: list[str]) -> None:
    kind = type(item)
    if kind is str:
        if "\n" in item and (block := _literal_block(item, indent + _INDENT)):
            out.append(f"{prefix} {block}")
        elif len(prefix) + 1 + len(line := scalar(item)) > MAX_LINE and (
                block := _folded_block(item, indent + _INDENT)):
            out.append(f"{prefix} {block}")
        else:
            out.append(f"{prefix} {line}")
    elif kind is VaultValue:
        block = _literal_block(str(item), indent + _INDENT)
        out.append(f"{prefix} {VAULT_TAG} {block}" if block else f"{prefix} {_atom(item)}")
    elif kind is dict:
        if item:
            out.append(prefix)
            _write(item, indent + _INDENT, out)
        else:
            out.append(f"{prefix} {{}}")
    elif kind is list:
        if _is_flat_list(item):
            out.append(f"{prefix} [{', '.join(_atom(element) for element in item)}]")
        else:
            out.append(prefix)
            _write(item, indent + _INDENT, out)
    elif item is None and prefix.endswith(":"):
        out.append(prefix)
    else:
        out.append(f"{prefix} {_atom(item)}")


def dump(data: dict | list, header: str = "") -> str:
    """`data` as a YAML document, after an optional `# comment` header."""
    if not data:
        body = "{}\n" if isinstance(data, dict) else "[]\n"
    else:
        body = "\n".join(_lines_of(data, "")) + "\n"
    return header + "---\n" + body if header else "---\n" + body
