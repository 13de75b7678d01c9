# -*- coding: utf-8 -*-
"""rackform's rules for talking to BMCs, written once for the fleet client, the CLI, the
Pulumi provider and the Ansible module (rackform.ipmi.module_utils):

- retries: `RetryPolicy` and `retrying` (bounded tries, exponential backoff with jitter, a
  separate smaller budget for rejected logins, which count towards a BMC's lockout);
- power read-back: `power_plan` (what to send for an action, given the state read first) and
  `await_power` (read the state back until it shows the expected one, within a deadline);
- one command in flight per BMC: `bmc_lock`, an flock per BMC address in a lock folder
  shared by every rackform process of the user on this machine (and by every thread: each
  holder opens the file anew, and flock locks of two open files exclude each other).

`retrying` and `await_power` block (they call `sleep`); `retrying_steps` and
`await_power_steps` are the same rules as generators (rackform_ipmi_lan's steps), which
pause through a `pause_steps(seconds)` generator function instead, so the fleet can run
many BMCs' retries and read-backs in one thread.

Standard library only: this file travels inside the Ansible module (AnsiballZ).
"""

from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import random
import re
import tempfile
import time

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import BmcSilent

POWER_ACTIONS = ("on", "off", "soft", "cycle", "reset")
CHASSIS_CONTROL_CODES = {"off": 0x00, "on": 0x01, "cycle": 0x02, "reset": 0x03, "soft": 0x05}
EXPECTED_STATE = {"on": "on", "off": "off", "soft": "off", "cycle": "on", "reset": "on"}
"""The power state each action ends in, which the read-back must show."""

LOCK_POLL_S = 0.05
DEFAULT_LOCK_TIMEOUT_S = 600.0
RETRY, RETRY_AUTH = "retry", "auth"


class RetryPolicy(object):
    """Tries per BMC and the pause before each retry: first, first x factor, ... capped, each
    stretched by up to `jitter` so a fleet does not retry in lockstep. Rejected logins get at
    most `auth_attempts` tries (default: `attempts`)."""

    __slots__ = ("attempts", "auth_attempts", "first_backoff_s", "factor", "max_backoff_s", "jitter")

    def __init__(self, attempts=3, first_backoff_s=1.0, factor=2.0, max_backoff_s=10.0, jitter=0.2,
                 auth_attempts=None):
        if attempts < 1:
            raise ValueError("a retry policy needs at least one attempt")
        self.attempts = attempts
        self.auth_attempts = attempts if auth_attempts is None else max(1, min(auth_attempts, attempts))
        self.first_backoff_s = first_backoff_s
        self.factor = factor
        self.max_backoff_s = max_backoff_s
        self.jitter = jitter

    def __repr__(self):
        return "RetryPolicy(%s)" % ", ".join("%s=%r" % (name, getattr(self, name)) for name in self.__slots__)

    def __eq__(self, other):
        return isinstance(other, RetryPolicy) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, name) for name in self.__slots__))

    def backoff_s(self, failed_attempts, rng=None):
        base = min(self.first_backoff_s * self.factor ** (failed_attempts - 1), self.max_backoff_s)
        return base * (1 + self.jitter * (rng or random).random())


class GaveUp(Exception):
    """`retrying` stopped: `error` is the last failure, `tries` how many were made."""

    def __init__(self, error, tries):
        Exception.__init__(self, str(error))
        self.error = error
        self.tries = tries


def retrying(attempt, policy, kind_of, sleep=time.sleep, on_retry=None):
    """Return `attempt()`; when it raises, `kind_of(error)` says RETRY, RETRY_AUTH or None
    (never retried). Raises GaveUp(last error, tries) when the budget is spent or the error
    is not retried; `on_retry(tries, pause_s, error)` is called before each pause."""
    return run_blocking(retrying_steps(lambda: called(attempt), policy, kind_of, blocking_pauses(sleep), on_retry))


def retrying_steps(attempt_steps, policy, kind_of, pause_steps, on_retry=None):
    """`retrying` as steps: `attempt_steps()` is a generator, each pause `pause_steps(seconds)`."""
    tries = auth_tries = 0
    while True:
        tries += 1
        try:
            return (yield from attempt_steps())
        except Exception as error:  # each caller's own error types, sorted by kind_of
            kind = kind_of(error)
            if kind is None:
                raise GaveUp(error, tries)
            if kind == RETRY_AUTH:
                auth_tries += 1
            if tries >= policy.attempts or (kind == RETRY_AUTH and auth_tries >= policy.auth_attempts):
                raise GaveUp(error, tries)
            pause = policy.backoff_s(tries)
            if on_retry is not None:
                on_retry(tries, pause, error)
            yield from pause_steps(pause)


def called(function):
    """A generator that calls `function` (blocking) and returns its value: a blocking step."""
    return function()
    yield  # noqa: unreachable - makes this a generator


def blocking_pauses(sleep):
    def pause_steps(seconds):
        sleep(seconds)
        return
        yield  # noqa: unreachable - makes this a generator
    return pause_steps


def run_blocking(steps):
    """Run steps that only pause through `_sleeping` or call blocking code (no socket waits)."""
    try:
        while True:
            next(steps)
            raise RuntimeError("a blocking run was asked to wait on a socket")
    except StopIteration as done:
        return done.value


def power_plan(action, before):
    """(what to send, or None when nothing is needed; the state the read-back must show).

    `on`, `off`, `soft` converge: nothing is sent when the chassis already reads so. `cycle`
    and `reset` of a chassis that is off power it on (IPMI leaves an off chassis off)."""
    expected = EXPECTED_STATE[action]
    if action in ("on", "off", "soft") and before == expected:
        return None, expected
    return ("on" if action in ("cycle", "reset") and before == "off" else action), expected


def await_power(read_state, expected, deadline_s, poll_interval_s, first_poll_s=0.0, sleep=time.sleep,
                clock=time.monotonic):
    """Read the power state (after `first_poll_s`, then every `poll_interval_s`: BMCs crash
    when hammered) until it is `expected` or `deadline_s` passed. Returns (last state read,
    seconds waited, whether it showed `expected`)."""
    return run_blocking(await_power_steps(lambda: called(read_state), expected, deadline_s, poll_interval_s,
                                          first_poll_s, blocking_pauses(sleep), clock))


def await_power_steps(read_state_steps, expected, deadline_s, poll_interval_s, first_poll_s, pause_steps,
                      clock=time.monotonic):
    """`await_power` as steps: `read_state_steps()` is a generator, each pause `pause_steps(seconds)`."""
    started = clock()
    yield from pause_steps(first_poll_s)
    state = yield from read_state_steps()
    while state != expected:
        waited = clock() - started
        if waited >= deadline_s:
            return state, waited, False
        yield from pause_steps(min(poll_interval_s, max(deadline_s - waited, 0.0)))
        state = yield from read_state_steps()
    return state, clock() - started, True


def default_lock_dir():
    return os.path.join(tempfile.gettempdir(), "rackform-bmc-locks-%d" % os.geteuid())


class BmcBusy(BmcSilent):
    """Another rackform process (or thread) has held the BMC's lock for longer than allowed."""


class bmc_lock(object):
    """An exclusive lock per BMC address on this controller (flock on a file in `lock_dir`).

    `with` waits for it (polling, up to `timeout_s`); `try_acquire()` takes it or says it is
    held, without waiting, for callers that wait in their own way (the fleet's steps)."""

    def __init__(self, lock_dir, address, timeout_s=DEFAULT_LOCK_TIMEOUT_S, port=None):
        name = address if port in (None, 623) else "%s-%d" % (address, port)
        self.path = os.path.join(lock_dir, "bmc-%s.lock" % re.sub(r"[^0-9A-Za-z.-]", "_", name))
        self.lock_dir = lock_dir
        self.timeout_s = timeout_s
        self.handle = None  # a file descriptor while open

    def __enter__(self):
        deadline = time.monotonic() + self.timeout_s
        while not self.try_acquire():
            if time.monotonic() > deadline:
                raise self.busy()
            time.sleep(LOCK_POLL_S)
        return self

    def try_acquire(self):
        """Take the lock if it is free: True; False while another holder has it."""
        if self.handle is None:
            # A descriptor of its own per holder: flock locks of two open files exclude each other.
            try:
                self.handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            except OSError as error:
                if error.errno != errno.ENOENT:
                    raise
                try:  # the first lock of this user on this machine: make the folder
                    os.makedirs(self.lock_dir, mode=0o700)
                except OSError as error:
                    if error.errno != errno.EEXIST:
                        raise
                self.handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except (IOError, OSError) as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise self.busy()
            return False

    def busy(self):
        """The error for a lock still held after `timeout_s` (the file is closed)."""
        self.release()
        return BmcBusy("another rackform process has been talking to this BMC for over %.0f s "
                       "(lock %s)" % (self.timeout_s, self.path))

    def release(self):
        if self.handle is not None:
            os.close(self.handle)  # closing the descriptor drops its flock
            self.handle = None

    def __exit__(self, *exc_info):
        self.release()
        return False


class BmcLocks(object):
    """`locks(address, port)`: the lock of one BMC (bmc_lock in `lock_dir`), as a context manager."""

    def __init__(self, lock_dir=None, timeout_s=DEFAULT_LOCK_TIMEOUT_S):
        self.lock_dir = lock_dir or default_lock_dir()
        self.timeout_s = timeout_s

    def __call__(self, address, port=623):
        return bmc_lock(self.lock_dir, address, self.timeout_s, port)
