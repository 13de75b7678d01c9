"""YAML loading that remembers where every key came from.

Every mapping becomes a `LineDict` and every sequence a `LineList`; both carry the
line of each key or item, so an error found much later (by the schema or by a
preflight check) can still name the file and line a person has to edit.
LibYAML's C parser is used when PyYAML was built with it.

Inventory files (`load_yaml(..., vault=True)`) also take Ansible's inline vault values
(`key: !vault |` over a `$ANSIBLE_VAULT;...` block): each becomes a `VaultValue`, the
ciphertext as written, never decrypted, which the render writes back as `!vault`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class Loc:
    """A place in an input file: what an error points a person at."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


class SourceError(Exception):
    """Bad input: a file, a line, a key and what was expected.

    The CLI prints these as `path:line: key: message` and exits 2; they never
    surface as a traceback.
    """

    def __init__(self, loc: Loc, key: str, message: str):
        super().__init__(f"{loc}: {key}: {message}" if key else f"{loc}: {message}")
        self.loc = loc
        self.key = key
        self.message = message


class LineDict(dict):
    """A mapping that knows its own line and the line of each key."""

    __slots__ = ("path", "line", "lines")

    def key_loc(self, key: Any) -> Loc:
        return Loc(self.path, self.lines.get(key, self.line))

    @property
    def loc(self) -> Loc:
        return Loc(self.path, self.line)


class LineList(list):
    """A sequence that knows its own line and the line of each item."""

    __slots__ = ("path", "line", "lines")

    def item_loc(self, index: int) -> Loc:
        line = self.lines[index] if 0 <= index < len(self.lines) else self.line
        return Loc(self.path, line)

    @property
    def loc(self) -> Loc:
        return Loc(self.path, self.line)


class VaultValue(str):
    """An Ansible inline vault value (`!vault`): the ciphertext, passed on untouched.

    rackform never decrypts it; only Ansible does, with the site's vault password."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "VaultValue(<encrypted>)"


VAULT_TAG = "!vault"


class _LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """LibYAML's parser with constructors that record lines; one class for every file
    (the file name shown in errors is set on each loader instance)."""

    shown_path = "?"

    def resolve(self, kind, value, implicit):
        """PyYAML's tag resolution (`BaseResolver.resolve`), shortened for a scalar: this
        loader has no path resolvers and no wildcard ones (checked below), so a scalar is
        matched only against the resolvers for its first character. The C composer calls this
        for every node; PyYAML's general version cost about 2 % of a large site's load."""
        if kind is yaml.ScalarNode:
            if implicit[0]:
                for tag, regexp in self.yaml_implicit_resolvers.get(value[0] if value else "", ()):
                    if regexp.match(value):
                        return tag
            return self.DEFAULT_SCALAR_TAG
        return super().resolve(kind, value, implicit)


_STR_TAG = "tag:yaml.org,2002:str"


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    path = loader.shown_path
    data = LineDict()
    data.path, data.line, data.lines = path, node.start_mark.line + 1, {}
    lines = data.lines
    construct = loader.construct_object
    for key_node, value_node in node.value:
        # A string scalar is its node's text (what construct_object would return, at a
        # fraction of the cost); anything else goes through PyYAML as before.
        if key_node.tag == _STR_TAG and type(key_node) is yaml.ScalarNode:
            key = key_node.value
        else:
            key = construct(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise SourceError(Loc(path, key_node.start_mark.line + 1), "", "a mapping key must be a plain scalar")
        line = key_node.start_mark.line + 1
        if key in data:
            raise SourceError(Loc(path, line), str(key), f"duplicate key (first given on line {lines[key]})")
        if value_node.tag == _STR_TAG and type(value_node) is yaml.ScalarNode:
            data[key] = value_node.value
        else:
            data[key] = construct(value_node, deep=True)
        lines[key] = line
    return data


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    construct = loader.construct_object
    data = LineList(
        child.value if child.tag == _STR_TAG and type(child) is yaml.ScalarNode else construct(child, deep=True)
        for child in node.value
    )
    data.path, data.line = loader.shown_path, node.start_mark.line + 1
    data.lines = [child.start_mark.line + 1 for child in node.value]
    return data


if _LineLoader.yaml_path_resolvers or None in _LineLoader.yaml_implicit_resolvers:
    del _LineLoader.resolve  # resolvers the shortcut does not know: PyYAML's own version

_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


class _InventoryLineLoader(_LineLoader):
    """As _LineLoader, plus Ansible's `!vault` on a scalar (inventory variable files)."""


def _construct_vault(loader: _InventoryLineLoader, node: yaml.Node) -> VaultValue:
    if not isinstance(node, yaml.ScalarNode):
        raise SourceError(Loc(loader.shown_path, node.start_mark.line + 1), "",
                          f"{VAULT_TAG} marks one encrypted string (ansible-vault encrypt_string), not a "
                          f"{'mapping' if isinstance(node, yaml.MappingNode) else 'list'}")
    text = loader.construct_scalar(node)
    if not text.lstrip().startswith("$ANSIBLE_VAULT;"):
        raise SourceError(Loc(loader.shown_path, node.start_mark.line + 1), "",
                          f"a {VAULT_TAG} value must be ansible-vault ciphertext (starting $ANSIBLE_VAULT;), as "
                          f"`ansible-vault encrypt_string` prints it")
    return VaultValue(text)


_InventoryLineLoader.add_constructor(VAULT_TAG, _construct_vault)


def display_path(path: Path, root: Path | None = None) -> str:
    """The path as a person would see it in the repo: relative to `root` (default: the
    working directory) when inside it, else as given."""
    base = (root or Path.cwd()).resolve()
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:
        return str(path)


def load_yaml(path: Path | str, *, shown_as: str | None = None, vault: bool = False) -> Any:
    """Parse one YAML file into LineDict/LineList/scalars, or raise SourceError.
    `vault`: an inventory file, where `!vault` values are read as VaultValue.
    `path` may be text: the inventory loader reads 10,000 host_vars files by their names."""
    shown = shown_as or display_path(Path(path))
    try:
        with open(path, encoding="utf-8") as handle:  # as Path.read_text, without its layers
            text = handle.read()
    except FileNotFoundError:
        raise SourceError(Loc(shown, 0), "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(Loc(shown, 0), "", f"cannot read file: {exc}") from None
    loader = (_InventoryLineLoader if vault else _LineLoader)(text)
    loader.shown_path = shown
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise SourceError(Loc(shown, line), "", f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise SourceError(Loc(shown, 0), "", f"YAML error: {exc}") from None
    finally:
        loader.dispose()


class BadInput(Exception):
    """One or more `SourceError`s found in the input; nothing may be acted on."""

    def __init__(self, errors: list[SourceError]):
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = errors
