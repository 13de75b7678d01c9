"""`write_project`: put a rendered project on disk, all at once, and say what changed.

The new tree is built in a sibling temporary folder and swapped in with
renames, so a reader (ansible-runner, a person) never sees half a project and
stale files disappear. When nothing changed nothing is touched, so file times
stay put. Runtime state kept inside the project folder by a run (the fact cache,
ansible-runner artifacts) is carried over to the new tree. Writers under one
folder (build/) take turns, so two renders at once never mix their files.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Folders a run writes into the project; not render output, never removed.
RUNTIME_DIRS = (".cache", "artifacts")


@dataclass(frozen=True, slots=True)
class WriteResult:
    out_dir: Path
    added: tuple[str, ...]
    modified: tuple[str, ...]
    removed: tuple[str, ...]
    unchanged: int

    @property
    def changed(self) -> tuple[str, ...]:
        """Every path added, modified or removed, sorted."""
        return tuple(sorted((*self.added, *self.modified, *self.removed)))


def _check_path(path: str) -> None:
    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts or parts[0] in RUNTIME_DIRS:
        raise ValueError(
            f"refusing to write '{path}': project paths are relative, inside the project, outside {RUNTIME_DIRS}"
        )


def existing_files(out_dir: Path) -> dict[str, Path]:
    """Files under out_dir (relative posix path -> path), runtime folders left out."""
    found: dict[str, Path] = {}
    if not out_dir.is_dir():
        return found
    for folder, subfolders, names in os.walk(out_dir):
        here = Path(folder)
        if here == out_dir:
            subfolders[:] = [name for name in subfolders if name not in RUNTIME_DIRS]
        for name in names:
            path = here / name
            found[path.relative_to(out_dir).as_posix()] = path
    return found


def _same(path: Path, content: bytes) -> bool:
    return path.stat().st_size == len(content) and path.read_bytes() == content


def _fill(folder: Path, files: dict[str, bytes]) -> None:
    made: set[Path] = set()
    for relative, content in files.items():
        target = folder / relative
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(content)


def _swap_in(new: Path, out_dir: Path) -> None:
    """Replace out_dir by new (a sibling), keeping out_dir's runtime folders."""
    if not out_dir.exists():
        new.rename(out_dir)
        return
    for name in RUNTIME_DIRS:
        if (out_dir / name).exists():
            (out_dir / name).rename(new / name)
    graveyard = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
    out_dir.rename(graveyard / out_dir.name)
    new.rename(out_dir)
    shutil.rmtree(graveyard)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise writers of projects under one folder (flock on the folder itself)."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def write_project(files: dict[str, bytes], out_dir: Path) -> WriteResult:
    """Make out_dir hold exactly `files` (plus runtime folders); report the differences."""
    for path in files:
        _check_path(path)
    with _locked(out_dir.parent):
        return _write(files, out_dir)


def _write(files: dict[str, bytes], out_dir: Path) -> WriteResult:
    old = existing_files(out_dir)
    added = tuple(path for path in files if path not in old)
    modified = tuple(path for path in files if path in old and not _same(old[path], files[path]))
    removed = tuple(sorted(path for path in old if path not in files))
    result = WriteResult(out_dir, added, modified, removed, len(files) - len(added) - len(modified))
    if not result.changed:
        return result
    new = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".new", dir=out_dir.parent))
    try:
        new.chmod(0o755)
        _fill(new, files)
        _swap_in(new, out_dir)
    finally:
        if new.exists():
            shutil.rmtree(new)
    return result
