"""File changes of a day-2 command: shown as a diff, checked on a scratch copy, then written.

A command builds its `FileChange`s in memory (round-trip edits, rackform.day2.yamledit);
`check_on_copy` writes them into a scratch copy of the site's inputs and loads and checks
the site there, so a change that `rackform validate` would refuse is refused before any
file of the repo is touched; `write` then writes them.
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rackform.model.source import BadInput, Loc, SourceError


@dataclass(frozen=True, slots=True)
class FileChange:
    path: Path
    """Relative to the repository root."""
    old: str | None
    """None: the file is new."""
    new: str | None
    """None: the file is deleted."""

    def diff(self) -> str:
        old = [] if self.old is None else self.old.splitlines(keepends=True)
        new = [] if self.new is None else self.new.splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, "/dev/null" if self.old is None else f"a/{self.path}",
                                            "/dev/null" if self.new is None else f"b/{self.path}"))


def diff_text(changes: list[FileChange]) -> str:
    return "".join(change.diff() for change in changes)


def write(root: Path, changes: list[FileChange]) -> None:
    for change in changes:
        path = root / change.path
        if change.new is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(change.new, encoding="utf-8")


def check_on_copy(site_name: str, root: Path, changes: list[FileChange]) -> None:
    """Load and check the site with `changes` applied to a scratch copy; BadInput / DesignRejected
    (with the repo's paths in the messages) when it would not validate."""
    from rackform.pipeline import DesignRejected, load_and_check

    with tempfile.TemporaryDirectory(prefix="rackform-day2-") as scratch:
        copy = Path(scratch)
        shutil.copytree(root / "topologies", copy / "topologies")
        shutil.copytree(root / "inventories" / site_name, copy / "inventories" / site_name)
        write(copy, changes)
        try:
            load_and_check(site_name, copy)
        except BadInput as error:
            raise BadInput([_at_repo(problem, copy, root) for problem in error.errors]) from None
        except DesignRejected as error:
            for finding in error.findings:
                _rebase_finding(finding, copy, root)
            raise


def _at_repo(problem: SourceError, copy: Path, root: Path) -> SourceError:
    return SourceError(Loc(_rebase(problem.loc.path, copy, root), problem.loc.line), problem.key, problem.message)


def _rebase(path: str, copy: Path, root: Path) -> str:
    text = str(path)
    for prefix in (str(copy.resolve()), str(copy)):
        if text.startswith(prefix):
            relative = text[len(prefix):].lstrip("/")
            return relative if root == Path(".") else str(root / relative)
    return text


def _rebase_finding(finding, copy: Path, root: Path) -> None:
    loc = getattr(finding, "loc", None)
    if loc is not None and hasattr(loc, "path"):
        try:
            object.__setattr__(finding, "loc", Loc(_rebase(loc.path, copy, root), loc.line))
        except (AttributeError, TypeError):
            pass
