"""Run one IPMI operation on many BMCs at once: parallel, one command in flight per BMC,
bounded retries with exponential backoff, and a result per node that says why it failed.

A node that times out, rejects the login or vanishes mid-run is retried after a pause
(1 s, 2 s, 4 s ... by default, three tries in all), then fails alone; the rest of the fleet
carries on. Each BMC is handled by one worker at a time and behind a per-address lock file
shared with every other rackform process on this machine (the Ansible module's too), so two
operations (two Pulumi resources, two fleet runs, a playbook beside `rackform bmc power`)
never talk to the same BMC at once: BMCs crash when hammered (docs/domain.md, "IPMI safety
rules"). The retry policy, the read-back and the lock are the Ansible module's own code
(plugins/module_utils/rackform_ipmi_policy.py, loaded by rackform.ipmi.module_utils).

Power status and power changes run every BMC's conversation in one thread
(`run_steps`, rackform.ipmi.loop: one socket per BMC, all polled at once, as ipmipower
does); other operations (sensors, FRU, boot device through pyghmi) block, and run in a
thread per BMC (`run`). Both keep the same rules: the lock, the retries, the logins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from rackform.ipmi import loop, wire
from rackform.ipmi.client import BOOT_DEVICES, POWER_ACTIONS, BmcClient, ConfirmPolicy, PowerChange
from rackform.ipmi.credentials import Credentials, CredentialSource
from rackform.ipmi import prelogin
from rackform.ipmi.errors import IpmiError, Reason
from rackform.ipmi.module_utils import load
from rackform.ipmi.session import IPMI_PORT, LanSession, Timeouts

_policy = load("rackform_ipmi_policy")
RetryPolicy = _policy.RetryPolicy
"""Tries per node and the pause before each retry: first, first x factor, ... capped."""
BmcLocks = _policy.BmcLocks
"""One lock per BMC address, shared by every rackform process of this user on this machine."""

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_ATTEMPTS = 3
DEFAULT_MAX_PARALLEL = 128
"""Workers (threads, one BMC each at a time). Most of a worker's life is waiting on UDP."""


@dataclass(frozen=True, slots=True)
class BmcTarget:
    node: str
    address: str
    port: int = IPMI_PORT


@dataclass(frozen=True, slots=True)
class NodeResult(Generic[T]):
    """What happened on one node: a value, or the reason and message of its last failure."""

    node: str
    address: str
    value: T | None = None
    reason: Reason | None = None
    error: str = ""
    attempts: int = 1
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        if self.ok:
            return "ok"
        tries = f" (gave up after {self.attempts} tries)" if self.attempts > 1 else ""
        return f"{self.reason}: {self.error}{tries}"


PROCESS_BMC_LOCKS = BmcLocks()


@dataclass
class Fleet:
    """Runs operations on many BMCs; see the module docstring for the rules it keeps."""

    credentials: CredentialSource
    retry: RetryPolicy = RetryPolicy()
    timeouts: Timeouts = Timeouts()
    confirm: ConfirmPolicy = ConfirmPolicy()
    max_parallel: int = DEFAULT_MAX_PARALLEL
    privilege: int = wire.PRIVILEGE_ADMIN
    session_factory: Callable[..., LanSession] = LanSession
    sleep: Callable[[float], None] = time.sleep
    locks: BmcLocks = field(default_factory=lambda: PROCESS_BMC_LOCKS)
    _working_login: dict[tuple[str, int], int] = field(default_factory=dict, init=False, repr=False)

    def run(self, targets: Iterable[BmcTarget], operation: Callable[[BmcClient], T], *,
            on_result: Callable[[NodeResult[T]], None] | None = None) -> list[NodeResult[T]]:
        """`operation` on every target's BMC; results in target order.

        Targets sharing an address (a misconfigured inventory, or one BMC serving several
        nodes) are run one after the other by the same worker.
        """
        targets = list(targets)
        by_bmc: dict[tuple[str, int], list[tuple[int, BmcTarget]]] = {}
        for position, target in enumerate(targets):
            by_bmc.setdefault((target.address, target.port), []).append((position, target))
        results: dict[int, NodeResult[T]] = {}

        def run_bmc(group: list[tuple[int, BmcTarget]]) -> None:
            for position, target in group:
                result = self._run_one(target, operation)
                results[position] = result
                if on_result is not None:
                    on_result(result)

        workers = max(1, min(self.max_parallel, len(by_bmc)))
        if workers == 1:
            for group in by_bmc.values():
                run_bmc(group)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="rackform-bmc") as pool:
                for future in [pool.submit(run_bmc, group) for group in by_bmc.values()]:
                    future.result()
        return [results[position] for position in range(len(targets))]

    def run_steps(self, targets: Iterable[BmcTarget], operation_steps: Callable[[BmcClient], loop.Steps], *,
                  on_result: Callable[[NodeResult[T]], None] | None = None) -> list[NodeResult[T]]:
        """`operation_steps` (a generator of the client's steps) on every target's BMC, every
        BMC at once in this thread; results in target order. Same rules as `run`. Needs
        sessions that run as steps (LanSession's); pauses are the loop's own timers, unless
        the fleet was given a `sleep` of its own (tests), which is then called in place.
        """
        targets = list(targets)
        by_bmc: dict[tuple[str, int], list[tuple[int, BmcTarget]]] = {}
        for position, target in enumerate(targets):
            by_bmc.setdefault((target.address, target.port), []).append((position, target))
        results: dict[int, NodeResult[T]] = {}

        def run_bmc(group: list[tuple[int, BmcTarget]]):
            for position, target in group:
                result = yield from self._run_one_steps(target, operation_steps)
                results[position] = result
                if on_result is not None:
                    on_result(result)

        loop.run_all((run_bmc(group) for group in by_bmc.values()), limit=max(1, self.max_parallel))
        return [results[position] for position in range(len(targets))]

    def _sessions_run_as_steps(self) -> bool:
        return isinstance(self.session_factory, type) and issubclass(self.session_factory, LanSession)

    def _run_as_steps_or_threads(self, targets: Iterable[BmcTarget], operation_steps, operation, **options):
        if self._sessions_run_as_steps():
            return self.run_steps(targets, operation_steps, **options)
        return self.run(targets, operation, **options)

    def _pause_steps(self, seconds: float):
        """A pause inside the loop (the other BMCs carry on), or the fleet's own `sleep`."""
        if self.sleep is time.sleep:
            if seconds > 0:
                yield None, time.monotonic() + seconds
        else:
            self.sleep(seconds)

    def _run_one(self, target: BmcTarget, operation: Callable[[BmcClient], T]) -> NodeResult[T]:
        return _policy.run_blocking(self._run_one_steps(target, lambda client: _policy.called(
            lambda: operation(client)), blocking=True))

    def _run_one_steps(self, target: BmcTarget, operation_steps, *, blocking: bool = False):
        """One target, start to end: lock, logins, retries, the operation; a NodeResult.

        With `blocking`, everything blocks (a thread per BMC runs it): the lock is waited
        for with `with`, and pauses call `self.sleep`."""
        started = time.monotonic()

        def failed(reason: Reason, message: str, attempts: int) -> NodeResult[T]:
            log.info("%s (%s): %s: %s", target.node, target.address, reason, message)
            return NodeResult(target.node, target.address, reason=reason, error=message, attempts=attempts,
                              elapsed_s=time.monotonic() - started)

        try:
            credentials = self.credentials(target.node)
        except Exception as error:  # noqa: BLE001 - a store's own error, reported per node
            return failed(Reason.NO_CREDENTIALS, f"no BMC login for {target.node}: {_safe_text(error)}", 0)
        def kind_of(error: Exception) -> str | None:
            if not isinstance(error, IpmiError) or not error.retryable:
                return None
            return _policy.RETRY_AUTH if error.reason is Reason.AUTH_REJECTED else _policy.RETRY

        retried = []

        def note_retry(tries: int, pause: float, error: Exception) -> None:
            retried.append(tries)
            log.debug("%s (%s): %s; retry %d in %.1f s", target.node, target.address, error, tries + 1, pause)

        pause_steps = _policy.blocking_pauses(self.sleep) if blocking else self._pause_steps
        try:
            lock = self.locks(target.address, target.port)
            if blocking or not hasattr(lock, "try_acquire"):
                lock.__enter__()
            else:
                yield from _acquire_steps(lock)
            try:
                value = yield from _policy.retrying_steps(
                    lambda: self._in_session_steps(target, credentials, operation_steps, blocking), self.retry,
                    kind_of, pause_steps, on_retry=note_retry)
            finally:
                lock.__exit__(None, None, None)
        except _policy.GaveUp as gave_up:
            error = gave_up.error
            if isinstance(error, IpmiError):
                return failed(error.reason, error.message, gave_up.tries)
            return failed(Reason.PROTOCOL, f"{type(error).__name__}: {_safe_text(error)}", gave_up.tries)
        except prelogin.BmcSilent as busy:  # the lock: another process has held this BMC too long
            return failed(Reason.TIMEOUT, f"{target.address}: {busy}", 0)
        return NodeResult(target.node, target.address, value=value, attempts=len(retried) + 1,
                          elapsed_s=time.monotonic() - started)

    def _in_session_steps(self, target: BmcTarget, credentials: Credentials, operation_steps, blocking: bool):
        """Log in (trying each of the node's passwords in turn), run the operation, log out.

        The password that worked is tried first next time, so a BMC is not sent a password
        it rejected on every run.
        """
        logins = credentials.logins()
        key = (target.address, target.port)
        first = self._working_login.get(key, 0) % len(logins)
        for tried, index in enumerate([*range(first, len(logins)), *range(first)], start=1):
            session = self.session_factory(target.address, logins[index], port=target.port,
                                           privilege=self.privilege, timeouts=self.timeouts)
            try:
                if blocking:
                    session.open()
                else:
                    yield from session.open_steps()
            except IpmiError as error:
                if error.reason is Reason.AUTH_REJECTED and tried < len(logins):
                    continue
                raise
            self._working_login[key] = index
            try:
                return (yield from operation_steps(BmcClient(session, self.confirm, self.sleep)))
            finally:
                if blocking:
                    session.close()
                else:
                    yield from session.close_steps()
        raise AssertionError("unreachable: the last login returns or raises")

    # --- the operations rackform runs across a fleet --------------------------------------------

    def power_status(self, targets: Iterable[BmcTarget], **options) -> list[NodeResult[str]]:
        return self._run_as_steps_or_threads(targets, lambda client: client.power_state_steps(),
                                             lambda client: client.power_state(), **options)

    def power(self, targets: Iterable[BmcTarget], action: str, **options) -> list[NodeResult[PowerChange]]:
        """on / off / soft / cycle / reset, each confirmed by reading the state back."""
        if action not in POWER_ACTIONS:  # a caller's mistake: say so once, not once per node
            raise ValueError(f"unknown power action {action!r} (expected one of {', '.join(POWER_ACTIONS)})")
        return self._run_as_steps_or_threads(targets, lambda client: client.set_power_steps(action, self._pause_steps),
                                             lambda client: client.set_power(action), **options)

    def set_boot_device(self, targets: Iterable[BmcTarget], device: str, persistent: bool = False,
                        **options) -> list[NodeResult[None]]:
        if device not in BOOT_DEVICES:
            raise ValueError(f"unknown boot device {device!r} (expected one of {', '.join(BOOT_DEVICES)})")
        return self.run(targets, lambda client: client.set_boot_device(device, persistent), **options)


def _acquire_steps(lock):
    """The BMC's lock, polled without blocking the loop (another process or fleet may hold it)."""
    deadline = time.monotonic() + lock.timeout_s
    while not lock.try_acquire():
        if time.monotonic() > deadline:
            raise lock.busy()
        yield None, time.monotonic() + _policy.LOCK_POLL_S


def failed_percentage(results: list[NodeResult]) -> float:
    """Share of nodes that failed, 0-100 (compare with a site's max_fail_percentage)."""
    return 100.0 * sum(not r.ok for r in results) / len(results) if results else 0.0


def _safe_text(error: BaseException) -> str:
    """An exception's text, cut short: it goes into per-node results and logs."""
    text = str(error) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
