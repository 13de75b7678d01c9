# -*- coding: utf-8 -*-
"""Logging in to a BMC over rackform's own RMCP+ session, and what to do when that fails.

- `login` opens one session (rackform_ipmi_lan.LanSession: IPMI 2.0, suite 17 else 3, never
  anything else) and hands back the commands the module uses over it (rackform_ipmi_commands).
  The session's errors (rackform_ipmi_errors.IpmiError, one reason each) become the three
  kinds the module acts on: the BMC rejected the credentials (`BmcAuthRejected`), offers
  nothing safe (`BmcInsecure`), or did not answer in time (`BmcSilent`).
- `first_login` tries credentials in order and says which one worked.
- `with_retries` re-runs an attempt under rackform's one retry policy (rackform_ipmi_policy,
  the fleet's too), retrying silence more often than rejections (each rejected login counts
  towards a BMC's lockout threshold).
- `bmc_lock` (rackform_ipmi_policy, the fleet's too) keeps a second rackform process on this
  controller from talking to the same BMC at once: one command in flight per BMC.

Passwords are only ever handed to the session in memory; nothing here formats one into a
message. Standard library only: the module runs without pyghmi and without rackform.
"""

from __future__ import absolute_import, division, print_function

import time

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_commands import BmcCommands
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_errors import IpmiError, Reason
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_lan import LanSession, Timeouts
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_policy import (  # noqa: F401  (bmc_lock: the module's import)
    RETRY, RETRY_AUTH, GaveUp, RetryPolicy, bmc_lock, retrying)
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import BmcInsecure, BmcSilent

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
    """Run `attempt()` under rackform's one retry policy (rackform_ipmi_policy.retrying): on
    BmcSilent retry up to `retries` times, on BmcAuthRejected up to `auth_retries` times,
    waiting backoff_s, 2 x backoff_s, ... (at most max_backoff_s) between tries. BmcInsecure
    (and anything else) is never retried. The last error is raised with the number of tries
    added to its message."""
    policy = RetryPolicy(attempts=retries + 1, first_backoff_s=backoff_s, max_backoff_s=max_backoff_s, jitter=0.0,
                         auth_attempts=auth_retries + 1)
    try:
        return retrying(attempt, policy, _kind_of, sleep=sleep, on_retry=on_retry)
    except GaveUp as gave_up:
        if _kind_of(gave_up.error) is None:
            raise gave_up.error
        raise type(gave_up.error)(_after(gave_up.error, gave_up.tries))


def _kind_of(error):
    if isinstance(error, BmcAuthRejected):
        return RETRY_AUTH
    if isinstance(error, BmcSilent):
        return RETRY
    return None


def _after(error, tries):
    return "%s (gave up after %d %s)" % (error, tries, "try" if tries == 1 else "tries")
