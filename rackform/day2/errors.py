"""Refusals of the day-2 commands: each one a `file:line: key: message` and exit 2, nothing touched."""

from __future__ import annotations

from rackform.model.source import BadInput, Loc, SourceError


def refuse(loc: Loc | None, key: str, message: str) -> BadInput:
    """A BadInput with one error, at `loc` (the file and line to look at) when there is one."""
    return BadInput([SourceError(loc or Loc("", 0), key, message)])
