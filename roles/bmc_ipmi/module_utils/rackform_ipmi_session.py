# -*- coding: utf-8 -*-
"""Logging in to a BMC over rackform's own RMCP+ session, and what to do when that fails.

- `login` opens one session (rackform_ipmi_lan.LanSession: IPMI 2.0, suite 17 else 3, never
  anything else) and hands back the commands the module uses over it (rackform_ipmi_commands).
  The session's errors (rackform_ipmi_errors.IpmiError, one reason each) become the three
  kinds the module acts on: the BMC rejected the credentials (`BmcAuthRejected`), offers
  nothing safe (`BmcInsecure`), or did not answer in time (`BmcSilent`).
- `first_login` tries credentials in order and says which one worked.
- `with_retries` re-runs an attempt with exponential backoff, a bounded number of times,
  retrying silence more often than rejections (each rejected login counts towards a BMC's
  lockout threshold).
- `bmc_lock` keeps a second rackform process on this controller from talking to the same
  BMC at once: one command in flight per BMC.

Passwords are only ever handed to the session in memory; nothing here formats one into a
message. Standard library only: the module runs without pyghmi and without rackform.
"""

from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import re
import time

from ansible.module_utils.rackform_ipmi_commands import BmcCommands
from ansible.module_utils.rackform_ipmi_errors import IpmiError, Reason
from ansible.module_utils.rackform_ipmi_lan import LanSession, Timeouts
from ansible.module_utils.rackform_ipmi_wire import BmcInsecure, BmcSilent

IPMI15_PASSWORD_BYTES = 16
"""IPMI 1.5 stores 16 bytes of a password; IPMI 2.0 allows 20. Some BMCs (OpenIPMI's
ipmi_sim among them) keep only the first 16 of a 20-byte password they accept."""


class BmcAuthRejected(Exception):
    """The BMC rejected the user name or password."""


def classify(error):
    """The module's exception for a session error (the message names the BMC already)."""
    if error.reason is Reason.AUTH_REJECTED:
        return BmcAuthRejected(error.message)
    if error.reason is Reason.SUITE_REFUSED:
        return BmcInsecure(error.message)
    return BmcSilent(error.message)


class Credential(object):
    """A user name and password to try; `label` says which one it is, for messages."""

    __slots__ = ("user", "password", "label")

    def __init__(self, user, password, label):
        self.user = user
        self.password = password
        self.label = label

    def __repr__(self):  # never the password
        return "Credential(%r, %s)" % (self.user, self.label)


def login(address, port, credential, timeouts=Timeouts(), kg=None):
    """An administrator session to the BMC as `credential`, over RMCP+ with suite 17 or 3.

    Returns (BmcCommands over the session, cipher suite). Raises BmcAuthRejected,
    BmcInsecure or BmcSilent.
    """
    session = LanSession(address, credential, port=port, timeouts=timeouts, kg=kg)
    try:
        session.open()
    except IpmiError as error:
        raise classify(error)
    return BmcCommands(session), session.suite.number


def logout(ipmi):
    """End the session: BMCs have few session slots. Errors do not matter any more."""
    try:
        ipmi.ipmi_session.close()
    except Exception:  # a BMC that went away takes its session with it
        pass


def credential_variants(credential):
    """The credential, then its first 16 bytes where it is longer (BMCs that keep only 16)."""
    yield credential, len(credential.password.encode("utf-8"))
    if len(credential.password.encode("utf-8")) > IPMI15_PASSWORD_BYTES:
        short = credential.password.encode("utf-8")[:IPMI15_PASSWORD_BYTES].decode("utf-8", "ignore")
        yield Credential(credential.user, short, credential.label), IPMI15_PASSWORD_BYTES


def first_login(address, port, credentials, login_function=login):
    """Log in with the first credential the BMC accepts.

    Returns (session, cipher suite, credential, password bytes the BMC used). A BMC
    that keeps only 16 bytes of a longer password is logged in to with those 16.
    Raises BmcAuthRejected when every credential was rejected; BmcSilent and
    BmcInsecure at once.
    """
    tried = []
    for credential in credentials:
        for variant, password_bytes in credential_variants(credential):
            try:
                ipmi, suite = login_function(address, port, variant)
            except BmcAuthRejected:
                continue
            return ipmi, suite, credential, password_bytes
        tried.append(credential.label)
    raise BmcAuthRejected("%s: the BMC rejected every credential rackform has for it (%s); if its password was "
                          "changed outside rackform, add that password to the site vault as a previous one or "
                          "reset the BMC's users" % (address, ", ".join(tried) or "none"))


def with_retries(attempt, retries, backoff_s, max_backoff_s, auth_retries=1, sleep=time.sleep, on_retry=None):
    """Run `attempt()`; on BmcSilent retry up to `retries` times, on BmcAuthRejected up to
    `auth_retries` times, waiting backoff_s, 2 x backoff_s, ... (at most max_backoff_s)
    between tries. BmcInsecure is never retried. The last error is raised with the
    number of tries added to its message."""
    tries = 0
    silent_left, auth_left = retries, auth_retries
    delay = backoff_s
    while True:
        tries += 1
        try:
            return attempt()
        except BmcSilent as error:
            if silent_left <= 0:
                raise BmcSilent(_after(error, tries))
            silent_left -= 1
            last = error
        except BmcAuthRejected as error:
            if auth_left <= 0:
                raise BmcAuthRejected(_after(error, tries))
            auth_left -= 1
            last = error
        if on_retry is not None:
            on_retry(tries, delay, last)
        sleep(delay)
        delay = min(delay * 2, max_backoff_s)


def _after(error, tries):
    return "%s (gave up after %d %s)" % (error, tries, "try" if tries == 1 else "tries")


class bmc_lock(object):
    """An exclusive lock per BMC address on this controller (flock on a file in `lock_dir`).

    Ansible already runs one task at a time per host; this also keeps a second
    rackform process (another playbook, `rackform bmc status`) off the same BMC.
    """

    def __init__(self, lock_dir, address, timeout_s):
        self.path = os.path.join(lock_dir, "bmc-%s.lock" % re.sub(r"[^0-9A-Za-z.]", "_", address))
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
                    raise BmcSilent("another rackform process has been talking to this BMC for over %.0f s "
                                    "(lock %s)" % (self.timeout_s, self.path))
                time.sleep(0.05)

    def __exit__(self, *exc_info):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        return False
