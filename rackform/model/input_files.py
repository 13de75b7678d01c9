"""How the loader reads one input file: YAML with its lines, paths shown as the user typed
them, and schema failures turned into `file:line: key: message`.

Apart from the loader (`rackform.model.loader`), which puts a whole site together, so that
the parts it calls (the inventory, `rackform.model.inventory`) read files the same way
without importing the loader back.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rackform.model import source
from rackform.model.source import BadInput, LineDict, LineList, Loc, SourceError


class _Paths:
    """Shows input paths relative to the repo root being loaded (set per load).

    Every input path is built as `root / ...`, so stripping the root's text is
    enough: no `resolve()` per file (it cost seconds on a 10,000-node site)."""

    prefix = ""


def show_paths_under(root: Path) -> None:
    """From now on, name input files relative to `root` (the repo root of the load that starts)."""
    _Paths.prefix = "" if str(root) in ("", ".") else str(root).rstrip(os.sep) + os.sep


def display_path(path: Path | str) -> str:
    text = str(path)
    return text[len(_Paths.prefix) :] if _Paths.prefix and text.startswith(_Paths.prefix) else text


def load_yaml(path: Path):
    return source.load_yaml(path, shown_as=display_path(path))


def load_inventory_yaml(path: Path | str):
    """An inventory file (hosts.yml, group_vars, host_vars): Ansible's `!vault` values are kept, encrypted."""
    return source.load_yaml(path, shown_as=display_path(path), vault=True)


# ---------------------------------------------------------------- schema errors


def _describe_path(data: Any, loc: tuple) -> tuple[str, Loc]:
    """Follow a pydantic error location through the line-aware data.

    Returns a readable key path (list items named by their `name` when they have
    one) and the file position of the deepest element that exists.
    """
    parts: list[str] = []
    node = data
    where = node.loc if isinstance(node, (LineDict, LineList)) else Loc("?", 0)
    for step in loc:
        if isinstance(node, LineDict) and step in node:
            where = node.key_loc(step)
            parts.append(str(step))
            node = node[step]
        elif isinstance(node, LineList) and isinstance(step, int) and step < len(node):
            where = node.item_loc(step)
            item = node[step]
            label = item.get("name") if isinstance(item, dict) else None
            parts[-1:] = [f"{parts[-1] if parts else ''}[{label or step}]"]
            node = item
        elif isinstance(step, str) and not step.startswith(("function-", "literal[")):
            parts.append(step)
            node = None
    return ".".join(parts), where


def _schema_message(error: dict, model_fields: list[str] | None) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        message = "unknown key"
        if model_fields:
            close = difflib.get_close_matches(key, model_fields, n=1)
            if close:
                message += f" (did you mean '{close[0]}'?)"
            message += "; expected one of: " + ", ".join(model_fields)
        return message
    if kind == "missing":
        return "required key is missing"
    found = error.get("input")
    shown = repr(found) if not isinstance(found, (dict, list)) else type(found).__name__
    return f"{error['msg'][0].lower()}{error['msg'][1:]} (found {shown})"


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str] | None:
    """The keys the schema allows where an unknown key was found."""
    current: Any = model
    for step in loc[:-1]:
        if isinstance(step, int) or not isinstance(current, type) or not issubclass(current, BaseModel):
            continue
        field = current.model_fields.get(step)
        if field is None:
            return None
        current = _inner_model(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside `X`, `X | None`, `list[X]` or `dict[K, X]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def parse(model: type[BaseModel], data: Any, file_loc: Loc) -> Any:
    """Validate `data` against `model`, translating failures into SourceErrors."""
    if not isinstance(data, dict):
        what = "empty file" if data is None else f"a {type(data).__name__}"
        raise BadInput([SourceError(file_loc, "", f"expected a mapping at the top level, found {what}")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = []
        for error in exc.errors():
            key, where = _describe_path(data, error["loc"])
            fields = _fields_at(model, error["loc"]) if error["type"] == "extra_forbidden" else None
            errors.append(SourceError(where, key, _schema_message(error, fields)))
        raise BadInput(errors) from None
