# -*- coding: utf-8 -*-
"""One RMCP+ session to one BMC over its own UDP socket: log in, send commands, log out.

Why not pyghmi's session: pyghmi 1.6 runs every session of a process through one shared
I/O thread and event loop; driven from 200 threads it took 1.5-2.4 s for a fleet power
status here (its async mode, 23-32 s) where FreeIPMI's ipmipower takes 0.4-0.9 s, and it
quietly falls back to an IPMI 1.5 MD5 login when a BMC does not offer IPMI 2.0. This
session is blocking and owns its socket (as ipmipower keeps one socket per host), so a
thread per BMC runs in parallel with nothing shared; pyghmi's command layer (sensors,
FRU, firmware, LAN settings) runs on top of it through `raw_command` (rackform.ipmi.client).

The login: Get Channel Authentication Capabilities (sessionless; refuses a BMC that lacks
IPMI 2.0 before any credential leaves), then Open Session with cipher suite 17, else 3
(nothing else is proposed, and an answer with other algorithms is refused), RAKP 1-4
(a wrong password shows as a RAKP2 code that does not verify), Set Session Privilege
Level. One request is in flight at a time; `close()` sends Close Session, so BMCs with
small session tables (ipmi_sim: 10 per user) are not left full of idle sessions.

Every step that waits on the BMC is written once, as a generator (`open_steps`,
`command_steps`, `close_steps` ...): it sends, then yields `(socket, deadline)` and is
sent the datagram that arrived on that socket, or None once the deadline (time.monotonic)
passed, or has the OSError of a receive thrown in. The blocking methods (`open`,
`command`, `close` ...) run those generators on the session's own socket (`run_steps`);
rackform's fleet runs the generators of many sessions in one thread (rackform.ipmi.loop),
as ipmipower polls all its sockets at once, instead of a thread per BMC.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_errors import (
    IpmiError, Reason, ipmi15_only)
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_rmcp import (
    CipherSuite, IpmiResponse, NAME_ONLY_LOOKUP, OpenSessionResponse, PAYLOAD_IPMI,
    PAYLOAD_OPEN_SESSION_REQUEST, PAYLOAD_OPEN_SESSION_RESPONSE, PAYLOAD_RAKP1, PAYLOAD_RAKP2, PAYLOAD_RAKP3,
    PAYLOAD_RAKP4, PRIVILEGE_ADMIN, RMCP_PLUS_STATUS, SAFE_SUITES, SUITE_MISMATCH_STATUSES, SessionKeys,
    WireError, ipmi_request, open_session_request, parse_ipmi_response, parse_open_session_response,
    parse_packet, parse_rakp2, parse_rakp4, rakp1, rakp2_auth_code, rakp3, rakp3_auth_code,
    rakp4_integrity_check, rmcp_plus_packet, session_integrity_key)
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import (
    AuthCapabilities, CMD_GET_CHANNEL_AUTH_CAPABILITIES, IPMI15_ONLY_COMPLETION_CODE,
    auth_capabilities_request, parse_auth_capabilities, response_data)

log = logging.getLogger("rackform.ipmi.session")  # the name rackform's logging setup knows

IPMI_PORT = 623
SET_SESSION_PRIVILEGE = (0x06, 0x3B)
CLOSE_SESSION = (0x06, 0x3C)
RECEIVE_BYTES = 1024
CLOSE_WAIT_S = 0.5
UNREACHABLE_ERRNOS = frozenset({errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN})

DEFAULT_REPLY_S = 1.0
DEFAULT_RESENDS = 2
SEQUENCE_WINDOW = 16
"""A BMC's packets may arrive out of order by this many (IPMI 2.0 section 6.12.13); a sequence
number seen before, 0, or older than the window is a replay and is dropped."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long to wait for each answer, and how often to ask again before giving up."""

    reply_s: float = DEFAULT_REPLY_S
    """Wait for one reply before sending the request again."""
    resends: int = DEFAULT_RESENDS
    """Extra sends of a request that got no reply (so a silent BMC costs reply_s x (1 + resends))."""


class LanSession:
    """An IPMI 2.0 (lanplus) session with one BMC; use as a context manager, or open()/close().

    Not thread safe by design: one BMC, one caller, one request in flight.
    """

    ipmiversion = 2.0  # read by pyghmi's command layer

    def __init__(self, address: str, credentials, *, port: int = IPMI_PORT,
                 privilege: int = PRIVILEGE_ADMIN, timeouts: Timeouts = Timeouts(), kg: bytes | None = None):
        self.address = address
        self.port = port
        self.user = credentials.user.encode()
        self._password = credentials.password.encode()
        self._kg = kg or None
        """The BMC key K_g (section 13.31): keys the session instead of the password where a BMC has one."""
        self.privilege = privilege
        self.timeouts = timeouts
        self.suite: CipherSuite | None = None
        self.capabilities: AuthCapabilities | None = None
        self._socket: socket.socket | None = None
        self._keys: SessionKeys | None = None
        self._console_session_id = 0
        self._bmc_session_id = 0
        self._session_sequence = 0
        self._inbound_highest = 0
        self._inbound_seen: set[int] = set()
        self._request_sequence = 0
        self._tag = 0
        self._answered = False  # anything at all came back: silence after that is a timeout

    def __repr__(self) -> str:
        return f"LanSession({self.address}:{self.port}, user={self.user.decode(errors='replace')!r})"

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> LanSession:
        self.open()
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        return self._keys is not None

    def open(self) -> None:
        """Log in (suite 17, else 3) at the requested privilege; IpmiError says why not."""
        self.run_steps(self.open_steps())

    def open_steps(self):
        """`open`, as steps (see the module docstring)."""
        self._connect()
        try:
            self.capabilities = yield from self.probe_steps()
            if not self.capabilities.ipmi20:
                raise ipmi15_only(self.address)
            yield from self._login_steps()
            yield from self.command_steps(*SET_SESSION_PRIVILEGE, bytes((self.privilege,)))
        except BaseException:
            self._drop()
            raise
        log.debug("%s: session open (cipher suite %d)", self.address, self.suite.number)

    def close(self) -> None:
        """Log out and release the socket.

        The Close Session reply is awaited (briefly, without resending) so that the next
        session to this BMC never overlaps this one's last request; a BMC that is gone
        drops the session by itself on its idle timeout.
        """
        self.run_steps(self.close_steps())

    def close_steps(self):
        """`close`, as steps: whatever arrives first (or nothing, or an error) ends the wait."""
        if self._keys is not None and self._socket is not None:
            try:
                request = self._next_request(*CLOSE_SESSION, struct.pack("<I", self._bmc_session_id))
                self._socket.send(self._seal(request))
                yield self._socket, time.monotonic() + min(self.timeouts.reply_s, CLOSE_WAIT_S)
            except OSError:
                pass
        self._drop()

    def _connect(self) -> None:
        self._drop()
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_DGRAM)
        try:
            # connect(): only this BMC's datagrams arrive, and ICMP errors surface on recv.
            self._socket.connect((self.address, self.port))
        except OSError as error:
            self._drop()
            raise IpmiError(Reason.UNREACHABLE, f"cannot reach {self.address}: {error.strerror or error}") from None

    def _drop(self) -> None:
        if self._socket is not None:
            self._socket.close()
        self._socket = None
        self._keys = None

    # --- sessionless ---------------------------------------------------------------------------

    def probe(self) -> AuthCapabilities:
        """Get Channel Authentication Capabilities: is a BMC there, and does it speak IPMI 2.0?"""
        return self.run_steps(self.probe_steps())

    def probe_steps(self):
        """`probe`, as steps."""
        if self._socket is None:
            self._connect()
        command = CMD_GET_CHANNEL_AUTH_CAPABILITIES
        datagram = auth_capabilities_request(self.privilege)
        code, data = yield from self._exchange(lambda: datagram, lambda reply: response_data(reply, command),
                                               "probe")
        if code == IPMI15_ONLY_COMPLETION_CODE:
            raise ipmi15_only(self.address)
        if code:
            raise IpmiError(Reason.COMMAND_FAILED, f"{self.address} answered Get Channel Authentication "
                                                   f"Capabilities with completion code {code:#04x}",
                            completion_code=code)
        try:
            return parse_auth_capabilities(data)
        except ValueError as error:
            raise IpmiError(Reason.PROTOCOL, f"{self.address}: {error}") from None

    # --- login ---------------------------------------------------------------------------------

    def _login_steps(self):
        refusals = []
        for suite in SAFE_SUITES:
            opened = yield from self._open_session_steps(suite)
            if isinstance(opened, str):
                refusals.append(f"suite {suite.number}: {opened}")
                continue
            self.suite = suite
            yield from self._rakp_steps(suite, opened)
            return
        raise IpmiError(Reason.SUITE_REFUSED,
                        f"{self.address} accepts neither cipher suite 17 nor 3 ({'; '.join(refusals)}); "
                        f"rackform refuses the others (suite 0 lets anyone in) and IPMI 1.5")

    def _open_session_steps(self, suite: CipherSuite):
        """The BMC's answer to Open Session for `suite`, or why it refused the suite."""
        self._tag = (self._tag + 1) & 0xFF
        self._console_session_id = int.from_bytes(os.urandom(4), "little") | 1  # never 0 (sessionless)
        tag, console = self._tag, self._console_session_id
        payload = open_session_request(tag, console, suite)
        datagram = rmcp_plus_packet(PAYLOAD_OPEN_SESSION_REQUEST, payload)

        def match(reply: bytes) -> OpenSessionResponse | None:
            packet = parse_packet(reply)
            if packet.payload_type != PAYLOAD_OPEN_SESSION_RESPONSE:
                return None
            response = parse_open_session_response(packet.payload)
            return response if response.tag == tag else None

        response = yield from self._exchange(lambda: datagram, match, "open session")
        if response.status in SUITE_MISMATCH_STATUSES:
            return RMCP_PLUS_STATUS[response.status]
        if response.status:
            raise IpmiError(Reason.COMMAND_FAILED, f"{self.address} refused a session: "
                                                   f"{RMCP_PLUS_STATUS.get(response.status, hex(response.status))}")
        if response.console_session_id != console:
            raise IpmiError(Reason.PROTOCOL, f"{self.address} answered for another session")
        wanted = (suite.authentication, suite.integrity, suite.confidentiality)
        if response.algorithms != wanted:  # a BMC that "accepts" by picking weaker algorithms
            return f"the BMC answered with algorithms {response.algorithms}, not {wanted}"
        return response

    def _rakp_steps(self, suite: CipherSuite, opened: OpenSessionResponse):
        role = NAME_ONLY_LOOKUP | self.privilege
        console_random = os.urandom(16)
        bmc_session = opened.bmc_session_id
        self._tag = (self._tag + 1) & 0xFF
        tag = self._tag
        rakp1_packet = rmcp_plus_packet(PAYLOAD_RAKP1, rakp1(tag, bmc_session, console_random, role, self.user))
        # RAKP messages are not resent: a BMC that saw RAKP1 twice answers with a new random
        # number, so a lost reply restarts the login (one more try at the fleet level).
        rakp2 = yield from self._exchange(lambda: rakp1_packet, self._rakp_reply(PAYLOAD_RAKP2, parse_rakp2, tag),
                               "RAKP 1/2", resends=0)
        if rakp2.status:
            raise self._rakp_refusal(rakp2.status, "RAKP2")
        expected = rakp2_auth_code(suite, self._password, self._console_session_id, bmc_session,
                                        console_random, rakp2.bmc_random, rakp2.bmc_guid, role, self.user)
        if not _same(expected, rakp2.auth_code):
            raise IpmiError(Reason.AUTH_REJECTED,
                            f"{self.address} rejected the password of user {self.user.decode(errors='replace')!r}")
        sik = session_integrity_key(suite, self._kg or self._password, console_random, rakp2.bmc_random, role,
                                    self.user)
        self._tag = (self._tag + 1) & 0xFF
        tag = self._tag
        auth = rakp3_auth_code(suite, self._password, rakp2.bmc_random, self._console_session_id, role,
                                    self.user)
        rakp3_packet = rmcp_plus_packet(PAYLOAD_RAKP3, rakp3(tag, bmc_session, auth))
        rakp4 = yield from self._exchange(lambda: rakp3_packet, self._rakp_reply(PAYLOAD_RAKP4, parse_rakp4, tag),
                               "RAKP 3/4", resends=0)
        if rakp4.status:
            raise self._rakp_refusal(rakp4.status, "RAKP4")
        check = rakp4_integrity_check(suite, sik, console_random, bmc_session, rakp2.bmc_guid)
        if not _same(check, rakp4.integrity_check):
            if self._kg is not None:  # the password passed RAKP2, so the key is what differs
                raise IpmiError(Reason.AUTH_REJECTED, f"{self.address} holds another BMC key (K_g) than the one given")
            raise IpmiError(Reason.PROTOCOL, f"{self.address} sent a RAKP4 that does not verify")
        self._keys = SessionKeys.derive(suite, sik)
        self._bmc_session_id = bmc_session
        self._session_sequence = 0
        self._inbound_highest = 0
        self._inbound_seen = set()

    def _rakp_reply(self, payload_type: int, parse: Callable[[bytes], T], tag: int) -> Callable[[bytes], T | None]:
        console = self._console_session_id

        def match(reply: bytes) -> T | None:
            packet = parse_packet(reply)
            if packet.payload_type != payload_type:
                return None
            message = parse(packet.payload)
            return message if message.tag == tag and message.console_session_id in (console, 0) else None

        return match

    def _rakp_refusal(self, status: int, step: str) -> IpmiError:
        meaning = RMCP_PLUS_STATUS.get(status, hex(status))
        user = self.user.decode(errors="replace")
        if status in (0x0D, 0x0F, 0x09, 0x0A):  # unknown name, bad check value, role not allowed
            return IpmiError(Reason.AUTH_REJECTED, f"{self.address} rejected user {user!r} in {step}: {meaning}")
        return IpmiError(Reason.PROTOCOL, f"{self.address} failed the login in {step}: {meaning}")

    # --- commands ------------------------------------------------------------------------------

    def request(self, netfn: int, command: int, data: bytes = b"", *, lun: int = 0,
                timeouts: Timeouts | None = None) -> IpmiResponse:
        """Send one command in the session and return the BMC's response, whatever its completion code."""
        return self.run_steps(self.request_steps(netfn, command, data, lun=lun, timeouts=timeouts))

    def request_steps(self, netfn: int, command: int, data: bytes = b"", *, lun: int = 0,
                      timeouts: Timeouts | None = None):
        """`request`, as steps."""
        if self._keys is None or self._socket is None:
            raise IpmiError(Reason.PROTOCOL, f"no open session with {self.address}")
        message = self._next_request(netfn, command, data, lun)
        sequence = self._request_sequence
        keys, console = self._keys, self._console_session_id

        def match(reply: bytes) -> IpmiResponse | None:
            packet, plain = keys.unseal(reply)
            if packet.session_id != console or packet.payload_type & 0x3F != PAYLOAD_IPMI:
                return None
            if not self._fresh(packet.sequence):
                log.debug("%s: dropped a packet with session sequence %d (replayed or too old)", self.address,
                          packet.sequence)
                return None
            response = parse_ipmi_response(plain)
            if response.sequence != sequence or response.command != command or response.netfn != netfn + 1:
                return None
            return response

        # Each resend is sealed afresh with the next session sequence number (a replayed
        # number is dropped by the BMC); the IPMI sequence stays, so a late reply matches.
        return (yield from self._exchange(lambda: self._seal(message), match,
                                          f"command {netfn:#04x}/{command:#04x}", timeouts=timeouts))

    def command(self, netfn: int, command: int, data: bytes = b"", *, lun: int = 0) -> bytes:
        """Send one command; return its data, or raise IpmiError for an error completion code."""
        return self.run_steps(self.command_steps(netfn, command, data, lun=lun))

    def command_steps(self, netfn: int, command: int, data: bytes = b"", *, lun: int = 0):
        """`command`, as steps."""
        response = yield from self.request_steps(netfn, command, data, lun=lun)
        self._check_completion(response, f"command {netfn:#04x}/{command:#04x}")
        return response.data

    def raw_command(self, netfn, command, bridge_request=(), data=(), delay_xmit=None, retry=True, timeout=None,
                    rslun=0) -> dict:
        """pyghmi's session interface, so pyghmi's command layer runs on this session."""
        if bridge_request:
            raise IpmiError(Reason.PROTOCOL, "bridged requests are not supported")
        timeouts = self.timeouts if retry else Timeouts(self.timeouts.reply_s, resends=0)
        if timeout:
            timeouts = Timeouts(float(timeout), timeouts.resends)
        response = self.request(netfn, command, bytes(data), lun=rslun, timeouts=timeouts)
        reply = {"netfn": response.netfn, "command": response.command, "code": response.completion_code,
                 "data": bytearray(response.data)}
        if response.completion_code:
            reply["error"] = _completion_text(reply)
        return reply

    def _check_completion(self, response: IpmiResponse, what: str) -> None:
        if response.completion_code:
            raise IpmiError(Reason.COMMAND_FAILED,
                            f"{self.address} answered {what} with completion code {response.completion_code:#04x}",
                            completion_code=response.completion_code)

    def _fresh(self, sequence: int) -> bool:
        """Accept each session sequence number from the BMC once, within the window; remember it."""
        if sequence == 0 or sequence in self._inbound_seen or sequence <= self._inbound_highest - SEQUENCE_WINDOW:
            return False
        self._inbound_seen.add(sequence)
        if sequence > self._inbound_highest:
            self._inbound_highest = sequence
            self._inbound_seen = {seen for seen in self._inbound_seen if seen > sequence - SEQUENCE_WINDOW}
        return True

    def _next_request(self, netfn: int, command: int, data: bytes, lun: int = 0) -> bytes:
        self._request_sequence = (self._request_sequence + 1) & 0x3F
        return ipmi_request(netfn, command, self._request_sequence, data, lun)

    def _seal(self, message: bytes) -> bytes:
        self._session_sequence = (self._session_sequence + 1) & 0xFFFFFFFF or 1
        return self._keys.seal(self._bmc_session_id, self._session_sequence, message)

    # --- the one send/receive loop ---------------------------------------------------------------

    def run_steps(self, steps):
        """Run a generator of this session's steps to its end on the session's own socket, blocking."""
        try:
            wait = next(steps)
            while True:
                sock, deadline = wait
                try:
                    datagram = self._receive_on(sock, deadline)
                except OSError as error:
                    wait = steps.throw(error)
                    continue
                wait = steps.send(datagram)
        except StopIteration as done:
            return done.value

    @staticmethod
    def _receive_on(sock, deadline: float) -> bytes | None:
        """One datagram from `sock` before `deadline`, or None; sleeps until then where `sock` is None."""
        left = deadline - time.monotonic()
        if sock is None:
            if left > 0:
                time.sleep(left)
            return None
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            return sock.recv(RECEIVE_BYTES)
        except TimeoutError:
            return None

    def _exchange(self, build: Callable[[], bytes], match: Callable[[bytes], T | None], step: str, *,
                  resends: int | None = None, timeouts: Timeouts | None = None):
        """Steps: send, wait for a datagram `match` accepts (ignoring others), resend on silence.

        No answer at all from the BMC so far means unreachable; silence after it has
        answered means it stopped in the middle (timeout).
        """
        timeouts = timeouts or self.timeouts
        sends = 1 + (timeouts.resends if resends is None else resends)
        for _ in range(sends):
            self._send(build())
            deadline = time.monotonic() + timeouts.reply_s
            while deadline > time.monotonic():
                try:
                    datagram = yield self._socket, deadline
                except OSError as error:
                    raise self._network_error(error) from None
                if datagram is None:
                    break
                self._answered = True
                try:
                    found = match(datagram)
                except WireError as error:
                    log.debug("%s: ignored a datagram during %s: %s", self.address, step, error)
                    continue
                if found is not None:
                    return found
        if not self._answered:
            raise IpmiError(Reason.UNREACHABLE, f"no answer from {self.address} on UDP {self.port} "
                                                f"({sends} tries, {timeouts.reply_s:g} s each)")
        raise IpmiError(Reason.TIMEOUT, f"{self.address} stopped answering during {step} "
                                        f"({sends} tries, {timeouts.reply_s:g} s each)")

    def _send(self, datagram: bytes) -> None:
        try:
            self._socket.send(datagram)
        except OSError as error:
            raise self._network_error(error) from None

    def _network_error(self, error: OSError) -> IpmiError:
        if error.errno == errno.ECONNREFUSED:
            return IpmiError(Reason.UNREACHABLE, f"{self.address} refuses UDP {self.port}: no BMC listens there")
        if error.errno in UNREACHABLE_ERRNOS:
            return IpmiError(Reason.UNREACHABLE, f"cannot reach {self.address}: {error.strerror}")
        return IpmiError(Reason.UNREACHABLE, f"network error talking to {self.address}: {error.strerror or error}")


def _same(expected: bytes, received: bytes) -> bool:
    """A received authentication code matches (compared in constant time)."""
    return len(received) >= len(expected) and hmac.compare_digest(expected, received[:len(expected)])


def _completion_text(reply: dict) -> str:
    """pyghmi's wording of an error completion code where pyghmi is installed (its command
    layer reads it), else the code."""
    try:
        from pyghmi.ipmi.private.util import get_ipmi_error
    except ImportError:
        get_ipmi_error = None
    return (get_ipmi_error(reply) if get_ipmi_error else None) or f"completion code {reply['code']:#04x}"
