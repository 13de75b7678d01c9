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
    tries = auth_tries = 0
    while True:
        tries += 1
        try:
            return attempt()
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
            sleep(pause)


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
    started = clock()
    sleep(first_poll_s)
    state = read_state()
    while state != expected:
        waited = clock() - started
        if waited >= deadline_s:
            return state, waited, False
        sleep(min(poll_interval_s, max(deadline_s - waited, 0.0)))
        state = read_state()
    return state, clock() - started, True


def default_lock_dir():
    return os.path.join(tempfile.gettempdir(), "rackform-bmc-locks-%d" % os.geteuid())


class BmcBusy(BmcSilent):
    """Another rackform process (or thread) has held the BMC's lock for longer than allowed."""


class bmc_lock(object):
    """An exclusive lock per BMC address on this controller (flock on a file in `lock_dir`)."""

    def __init__(self, lock_dir, address, timeout_s=DEFAULT_LOCK_TIMEOUT_S, port=None):
        name = address if port in (None, 623) else "%s-%d" % (address, port)
        self.path = os.path.join(lock_dir, "bmc-%s.lock" % re.sub(r"[^0-9A-Za-z.-]", "_", name))
        self.lock_dir = lock_dir
        self.timeout_s = timeout_s
        self.handle = None

    def __enter__(self):
        try:
            os.makedirs(self.lock_dir, mode=0o700)
        except OSError as error:
            if error.errno != errno.EEXIST:
                raise
        self.handle = open(self.path, "a")
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except (IOError, OSError) as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    self.handle.close()
                    raise BmcBusy("another rackform process has been talking to this BMC for over %.0f s "
                                  "(lock %s)" % (self.timeout_s, self.path))
                time.sleep(LOCK_POLL_S)

    def __exit__(self, *exc_info):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        return False


class BmcLocks(object):
    """`locks(address, port)`: the lock of one BMC (bmc_lock in `lock_dir`), as a context manager."""

    def __init__(self, lock_dir=None, timeout_s=DEFAULT_LOCK_TIMEOUT_S):
        self.lock_dir = lock_dir or default_lock_dir()
        self.timeout_s = timeout_s

    def __call__(self, address, port=623):
        return bmc_lock(self.lock_dir, address, self.timeout_s, port)
