"""One process at a time deploys a site: a lock per site, held for the whole run.

    build/.locks/<site>.lock     flock'ed while held; holds who holds it (pid, host, command)

The lock is an flock, which the kernel drops when its owner dies: a deploy or
rollout killed by a signal or a crash never leaves a lock that blocks the next run.
The file stays behind with the dead owner's line, so the next run can say that the
previous one ended without finishing; a run that ends cleanly removes it. Taking a lock this process already holds
(a rollout's lock, then the stage runner's) nests instead of blocking.

`pulumi up` is several processes: its program holds the site's lock for the whole run
(`stacks/__main__.py`; the program lives until the engine has finished every resource), and
the engine's dynamic-provider process runs the stages. The owner line names the Pulumi engine
process a holder runs under; a process under the same engine shares the lock, any other
process (`rackform deploy`, a second `pulumi up`) is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
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


ENGINE_NAME = "pulumi"
"""The Pulumi CLI's process name: the engine every process of one `pulumi up` runs under."""
ENGINE_MARK = re.compile(r"\[pulumi engine (\d+)\]")


def engine_pid(pid: int | None = None) -> int | None:
    """The nearest ancestor process that is the Pulumi engine, or None outside a Pulumi run."""
    current = os.getpid() if pid is None else pid
    while current > 1:
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            return None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ')'.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name == ENGINE_NAME:
            return current
        current = int(stat[stat.rindex(")") + 2:].split()[1])
    return None


def _owner_line() -> str:
    command = " ".join(os.path.basename(arg) if i == 0 else arg for i, arg in enumerate(sys.argv[:6]))
    engine = engine_pid()
    under = f" [pulumi engine {engine}]" if engine is not None else ""
    return f"pid {os.getpid()} on {socket.gethostname()}: {command}{under}\n"


def _same_engine(owner: str) -> bool:
    """Whether the lock's holder runs under the Pulumi engine this process runs under."""
    found = ENGINE_MARK.search(owner)
    return found is not None and int(found.group(1)) == engine_pid()


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
    handle = _open_locked(path, site)
    if handle is None:  # this `pulumi up`'s own program holds it for the whole run
        yield
        return
    with handle:
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
            # Released cleanly: the file goes (a run that changed nothing leaves nothing behind);
            # one left with an owner line is a run that died holding it.
            path.unlink(missing_ok=True)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_locked(path: Path, site: str):
    """The lock file, open and flock'ed; None where this process's Pulumi engine holds it.

    A holder removes the file when it releases it, so the file this process opened may have
    been removed (or replaced) before its flock succeeded: then it holds a lock on a file nobody
    else will open, and tries again on the file the path names now."""
    while True:
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            if _same_engine(owner):
                return None
            raise SiteLocked(f"site {site} is being deployed by {owner} (lock {path}); "
                             f"wait for it to finish") from None
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return handle
        handle.close()
