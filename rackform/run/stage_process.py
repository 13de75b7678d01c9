"""One stage run in a fresh Python process: how the Pulumi provider runs its stages.

The engine's dynamic-provider process is a gRPC server with threads of its own. gRPC's C core
registers fork handlers (pthread_atfork) that run in every fork() of that process; ansible-runner
starts ansible-playbook through pexpect, which forks (forkpty), and in that process the child
was killed before its playbook's first line in most runs (`validate.yml`, rc None) unless
GRPC_ENABLE_FORK_SUPPORT=0 was set, which turns those handlers off but only when set before
gRPC starts, and the engine's launcher does not set it. So the provider never forks a stage itself: it starts
`python -m rackform.run.stage_process` with subprocess (vfork/exec on Linux, which runs no
fork handlers), and that process, which has no gRPC in it, runs `rackform.run.stages.run_stages`
exactly as `rackform deploy` does.

    parent (provider)                     child (this module as __main__, a session of its own)
    request, pickled, on stdin   ─────▶   run_stages(site, root, [stage], ...)
    SIGTERM on the engine's Cancel ───▶   the first signal's cancel (interrupt.PULUMI_CANCEL)
    (the parent's death: SIGTERM too)     the same cancel, asked for (not yet seen to stop the playbook)
    the SiteRun or the exception  ◀─────  pickled, on the file descriptor named in argv

The child's stdout goes to the parent's stderr: the provider's stdout is the engine's. Its
environment is not the provider's (the engine's, PULUMI_* secrets and all): it is profile
`rackform` of rackform.process_environment, what rackform's own stages need (docs/security.md).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from rackform.process_environment import tool_environment

CANCEL_POLL_S = 0.2
"""How often the parent looks for a cancel request while the stage runs."""
STAGE_TOOL = "rackform"
"""The stage process's profile in rackform.process_environment.TOOLS."""


class StageProcessFailed(RuntimeError):
    """The stage process ended without an answer (killed, or it could not start Python)."""


def run_stage_in_fresh_process(site: str, root: Path, stage: str, *, envvars: Mapping[str, str],
                               left_out: Collection[str], via: str,
                               cancel_requested: Callable[[], bool]) -> Any:
    """`run_stages(site, root, [stage], ...)` in a new process; its SiteRun, or what it raised, raised here.

    `cancel_requested` is polled: once true, the child is sent SIGTERM, which cancels the stage
    as the first Ctrl-C cancels `rackform deploy` (the report then says it was interrupted)."""
    request = pickle.dumps({"site": site, "root": str(root), "stage": stage, "envvars": dict(envvars),
                            "left_out": list(left_out), "via": via})
    answer_read, answer_write = os.pipe()
    try:
        # A session of its own: when the engine shuts its plugins down (SIGINT to the provider's
        # process group, SIGKILL 5 s later) the stage is not killed mid-task; it finishes the
        # cancel Pulumi's Cancel started.
        child = subprocess.Popen([sys.executable, "-m", __name__, str(answer_write), str(os.getpid())],
                                 stdin=subprocess.PIPE, stdout=sys.stderr.fileno(), pass_fds=(answer_write,),
                                 start_new_session=True, env=tool_environment(STAGE_TOOL))
    finally:
        os.close(answer_write)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(answer_read, chunks), daemon=True)
    reader.start()
    child.stdin.write(request)
    child.stdin.close()
    cancelled = False
    while child.poll() is None:
        if not cancelled and cancel_requested():
            child.send_signal(signal.SIGTERM)
            cancelled = True
        time.sleep(CANCEL_POLL_S)
    reader.join()
    answer = b"".join(chunks)
    if not answer:
        cut = " after a cancel" if cancelled else ""
        raise StageProcessFailed(f"stage '{stage}' of site '{site}': its process ended{cut} (exit {child.returncode}) "
                                 f"without an answer; nothing was recorded for it")
    outcome, value = pickle.loads(answer)
    if outcome == "raised":
        raise value
    return value


def _read_all(descriptor: int, chunks: list[bytes]) -> None:
    with os.fdopen(descriptor, "rb") as answers:
        chunks.append(answers.read())


def _answer(value: Any, outcome: str) -> bytes:
    try:
        return pickle.dumps((outcome, value))
    except Exception:  # an exception that does not pickle: keep its type's name and its message
        return pickle.dumps(("raised", RuntimeError(f"{type(value).__name__}: {value}")))


def _cancel_when_the_parent_dies(parent: int) -> None:
    """The engine shuts the provider down after a Ctrl-C (SIGINT to its process group, then
    SIGKILL): its stage must not run on unseen. Linux sends this process SIGTERM when its parent
    dies, which asks for the cancel the engine's Cancel asks for (the unit test saw the stage
    process end without stopping its playbook all the same: docs/pulumi.md)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    from rackform.run import interrupt
    from rackform.run.stages import run_stages

    answer_fd, parent = int(argv[0]), int(argv[1])
    request = pickle.loads(sys.stdin.buffer.read())
    signal.signal(signal.SIGTERM, lambda _signum, _frame: interrupt.request_cancel(interrupt.PULUMI_CANCEL))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the engine's to turn into Cancel (this is a session of its own)
    _cancel_when_the_parent_dies(parent)
    try:
        answer = _answer(run_stages(request["site"], Path(request["root"]), [request["stage"]],
                                    envvars=request["envvars"], left_out=request["left_out"], via=request["via"]),
                         "returned")
    except Exception as error:
        answer = _answer(error, "raised")
    try:
        with os.fdopen(answer_fd, "wb") as out:
            out.write(answer)
    except BrokenPipeError:  # the provider is gone (the engine shut it down): no one to tell
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
