"""One process at a time deploys a site: a lock per site, held for the whole run.

    build/.locks/<site>.lock     flock'ed while held; holds who holds it (pid, host, command)

The lock is an flock, which the kernel drops when its owner dies: a deploy or
rollout killed by a signal or a crash never leaves a lock that blocks the next run.
The file stays behind with the dead owner's line, so the next run can say that the
previous one ended without finishing. Taking a lock this process already holds
(a rollout's lock, then the stage runner's) nests instead of blocking.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

LOCKS_DIR = Path("build") / ".locks"
_held: dict[Path, int] = {}


class SiteLocked(Exception):
    """Another process is deploying this site."""


def lock_path(root: Path, site: str) -> Path:
    return Path(root) / LOCKS_DIR / f"{site}.lock"


def _owner_line() -> str:
    command = " ".join(os.path.basename(arg) if i == 0 else arg for i, arg in enumerate(sys.argv[:6]))
    return f"pid {os.getpid()} on {socket.gethostname()}: {command}\n"


@contextlib.contextmanager
def site_lock(root: Path, site: str, *, say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the site's lock for the block; SiteLocked at once when another process holds it."""
    path = lock_path(root, site).resolve()
    if path in _held:
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            raise SiteLocked(f"site {site} is being deployed by {owner} (lock {path}); "
                             f"wait for it to finish") from None
        handle.seek(0)
        previous = handle.read().strip()
        if previous and say is not None:
            say(f"{site}: the previous run ({previous}) ended without releasing its lock; "
                f"its owner is gone, so the lock is taken over")
        handle.seek(0)
        handle.truncate()
        handle.write(_owner_line())
        handle.flush()
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
            handle.seek(0)
            handle.truncate()  # an empty file: released cleanly
            fcntl.flock(handle, fcntl.LOCK_UN)
