"""Many BMC conversations in one thread: the steps of each (generators, see
rackform_ipmi_lan's docstring) run side by side over one selector.

A step yields `(socket, deadline)`: it is resumed with the datagram that arrived on that
socket, with None once `deadline` (time.monotonic) passed, or with the OSError of the
receive thrown in. `(None, deadline)` is a pause. This is how ipmipower works (one socket
per BMC, all polled at once); a thread per BMC cost twice ipmipower's CPU, most of it in
the kernel, handing the GIL from thread to thread on every datagram.
"""

from __future__ import annotations

import heapq
import selectors
import socket
import sys
import time
from collections.abc import Generator, Iterable
from typing import Any

RECEIVE_BYTES = 1024

Steps = Generator[tuple[Any, float], Any, Any]


def run_all(tasks: Iterable[Steps], limit: int | None = None) -> None:
    """Run every generator to its end, at most `limit` at a time (in the order given). Each
    one handles its own errors: an exception that escapes a task is raised here once the
    others are done (a programming error)."""
    selector = selectors.DefaultSelector()
    timers: list[tuple[float, int, int]] = []  # (deadline, task id, wait number)
    waits: dict[int, tuple[Steps, Any, int]] = {}  # task id -> (task, socket, wait number)
    escaped: list[BaseException] = []
    not_started = enumerate(tasks)
    counter = 0
    limit = limit or sys.maxsize

    def advance(task_id: int, task: Steps, resume) -> None:
        """Resume a task up to its next wait, and register that wait (or forget a finished task)."""
        nonlocal counter
        try:
            sock, deadline = resume()
        except StopIteration:
            return
        except BaseException as error:  # noqa: BLE001 - kept, raised after the others finish
            escaped.append(error)
            return
        counter += 1
        waits[task_id] = (task, sock, counter)
        heapq.heappush(timers, (deadline, task_id, counter))
        if sock is not None:
            selector.register(sock, selectors.EVENT_READ, task_id)

    def resume_with(task_id: int, value=None, error: BaseException | None = None) -> None:
        task, sock, _ = waits.pop(task_id)
        if sock is not None:
            selector.unregister(sock)
        advance(task_id, task, (lambda: task.throw(error)) if error is not None else (lambda: task.send(value)))

    def fill() -> bool:
        """Start tasks while fewer than `limit` wait; False once none is left to start."""
        while len(waits) < limit:
            started = next(not_started, None)
            if started is None:
                return False
            task_id, task = started
            advance(task_id, task, task.__next__)
        return True

    try:
        more = fill()
        while waits:
            now = time.monotonic()
            while timers and timers[0][0] <= now:
                _, task_id, number = heapq.heappop(timers)
                if task_id in waits and waits[task_id][2] == number:
                    resume_with(task_id)
            if waits and selector.get_map():
                timeout = max(0.0, timers[0][0] - time.monotonic()) if timers else None
                for key, _ in selector.select(timeout):
                    task_id = key.data
                    if task_id not in waits:
                        continue
                    try:
                        datagram = key.fileobj.recv(RECEIVE_BYTES, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        continue
                    except OSError as error:
                        resume_with(task_id, error=error)
                        continue
                    resume_with(task_id, datagram)
            elif waits:  # only pauses
                time.sleep(max(0.0, timers[0][0] - time.monotonic()))
            if more:
                more = fill()
    finally:
        for task, _, _ in waits.values():  # only after an error here: end the others' sessions
            try:
                task.close()
            except RuntimeError:  # a task that answers GeneratorExit with one more wait
                pass
        selector.close()
    if escaped:
        raise escaped[0]
