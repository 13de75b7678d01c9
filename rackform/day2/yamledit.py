"""Round-trip edits of hand-written YAML: change what must change, leave every other byte.

`YamlFile.load(path)` parses with ruamel.yaml's round-trip loader (comments, key order,
flow or block style and quoting kept). Edit `.data` (or use the helpers below), then
`.text()` gives the new file. Two guards keep a person's hand edits intact:

- the dump settings (indentation of mappings and sequences) are the ones under which the
  file round-trips unchanged, tried in turn;
- where no setting reproduces the file exactly (odd spacing, a wrapped flow list), the
  edit is applied as a line patch: the lines ruamel changes between its dump of the
  untouched document and its dump of the edited one are spliced into the original text,
  so lines the edit does not touch stay as they were, byte for byte.

Indices in a sequence carry their comments with them: `insert_after` moves a trailing
comment block (say, `# leaf-spine uplinks` above the next group) onto the new item, so the
new item stays with the group it belongs to.
"""

from __future__ import annotations

import difflib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken

# (mapping, sequence, offset): the styles seen in hand-written YAML, most common first.
INDENT_STYLES = ((2, 4, 2), (2, 2, 0), (4, 4, 2), (4, 6, 4), (2, 2, 2), (4, 4, 0))
WIDTH = 4096
"""Never wrap a long flow line: a person's one-line `{a: ..., b: ...}` stays one line."""


class EditError(ValueError):
    """The edit cannot be made without touching lines it should not (the message says where)."""


def _yaml(style: tuple[int, int, int]) -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = WIDTH
    mapping, sequence, offset = style
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _dump(yaml: YAML, data: Any) -> str:
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


@dataclass(slots=True)
class YamlFile:
    path: Path
    original: str
    data: Any
    style: tuple[int, int, int]
    exact: bool
    """True when the dump of the untouched document equals the original text."""
    _baseline: str = field(default="", repr=False)

    @classmethod
    def load(cls, path: Path | str) -> YamlFile:
        path = Path(path)
        return cls.parse(path.read_text(encoding="utf-8"), path)

    @classmethod
    def parse(cls, text: str, path: Path | str = "<text>") -> YamlFile:
        best = None
        for style in INDENT_STYLES:
            yaml = _yaml(style)
            data = yaml.load(text)
            baseline = _dump(yaml, data)
            if baseline == text:
                return cls(Path(path), text, data, style, True, baseline)
            if best is None:
                best = cls(Path(path), text, data, style, False, baseline)
        return best

    def text(self) -> str:
        """The file as it is after the edits made to `data`."""
        edited = _dump(_yaml(self.style), self.data)
        if self.exact:
            return edited
        return splice(self.original, self._baseline, edited, str(self.path))

    def changed(self) -> bool:
        return self.text() != self.original

    def diff(self, label: str | None = None) -> str:
        """A unified diff of the edit, as `git diff` would show it."""
        name = label or str(self.path)
        return "".join(difflib.unified_diff(self.original.splitlines(keepends=True), self.text().splitlines(keepends=True),
                                            f"a/{name}", f"b/{name}"))

    def save(self) -> bool:
        """Write the file if it changed; True when it did."""
        new = self.text()
        if new == self.original:
            return False
        self.path.write_text(new, encoding="utf-8")
        return True


def splice(original: str, baseline: str, edited: str, where: str = "<text>") -> str:
    """Apply the change baseline -> edited onto `original`, which baseline only approximates."""
    original_lines = original.splitlines(keepends=True)
    baseline_lines = baseline.splitlines(keepends=True)
    edited_lines = edited.splitlines(keepends=True)
    # Which original line each untouched baseline line is.
    to_original: dict[int, int] = {}
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, baseline_lines, original_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            for offset in range(i2 - i1):
                to_original[i1 + offset] = j1 + offset
    pieces: list[tuple[int, int, list[str]]] = []  # (start, end) in original, replacement lines
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, baseline_lines, edited_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i1 == i2:  # a pure insertion before baseline line i1
            if i1 in to_original:
                start = to_original[i1]
            elif i1 - 1 in to_original or i1 == 0:
                start = to_original[i1 - 1] + 1 if i1 else 0
            else:
                raise EditError(f"{where}: cannot insert at line {i1 + 1} without reformatting the lines around it")
            pieces.append((start, start, edited_lines[j1:j2]))
            continue
        if not all(index in to_original for index in range(i1, i2)):
            raise EditError(f"{where}: the edit touches lines {i1 + 1}-{i2} whose formatting rackform cannot "
                            f"reproduce; edit them by hand")
        start, end = to_original[i1], to_original[i2 - 1] + 1
        if end - start != i2 - i1:
            raise EditError(f"{where}: the edit spans lines {start + 1}-{end} that are not contiguous as written")
        pieces.append((start, end, edited_lines[j1:j2]))
    result = list(original_lines)
    for start, end, replacement in sorted(pieces, reverse=True):
        result[start:end] = replacement
    return "".join(result)


# ---------------------------------------------------------------- helpers for lists of mappings


def flow_map(values: dict) -> CommentedMap:
    """A mapping written on one line (`{a: 1, b: 2}`), the style site files use for list items."""
    item = CommentedMap(values)
    item.fa.set_flow_style()
    return item


def like_siblings(values: dict, sequence: CommentedSeq, near: int = -1) -> CommentedMap:
    """A new mapping in the style of the sequence's item at `near` (flow when it is flow)."""
    item = CommentedMap(values)
    neighbour = sequence[near] if sequence and -len(sequence) <= near < len(sequence) else None
    if isinstance(neighbour, CommentedMap) and neighbour.fa.flow_style():
        item.fa.set_flow_style()
        for value in item.values():
            if isinstance(value, (CommentedMap, CommentedSeq)):
                value.fa.set_flow_style()
    return item


def insert_after(sequence: CommentedSeq, index: int, item: Any) -> int:
    """Insert `item` after position `index` (-1: at the front); returns its index.

    ruamel files the comment lines between two items under the earlier one (after its
    end-of-line comment, if any); they introduce what follows, so they move to the new
    item and stay just above the item they were above.
    """
    position = index + 1
    comments = sequence.ca.items
    for key in sorted((k for k in comments if k >= position), reverse=True):
        comments[key + 1] = comments.pop(key)  # CommentedSeq.insert does not shift them
    list.insert(sequence, position, item)
    following = _split_following(comments.get(index)) if index >= 0 else None
    if following is not None:
        comments[position] = [CommentToken("\n" + following, CommentMark(0), None), None, None, None]
    return position


def _split_following(entry: list | None) -> str | None:
    """Cut the comment lines after an item's own line off its comment entry; return them."""
    token = entry[0] if entry else None
    if token is None or "\n" not in token.value.rstrip("\n"):
        return None
    own, following = token.value.split("\n", 1)
    if own.strip():
        token.value = own + "\n"
    else:
        entry[0] = None
    return following


def remove_at(sequence: CommentedSeq, index: int) -> None:
    """Remove one item; comment lines it carried for what follows pass to the item before it."""
    comments = sequence.ca.items
    entry = comments.pop(index, None)
    following = _split_following(entry) if entry else None
    list.__delitem__(sequence, index)
    for key in sorted(k for k in comments if k > index):
        comments[key - 1] = comments.pop(key)
    if following is not None and index > 0:
        before = comments.setdefault(index - 1, [None, None, None, None])
        if before[0] is None:
            before[0] = CommentToken("\n" + following, CommentMark(0), None)
        else:
            before[0].value = before[0].value.rstrip("\n") + "\n" + following


def set_key(mapping: CommentedMap, key: str, value: Any, after: str | None = None) -> None:
    """Set `key`; a new key goes after `after` when given and present, else at the end."""
    if key in mapping or after is None or after not in mapping:
        mapping[key] = value
        return
    mapping.insert(list(mapping).index(after) + 1, key, value)
