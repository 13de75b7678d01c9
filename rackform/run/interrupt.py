"""SIGINT and SIGTERM for a whole rackform command, not only for one playbook run.

ansible-runner installs its own SIGINT/SIGTERM handlers for every run it starts
(when given no `cancel_callback`) and leaves them in place after the run returns,
so a signal that arrived between runs (while rendering, at a stage boundary,
during the summary) was swallowed and the deployment went on. rackform owns the
signals instead, for as long as a command runs:

- the first signal cancels: the running playbook is stopped (ansible-runner polls
  `cancel_requested`, passed as its `cancel_callback`), no later stage starts, and
  the command prints its summary with the stage that was cut and exits non-zero;
- a second signal stops at once (exit 128 + the signal's number), without a summary.

`SIGTERM` is what `timeout`, systemd, a CI cancel button and a Kubernetes pod stop
send; `SIGINT` is Ctrl-C. Only the main thread may install handlers: elsewhere (the
Pulumi provider's gRPC threads) `owned_signals` leaves signals alone.

Under Pulumi no signal reaches the stage: the engine starts its provider processes in
process groups of their own, so a Ctrl-C goes to the `pulumi` CLI alone, which sends
each provider the Cancel RPC. The Playbook provider turns that RPC into
`request_cancel(PULUMI_CANCEL)` (stacks/providers/playbook.py): the first signal's
cancel, the same for both front doors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)
PULUMI_CANCEL = "Pulumi's cancel (Ctrl-C or SIGTERM to pulumi)"
"""Why a stage run by the Pulumi `Playbook` provider stops: the engine's Cancel RPC."""
_requested = threading.Event()
_signal_name: list[str] = []


def cancel_requested() -> bool:
    """True once a signal asked this command to stop (ansible-runner's cancel_callback)."""
    return _requested.is_set()


def reason() -> str:
    """Why the command is stopping, for the summary: 'interrupted by SIGTERM'."""
    return f"interrupted by {_signal_name[0]}" if _signal_name else "interrupted"


def request_cancel(name: str = "a request") -> None:
    """Ask the running command to stop, as a first signal does."""
    if not _requested.is_set():
        _signal_name.append(name)
        _requested.set()


def _handle(signum: int, _frame) -> None:
    name = signal.Signals(signum).name
    if _requested.is_set():
        print(f"\nrackform: {name} again: stopping now", file=sys.stderr, flush=True)
        os._exit(128 + signum)  # noqa: SLF001 - the second signal means "now", with no unwinding
    print(f"\nrackform: {name}: cancelling the running stage; send it again to stop at once",
          file=sys.stderr, flush=True)
    request_cancel(name)


@contextlib.contextmanager
def owned_signals() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as described above while the block runs; restore after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    _requested.clear()
    _signal_name.clear()
    for signum in HANDLED:
        signal.signal(signum, _handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_code() -> int:
    """The exit status for a command stopped by the first signal: 128 + its number."""
    name = _signal_name[0] if _signal_name else ""
    return 128 + signal.Signals[name].value if name in signal.Signals.__members__ else 130
