# -*- coding: utf-8 -*-
"""Why a BMC could not be used: one exception type with a reason a person (and a retry loop) can act on.

Messages name the BMC's address and what happened; they never carry a password, and
nothing here formats one in (credentials are not passed to these constructors). Shared by
rackform's fleet client and its Ansible module (rackform.ipmi.module_utils).
"""

from __future__ import annotations

from enum import Enum

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import IPMI15_ONLY_REFUSAL


class Reason(str, Enum):
    """What went wrong, as shown in a per-node result (`str(reason)` is the short word)."""

    UNREACHABLE = "unreachable"
    """Nothing answered at the address (no BMC, wrong address, OOB network down)."""
    TIMEOUT = "timeout"
    """The BMC answered, then stopped answering in the middle of an exchange."""
    AUTH_REJECTED = "auth rejected"
    """The BMC does not accept this user name or password."""
    SUITE_REFUSED = "suite refused"
    """No safe cipher suite (17 or 3 over IPMI 2.0 lanplus) in common; rackform refuses the rest."""
    COMMAND_FAILED = "command failed"
    """The BMC answered a command with an error completion code."""
    NOT_CONFIRMED = "not confirmed"
    """A power change was accepted but the state read back did not follow in time."""
    PROTOCOL = "protocol error"
    """The BMC answered something that is not valid IPMI (or not what was asked)."""
    NO_CREDENTIALS = "no credentials"
    """The credential source has no login for this node."""

    def __str__(self) -> str:
        return self.value


RETRYABLE = frozenset({Reason.UNREACHABLE, Reason.TIMEOUT, Reason.AUTH_REJECTED, Reason.NOT_CONFIRMED,
                       Reason.PROTOCOL})
"""Worth another try after a pause: a BMC that is rebooting, busy or briefly unreachable
recovers. A refused cipher suite is a policy decision and a failed command a definite
answer: trying again changes neither. Auth is retried (a BMC mid password change, or
one whose session table is full, rejects for a moment) a bounded number of times only."""

BUSY_COMPLETION_CODES = frozenset({0xC0, 0xC3, 0xFF})
"""Node busy, timeout while processing, unspecified: transient, so retried like a timeout."""


class IpmiError(Exception):
    """A BMC could not do what was asked; `reason` says which kind of failure it was."""

    def __init__(self, reason: Reason, message: str, *, completion_code: int | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.completion_code = completion_code

    @property
    def retryable(self) -> bool:
        if self.reason is Reason.COMMAND_FAILED:
            return self.completion_code in BUSY_COMPLETION_CODES
        return self.reason in RETRYABLE

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def ipmi15_only(address: str) -> IpmiError:
    """The refusal of a BMC that offers no IPMI 2.0 (said before any credential is sent)."""
    return IpmiError(Reason.SUITE_REFUSED, f"{address}: {IPMI15_ONLY_REFUSAL}")
