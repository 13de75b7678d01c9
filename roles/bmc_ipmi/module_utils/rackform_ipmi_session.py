# -*- coding: utf-8 -*-
"""Logging in to a BMC with pyghmi, and what to do when that fails.

- `classify` sorts pyghmi's errors into three kinds: the BMC rejected the
  credentials (`BmcAuthRejected`), refused every cipher suite we propose
  (`BmcInsecure`), or did not answer in time (`BmcSilent`).
- `login` opens one RMCP+ session and checks that it really is IPMI 2.0 with
  suite 17 or 3 (pyghmi itself would fall back to IPMI 1.5 on an old BMC).
- `first_login` tries credentials in order and says which one worked.
- `with_retries` re-runs an attempt with exponential backoff, a bounded number
  of times, retrying silence more often than rejections (each rejected login
  counts towards a BMC's lockout threshold).
- `bmc_lock` keeps a second rackform process on this controller from talking to
  the same BMC at once: one command in flight per BMC.

Passwords are only ever handed to pyghmi in memory; nothing here formats one into
a message. pyghmi is imported lazily so that the unit tests can run without it.
"""

from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import re
import threading
import time

from ansible.module_utils.rackform_ipmi_wire import BmcInsecure, BmcSilent

IPMI15_PASSWORD_BYTES = 16
"""IPMI 1.5 stores 16 bytes of a password; IPMI 2.0 allows 20. Some BMCs (OpenIPMI's
ipmi_sim among them) keep only the first 16 of a 20-byte password they accept."""

SUITE_BY_INTEGRITY = {256: 17, 1: 3}
"""pyghmi's session.integrityalgo after login: 256 = SHA-256 (suite 17), 1 = SHA-1 (suite 3)."""

_AUTH_ERRORS = re.compile(r"incorrect password|unauthorized name|invalid integrity check value|"
                          r"unauthorized role|invalid username", re.IGNORECASE)
_CIPHER_ERRORS = re.compile(r"cipher suite match|invalid (authentication|integrity|confidentiality) algorithm|"
                            r"no matching integrity|md5 required", re.IGNORECASE)


class BmcAuthRejected(Exception):
    """The BMC rejected the user name or password."""


def classify(error, address):
    """The exception to raise for an error pyghmi raised while talking to `address`."""
    text = str(getattr(error, "args", [None])[0] or "").strip()
    if _AUTH_ERRORS.search(text):
        return BmcAuthRejected("%s: %s" % (address, text))
    if _CIPHER_ERRORS.search(text):
        return BmcInsecure("%s: the BMC accepts neither cipher suite 17 nor 3 (%s); rackform refuses suite 0 "
                           "and IPMI 1.5" % (address, text))
    reason = text or "no answer"
    return BmcSilent("%s: %s" % (address, reason))


class Credential(object):
    """A user name and password to try; `label` says which one it is, for messages."""

    __slots__ = ("user", "password", "label")

    def __init__(self, user, password, label):
        self.user = user
        self.password = password
        self.label = label

    def __repr__(self):  # never the password
        return "Credential(%r, %s)" % (self.user, self.label)


def _forget_pyghmi_login(address, port, credential):
    """Drop pyghmi's record of a login, so that the same credentials can log in again.

    pyghmi 1.6 files a login under (bmc, user, password, port, kg) as str but removes it
    as bytes: after a failed login a second Command with the same credentials gets the
    dead session back and "succeeds" without logging in. Popping it here avoids that.
    """
    from pyghmi.ipmi.private import session as pyghmi_session

    pyghmi_session.Session.initting_sessions.pop(
        (address, credential.user, credential.password, port, None), None)


def _pending_packets(pyghmi_session, address):
    handlers = pyghmi_session.Session.bmc_handlers.get(address) or {}
    return any(getattr(session, "pktqueue", None) for session in list(handlers.values()))


def patch_pyghmi_lost_wakeup():
    """Stop pyghmi 1.6 from sleeping through an answer that came back quickly.

    After sending a command pyghmi registers a waiter with its IO thread; an answer the IO
    thread read *before* that (a BMC close by answers in well under a millisecond) sets
    nobody's event, and the command waits out its retry timer (0.5 to 1 s) although the
    answer sits in the session's queue. Seen on ipmi_sim: one command in ten took 0.5-1 s.
    This `_io_wait` registers the waiter first, then returns at once when an answer for
    that BMC is already queued. Only applied to the pyghmi it was written against.
    """
    from pyghmi.ipmi.private import session as pyghmi_session

    needed = ("ioqueue", "iosockets", "selectdeadline", "myself", "_io_wait", "Session")
    if getattr(pyghmi_session, "_rackform_patched", False) or not all(hasattr(pyghmi_session, n) for n in needed):
        return

    def _io_wait(timeout, myaddr=None, evq=None):
        event = threading.Event()
        if evq is not None:
            evq.append(event)
        deadline = timeout + time.monotonic()
        pyghmi_session.ioqueue.append((deadline, event, myaddr))
        if deadline < pyghmi_session.selectdeadline:  # wake the IO thread's select to see the new deadline
            wakeup = pyghmi_session.iosockets[0]
            wakeup.sendto(b"\x01", (pyghmi_session.myself, wakeup.getsockname()[1]))
        if myaddr is not None and _pending_packets(pyghmi_session, myaddr):
            return
        event.wait()

    pyghmi_session._io_wait = _io_wait
    pyghmi_session._rackform_patched = True


def login(address, port, credential, command_factory=None):
    """An admin session to the BMC as `credential`, over RMCP+ with suite 17 or 3.

    Returns (session, cipher suite). Raises BmcAuthRejected, BmcInsecure or BmcSilent.
    """
    uses_pyghmi = command_factory is None
    if uses_pyghmi:
        from pyghmi.ipmi.command import Command as command_factory

        patch_pyghmi_lost_wakeup()
    try:
        ipmi = command_factory(bmc=address, userid=credential.user, password=credential.password, port=port)
    except Exception as error:  # pyghmi raises IpmiException, socket errors and more
        raise classify(error, address)
    finally:
        if uses_pyghmi:
            _forget_pyghmi_login(address, port, credential)
    session = getattr(ipmi, "ipmi_session", None)
    version = getattr(session, "ipmiversion", 2.0)
    if version != 2.0:
        raise BmcInsecure("%s: the session came up as IPMI %s; rackform logs in over IPMI 2.0 (lanplus) only"
                          % (address, version))
    suite = SUITE_BY_INTEGRITY.get(getattr(session, "integrityalgo", 1))
    if suite is None:
        raise BmcInsecure("%s: the session uses integrity algorithm %r, not cipher suite 17 or 3"
                          % (address, getattr(session, "integrityalgo", None)))
    return ipmi, suite


def logout(ipmi):
    """End the session: BMCs have few session slots. Errors do not matter any more."""
    try:
        ipmi.ipmi_session.logout()
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
