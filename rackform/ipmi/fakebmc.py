"""A small BMC speaking RMCP+ over UDP, for tests that need a BMC to misbehave.

The lab's ipmi_sim is the real reference (tests/lab); this one exists for what ipmi_sim
cannot be made to do: offer only cipher suite 0, offer only IPMI 1.5, keep its cipher
suites to itself before login, speak suite 17,
honour the cipher suite privilege levels (LAN parameters 22-24: a suite whose entry allows no
privilege is refused at Open Session, so closing suite 0 really closes it),
stop answering after N packets, answer "busy", lag behind a power change or ignore it,
serve a DCMI power reading, and count how many requests it had in flight at once.

Each request is answered from a timer after `reply_delay_s`, so two clients that talk to
it at the same time are seen overlapping (`max_in_flight`). Each request is also noted as
one word in `requests` (auth-capabilities, cipher-suites, open-session, rakp1, ...), so a
test can tell whether a login was even tried.

The lab runs it in a BMC's network namespace, in place of that node's ipmi_sim, with one
of the `MODES` (each a FakeBmcConfig); it prints one line when it listens, then a word
per request:

    nsenter --net=/run/netns/NS python -m rackform.ipmi.fakebmc --address 10.61.1.18 --mode suite0

Not for production use.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rackform.ipmi import prelogin, wire
from rackform.ipmi.module_utils import load

_prelogin_wire = load("rackform_ipmi_wire")  # the probe's own constants: records and pages as it reads them

SUITES_BY_ALGORITHMS = {(0, 0, 0): 0, (1, 0, 0): 1, (1, 1, 0): 2, (1, 1, 1): 3, (3, 4, 1): 17, (3, 0, 0): 15}
ALGORITHMS_BY_SUITE = {suite: algorithms for algorithms, suite in SUITES_BY_ALGORITHMS.items()}
INVALID_COMMAND = 0xC1
NODE_BUSY = 0xC0
SESSIONLESS_WORDS = {prelogin.CMD_GET_CHANNEL_AUTH_CAPABILITIES: "auth-capabilities",
                     _prelogin_wire.CMD_GET_CHANNEL_CIPHER_SUITES: "cipher-suites"}
RMCP_PLUS_WORDS = {wire.PAYLOAD_OPEN_SESSION_REQUEST: "open-session", wire.PAYLOAD_RAKP1: "rakp1",
                   wire.PAYLOAD_RAKP3: "rakp3", wire.PAYLOAD_IPMI: "in-session"}


@dataclass
class FakeBmcConfig:
    user: str = "ADMIN"
    password: str = "ADMIN"
    suites: frozenset[int] = frozenset({17, 3})
    """Suites it can speak (0, 3, 17); LAN parameter 23 lists them in this order, sorted."""
    ipmi20: bool = True
    """False: an IPMI 1.5 BMC; says so in its authentication capabilities and ignores RMCP+ packets."""
    ipmi15: bool = False
    """Also takes IPMI 1.5 (MD5) logins, and says so in its authentication capabilities."""
    lists_cipher_suites: bool = True
    """Answers Get Channel Cipher Suites before login; False: "invalid command", as some BMCs do."""
    kg: bytes | None = None
    """The BMC key K_g: keys the session instead of the password (IPMI 2.0 section 13.31)."""
    repeat_sequence: bool = False
    """Seal every reply with session sequence number 1 (what a replayed packet looks like)."""
    honours_cipher_levels: bool = True
    """False: stores LAN parameter 24 and lets every suite in anyway (ipmi_sim)."""
    power: str = "off"
    power_lag_reads: int = 0
    """Chassis status keeps reporting the old state for this many reads after a change."""
    ignore_power_commands: bool = False
    """Accept chassis control and change nothing (a change that is never confirmed)."""
    busy_replies: int = 0
    """Answer the first N chassis control commands with completion code 0xC0 (node busy)."""
    answer_packets: int | None = None
    """Answer this many datagrams, then none (a BMC that dies in the middle of a run)."""
    reply_delay_s: float = 0.0
    mac: bytes | None = bytes.fromhex("020000aabbcc")
    dcmi_power_w: int | None = None
    fru: bytes | None = None
    fru_max_read: int = 255
    """Read FRU Data asking for more than this is refused with 0xC8 (as ipmi_sim refuses 56)."""
    firmware: tuple[int, int] = (2, 0x17)
    guid: bytes = field(default_factory=lambda: bytes(range(16)))


@dataclass
class _Session:
    console_session_id: int
    suite: wire.CipherSuite | None
    """None: cipher suite 0 (no authentication, integrity or confidentiality)."""
    console_random: bytes = b""
    bmc_random: bytes = b""
    role: int = 0
    user: bytes = b""
    keys: wire.SessionKeys | None = None
    sequence: int = 0
    plain_open: bool = False
    """A suite 0 session past RAKP: its packets are neither signed nor encrypted."""


class FakeBmc:
    """Start with `with FakeBmc(config) as bmc:`; it listens on `host` (127.0.0.1) at `bmc.port`."""

    def __init__(self, config: FakeBmcConfig | None = None, host: str = "127.0.0.1", port: int = 0,
                 on_request: Callable[[str], None] | None = None):
        self.config = config or FakeBmcConfig()
        self.requests: list[str] = []
        """A word per datagram received, answered or not (`request_word`)."""
        self._on_request = on_request
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind((host, port))
        self.socket.settimeout(0.05)
        self.address, self.port = self.socket.getsockname()
        self.power = self.config.power
        self.boot_device: int | None = None
        self.commands: list[tuple[int, int]] = []
        self.logins = 0
        self.login_attempts = 0  # RAKP1 messages: each one a password tried
        self.closed_sessions = 0
        self.suite0_logins = 0
        self.cipher_entries = tuple(sorted(self.config.suites))
        self.cipher_levels = [wire.PRIVILEGE_ADMIN] * 16
        """LAN parameter 24: the highest privilege per entry of `cipher_entries` (0: none)."""
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._sessions: dict[int, _Session] = {}
        self._answered = 0
        self._lag_left = 0
        self._reported_power = self.power
        self._busy_left = self.config.busy_replies
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"fakebmc-{self.port}")
        self._running = False

    def __enter__(self) -> FakeBmc:
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()

    def start(self) -> None:
        self._running = True
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        try:
            self.socket.shutdown(socket.SHUT_RDWR)  # wakes the serving thread at once
        except OSError:
            pass
        self.socket.close()
        self._thread.join(timeout=2)

    @property
    def open_sessions(self) -> int:
        return sum(session.keys is not None or session.plain_open for session in self._sessions.values())

    def suite_allowed(self, suite: int) -> bool:
        if suite not in self.cipher_entries:
            return False
        return not self.config.honours_cipher_levels or self.cipher_levels[self.cipher_entries.index(suite)] > 0

    # --- serving -------------------------------------------------------------------------------

    def _serve(self) -> None:
        while self._running:
            try:
                datagram, peer = self.socket.recvfrom(2048)
            except TimeoutError:
                continue
            except OSError:
                return
            word = request_word(datagram)
            with self._lock:
                self.requests.append(word)
            if self._on_request is not None:
                self._on_request(word)
            with self._lock:
                if self.config.answer_packets is not None and self._answered >= self.config.answer_packets:
                    continue
                self._answered += 1
                self._in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self._in_flight)
            if self.config.reply_delay_s:
                threading.Timer(self.config.reply_delay_s, self._answer, (datagram, peer)).start()
            else:
                self._answer(datagram, peer)

    def _answer(self, datagram: bytes, peer) -> None:
        reply = None
        with self._lock:
            try:
                reply = self._handle(datagram)
            except (wire.WireError, struct.error, IndexError):
                pass
            self._in_flight -= 1  # before the reply leaves: the client's next request may come at once
        if reply is not None and self._running:
            try:
                self.socket.sendto(reply, peer)
            except OSError:
                pass

    def _handle(self, datagram: bytes) -> bytes | None:
        packet = wire.parse_packet(datagram)
        if packet.auth_type == wire.AUTH_TYPE_NONE:
            return self._sessionless(packet)
        if not self.config.ipmi20:
            return None  # an IPMI 1.5 BMC does not know RMCP+
        kind = packet.payload_type & 0x3F
        if kind == wire.PAYLOAD_OPEN_SESSION_REQUEST:
            return self._open_session(packet.payload)
        if kind == wire.PAYLOAD_RAKP1:
            return self._rakp1(packet.payload)
        if kind == wire.PAYLOAD_RAKP3:
            return self._rakp3(packet.payload)
        if kind == wire.PAYLOAD_IPMI:
            return self._in_session(packet, datagram)
        return None

    def _sessionless(self, packet: wire.Packet) -> bytes | None:
        request = packet.payload
        netfn, command = request[1] >> 2, request[5]
        if (netfn, command) == (prelogin.NETFN_APP, _prelogin_wire.CMD_GET_CHANNEL_CIPHER_SUITES):
            return wire.sessionless_packet(self._cipher_suites_page(request))
        if (netfn, command) != (prelogin.NETFN_APP, prelogin.CMD_GET_CHANNEL_AUTH_CAPABILITIES):
            return None
        if self.config.ipmi20:
            md5 = 0x04 if self.config.ipmi15 else 0x00
            data = bytes((1, 0x80 | md5, 0x04, 0x02 | (0x01 if self.config.ipmi15 else 0), 0, 0, 0, 0))
        else:
            data = bytes((1, 0x04, 0x04, 0x00, 0, 0, 0, 0))
        return wire.sessionless_packet(_response(request, 0, data))

    def _cipher_suites_page(self, request: bytes) -> bytes:
        """Get Channel Cipher Suites (IPMI 2.0 section 22.15): one page of the records of `cipher_entries`."""
        if not (self.config.ipmi20 and self.config.lists_cipher_suites):
            return _response(request, INVALID_COMMAND, b"")
        page = request[8] & 0x3F  # request data: channel, payload type, list-by-suite bit and page index
        records = b"".join(cipher_suite_record(suite) for suite in self.cipher_entries)
        per_page = _prelogin_wire.RECORD_BYTES_PER_PAGE
        return _response(request, 0, bytes((1,)) + records[page * per_page:(page + 1) * per_page])

    def _open_session(self, payload: bytes) -> bytes:
        tag, console = payload[0], struct.unpack_from("<I", payload, 4)[0]
        algorithms = (payload[12], payload[20], payload[28])
        suite_number = SUITES_BY_ALGORITHMS.get(algorithms)
        if suite_number not in (0, 3, 17) or not self.suite_allowed(suite_number):
            reply = bytes((tag, 0x11, 0, 0)) + struct.pack("<I", console)
            return wire.rmcp_plus_packet(wire.PAYLOAD_OPEN_SESSION_RESPONSE, reply)
        suite = {17: wire.SUITE_17, 3: wire.SUITE_3, 0: None}[suite_number]
        bmc_session = int.from_bytes(os.urandom(4), "little") | 1
        self._sessions[bmc_session] = _Session(console, suite)
        reply = (bytes((tag, 0, 4, 0)) + struct.pack("<II", console, bmc_session)
                 + bytes((0, 0, 0, 8, algorithms[0], 0, 0, 0, 1, 0, 0, 8, algorithms[1], 0, 0, 0,
                          2, 0, 0, 8, algorithms[2], 0, 0, 0)))
        return wire.rmcp_plus_packet(wire.PAYLOAD_OPEN_SESSION_RESPONSE, reply)

    def _rakp1(self, payload: bytes) -> bytes | None:
        tag, bmc_session = payload[0], struct.unpack_from("<I", payload, 4)[0]
        session = self._sessions.get(bmc_session)
        if session is None:
            return None
        self.login_attempts += 1
        session.console_random, session.role = payload[8:24], payload[24]
        session.user = payload[28:28 + payload[27]]
        head = bytes((tag,))
        if session.user != self.config.user.encode():
            reply = head + bytes((0x0D, 0, 0)) + struct.pack("<I", session.console_session_id)
            return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP2, reply)
        session.bmc_random = os.urandom(16)
        if session.suite is None:  # RAKP-none: no authentication code, any password is as good
            reply = (head + bytes((0, 0, 0)) + struct.pack("<I", session.console_session_id) + session.bmc_random
                     + self.config.guid)
            return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP2, reply)
        code = wire.rakp2_auth_code(session.suite, self.config.password.encode(), session.console_session_id,
                                    bmc_session, session.console_random, session.bmc_random, self.config.guid,
                                    session.role, session.user)
        reply = (head + bytes((0, 0, 0)) + struct.pack("<I", session.console_session_id) + session.bmc_random
                 + self.config.guid + code)
        return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP2, reply)

    def _rakp3(self, payload: bytes) -> bytes | None:
        tag, bmc_session = payload[0], struct.unpack_from("<I", payload, 4)[0]
        session = self._sessions.get(bmc_session)
        if session is None:
            return None
        if session.suite is None:
            session.plain_open = True
            self.suite0_logins += 1
            reply = bytes((tag, 0, 0, 0)) + struct.pack("<I", session.console_session_id)
            return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP4, reply)
        password = self.config.password.encode()
        expected = wire.rakp3_auth_code(session.suite, password, session.bmc_random, session.console_session_id,
                                        session.role, session.user)
        head = bytes((tag,))
        if payload[8:] != expected:
            reply = head + bytes((0x0F, 0, 0)) + struct.pack("<I", session.console_session_id)
            return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP4, reply)
        sik = wire.session_integrity_key(session.suite, self.config.kg or password, session.console_random,
                                         session.bmc_random, session.role, session.user)
        session.keys = wire.SessionKeys.derive(session.suite, sik)
        self.logins += 1
        check = wire.rakp4_integrity_check(session.suite, sik, session.console_random, bmc_session,
                                           self.config.guid)
        reply = head + bytes((0, 0, 0)) + struct.pack("<I", session.console_session_id) + check
        return wire.rmcp_plus_packet(wire.PAYLOAD_RAKP4, reply)

    def _in_session(self, packet: wire.Packet, datagram: bytes) -> bytes | None:
        session = self._sessions.get(packet.session_id)
        if session is not None and session.plain_open and packet.payload_type == wire.PAYLOAD_IPMI:
            request = packet.payload
            netfn, command = request[1] >> 2, request[5]
            self.commands.append((netfn, command))
            code, reply_data = self._command(netfn, command, request[6:-1], packet.session_id)
            session.sequence += 1
            return wire.rmcp_plus_packet(wire.PAYLOAD_IPMI, _response(request, code, reply_data),
                                         session.console_session_id, session.sequence)
        if session is None or session.keys is None:
            return None
        _packet, request = session.keys.unseal(datagram)
        netfn, command, data = request[1] >> 2, request[5], request[6:-1]
        self.commands.append((netfn, command))
        code, reply_data = self._command(netfn, command, data, packet.session_id)
        session.sequence = 1 if self.config.repeat_sequence else session.sequence + 1
        return session.keys.seal(session.console_session_id, session.sequence, _response(request, code, reply_data))

    # --- commands ------------------------------------------------------------------------------

    def _command(self, netfn: int, command: int, data: bytes, bmc_session: int) -> tuple[int, bytes]:
        if (netfn, command) == (0x06, 0x3B):
            return 0, bytes((data[0] & 0x0F,))
        if (netfn, command) == (0x06, 0x3C):
            self._sessions.pop(bmc_session, None)
            self.closed_sessions += 1
            return 0, b""
        if (netfn, command) == (0x00, 0x01):
            return 0, bytes((1 if self._read_power() == "on" else 0, 0, 0, 0))
        if (netfn, command) == (0x00, 0x02):
            return self._chassis_control(data[0])
        if (netfn, command) == (0x00, 0x08):
            if data[0] == 5:
                self.boot_device = (data[2] >> 2) & 0x0F
            return 0, b""
        if (netfn, command) == (0x06, 0x01):
            major, minor = self.config.firmware
            return 0, bytes((0x20, 0x01, major, minor, 0x02, 0x9F)) + (0x001291).to_bytes(3, "little") + b"\x34\x12"
        if (netfn, command) == (0x06, 0x08):
            return 0, self.config.guid
        if (netfn, command) == (0x0C, 0x02) and data[1] == 5 and self.config.mac:
            return 0, bytes((0x11,)) + self.config.mac
        if (netfn, command) == (0x0C, 0x02) and data[1] in (22, 23, 24):
            return 0, self._cipher_parameter(data[1])
        if (netfn, command) == (0x0C, 0x01) and data[1] == 0:  # set in progress / commit / complete
            return 0, b""
        if (netfn, command) == (0x0C, 0x01) and data[1] == 24:
            if len(data) < 11:
                return 0xC7, b""  # request data length invalid
            self.cipher_levels = [nibble for byte in data[3:11] for nibble in (byte & 0x0F, byte >> 4)]
            return 0, b""
        if (netfn, command) == (0x2C, 0x02) and self.config.dcmi_power_w is not None:
            reading = struct.pack("<HHHH", self.config.dcmi_power_w, 0, 0, 0) + bytes(8)
            return 0, bytes((0xDC,)) + reading + bytes((0x40,))
        if (netfn, command) == (0x0A, 0x10) and self.config.fru is not None:
            return 0, struct.pack("<HB", len(self.config.fru), 0)
        if (netfn, command) == (0x0A, 0x11) and self.config.fru is not None:
            offset, count = data[1] | data[2] << 8, data[3]
            if count > self.config.fru_max_read:
                return 0xC8, b""
            chunk = self.config.fru[offset:offset + count]
            return 0, bytes((len(chunk),)) + chunk
        return INVALID_COMMAND, b""

    def _cipher_parameter(self, parameter: int) -> bytes:
        """LAN parameters 22 (entry count), 23 (the entries) and 24 (a level per entry), revision first."""
        if parameter == 22:
            return bytes((0x11, len(self.cipher_entries)))
        if parameter == 23:
            return bytes((0x11, 0)) + bytes(self.cipher_entries)
        levels = self.cipher_levels
        return bytes((0x11, 0)) + bytes(levels[i] | levels[i + 1] << 4 for i in range(0, 16, 2))

    def _read_power(self) -> str:
        if self._lag_left > 0:
            self._lag_left -= 1
            return self._reported_power
        self._reported_power = self.power
        return self.power

    def _chassis_control(self, code: int) -> tuple[int, bytes]:
        if self._busy_left > 0:
            self._busy_left -= 1
            return NODE_BUSY, b""
        if self.config.ignore_power_commands:
            return 0, b""
        self._reported_power = self.power
        self.power = {0x00: "off", 0x01: "on", 0x02: "on", 0x03: "on", 0x05: "off"}.get(code, self.power)
        self._lag_left = self.config.power_lag_reads
        return 0, b""


def cipher_suite_record(suite: int) -> bytes:
    """A standard cipher suite record (IPMI 2.0 table 22-18): start, id, then one tagged byte per algorithm."""
    authentication, integrity, confidentiality = ALGORITHMS_BY_SUITE[suite]
    return bytes((_prelogin_wire.START_OF_RECORD, suite, authentication, 0x40 | integrity, 0x80 | confidentiality))


def request_word(datagram: bytes) -> str:
    """One word for what a datagram asks, for `FakeBmc.requests` and the command line's log."""
    try:
        packet = wire.parse_packet(datagram)
    except (wire.WireError, struct.error):
        return "other"
    if packet.auth_type == wire.AUTH_TYPE_NONE:
        if len(packet.payload) < 6:
            return "other"
        command = packet.payload[5]
        return SESSIONLESS_WORDS.get(command, f"command-{command:#04x}")
    return RMCP_PLUS_WORDS.get(packet.payload_type & 0x3F, "other")


def _response(request: bytes, code: int, data: bytes) -> bytes:
    """The BMC's response message to an IPMI request message."""
    head = bytes((request[3], ((request[1] >> 2) + 1) << 2 | (request[4] & 0x03)))
    body = bytes((request[0], request[4] & 0xFC, request[5], code)) + data
    return head + bytes((wire.checksum(head),)) + body + bytes((wire.checksum(body),))


# --- the command line: one of these BMCs in place of a lab node's ipmi_sim ---------------------------

MODES: dict[str, FakeBmcConfig] = {
    "suite0": FakeBmcConfig(suites=frozenset({0})),
    "ipmi15": FakeBmcConfig(ipmi20=False, ipmi15=True),
    "silent-list": FakeBmcConfig(suites=frozenset({1, 2}), lists_cipher_suites=False),
}
"""What ipmi_sim cannot be made to be: IPMI 2.0 offering suite 0 alone; IPMI 1.5 alone (MD5);
IPMI 2.0 keeping its suites to itself before login and speaking only 1 and 2, so 17 and 3 are
refused at Open Session."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackform.ipmi.fakebmc",
                                     description="A misbehaving BMC on UDP, for the lab's refusal tests.")
    parser.add_argument("--address", required=True, help="the IPv4 address to listen on")
    parser.add_argument("--port", type=int, default=623, help="UDP port (0: any free one; default 623)")
    parser.add_argument("--mode", choices=sorted(MODES), required=True)
    args = parser.parse_args(argv)
    try:
        bmc = FakeBmc(MODES[args.mode], host=args.address, port=args.port,
                      on_request=lambda word: print(word, flush=True))
    except OSError as error:
        print(f"fakebmc: cannot listen on {args.address}:{args.port}: {error.strerror or error}", file=sys.stderr)
        return 2
    with bmc:
        print(f"listening on {bmc.address}:{bmc.port} ({args.mode})", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
