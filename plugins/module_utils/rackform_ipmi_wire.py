# -*- coding: utf-8 -*-
"""What a BMC offers, asked before any login: IPMI versions and RMCP+ cipher suites.

Two session-less requests (IPMI 2.0 spec, sections 22.13 and 22.15), sent in the
IPMI 1.5 packet format every BMC answers before a session exists:

- Get Channel Authentication Capabilities (App 0x38) with the "IPMI 2.0 extended
  data" bit: does the BMC speak IPMI 2.0 (RMCP+, `lanplus`) or only IPMI 1.5?
- Get Channel Cipher Suites (App 0x54), page by page: which suites it offers.

No credentials are sent, so a BMC that offers only IPMI 1.5 or only cipher suite 0
is refused before it sees a user name or a password hash. Standard library only:
this file travels inside the Ansible module (AnsiballZ), and rackform's fleet client
(rackform/ipmi/prelogin.py) loads this same file for its own first message, so the
pre-login rules are written once.
"""

from __future__ import absolute_import, division, print_function

import os
import socket
import struct
import time

IPMI_PORT = 623
RMCP_HEADER = bytes([0x06, 0x00, 0xFF, 0x07])  # RMCP 1.0, no ack, class IPMI
BMC_ADDRESS = 0x20
CONTROLLER_SOFTWARE_ID = 0x81  # requester address of remote console software
NETFN_APP = 0x06
CMD_GET_CHANNEL_AUTH_CAPABILITIES = 0x38
CMD_GET_CHANNEL_CIPHER_SUITES = 0x54
CURRENT_CHANNEL = 0x0E
PRIVILEGE_ADMINISTRATOR = 0x04
PAYLOAD_IPMI = 0x00
MAX_CIPHER_SUITE_PAGES = 64  # the list index is 6 bits
RECORD_BYTES_PER_PAGE = 16
START_OF_RECORD = 0xC0  # standard cipher suite record; 0xC1 is an OEM record (3 more bytes of IANA)
START_OF_OEM_RECORD = 0xC1

# Cipher suites rackform logs in with (IPMI 2.0 table 22-20): 17 = RAKP-HMAC-SHA256,
# HMAC-SHA256-128, AES-CBC-128; 3 = RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
# Suite 0 has no authentication at all (any password works), 1 and 2 send commands
# in clear text; nothing else is accepted.
ACCEPTED_CIPHER_SUITES = (17, 3)

IPMI15_AUTH_TYPE_BITS = 0x37  # none, MD2, MD5, straight password, OEM (table 22-15, byte 2)

IPMI15_ONLY_COMPLETION_CODE = 0xCC
"""Some IPMI 1.5 BMCs answer the request for IPMI 2.0 data with "invalid data field"."""
IPMI15_ONLY_REFUSAL = ("the BMC speaks only IPMI 1.5 (no RMCP+/lanplus): its logins use MD5 or plain-text "
                       "passwords, so rackform refuses it; enable IPMI 2.0 (lanplus) on the BMC")


class BmcSilent(Exception):
    """The BMC did not answer (down, unplugged, wrong address or a firewall)."""


class BmcInsecure(Exception):
    """The BMC offers nothing rackform accepts (IPMI 1.5 only, or no suite 3 or 17)."""


def checksum(data):
    """Two's complement checksum: the bytes plus it sum to zero modulo 256."""
    return (-sum(data)) & 0xFF


def request_message(netfn, command, sequence, data=b"", lun=0):
    """An IPMI request message from remote console software to the BMC (spec section 13.8)."""
    header = bytes([BMC_ADDRESS, (netfn << 2) | lun])
    body = bytes([CONTROLLER_SOFTWARE_ID, (sequence & 0x3F) << 2, command]) + bytes(data)
    return header + bytes([checksum(header)]) + body + bytes([checksum(body)])


def parse_response_message(message):
    """(netfn, command, sequence, completion code, data) of a response message, or None when it
    is too short or fails either checksum."""
    if len(message) < 8 or checksum(message[:2]) != message[2] or checksum(message[3:-1]) != message[-1]:
        return None
    # rqAddr, netFn/rqLUN, checksum, rsAddr, rqSeq/rsLUN, cmd, completion code, data..., checksum
    return message[1] >> 2, message[5], message[4] >> 2, message[6], bytes(message[7:-1])


def sessionless_frame(message):
    """IPMI 1.5 framing with authentication type none, session 0: the only way to talk before a login."""
    session = bytes([0x00]) + bytes(4) + bytes(4) + bytes([len(message)])  # auth none, seq 0, session 0
    return RMCP_HEADER + session + message


def request_packet(command, data, sequence=1):
    """An IPMI 1.5 session-less request (authentication type none) to the BMC."""
    return sessionless_frame(request_message(NETFN_APP, command, sequence, data))


def auth_capabilities_request(privilege=PRIVILEGE_ADMINISTRATOR, sequence=1, ipmi20_data=True):
    """Get Channel Authentication Capabilities for this channel, asking for the IPMI 2.0 data."""
    channel = (0x80 if ipmi20_data else 0x00) | CURRENT_CHANNEL
    return request_packet(CMD_GET_CHANNEL_AUTH_CAPABILITIES, [channel, privilege], sequence)


def response_data(packet, command):
    """(completion code, data) of an IPMI 1.5 session-less response to `command`, else None."""
    if len(packet) < 14 or packet[:4] != RMCP_HEADER or packet[4] != 0x00:
        return None  # not IPMI, or not the session-less 1.5 format we asked in
    response = parse_response_message(packet[14:14 + packet[13]])
    if response is None or response[0] != NETFN_APP + 1 or response[1] != command:
        return None
    return response[3], response[4]


class Capabilities(object):
    """What the BMC said about itself before any login."""

    def __init__(self, ipmi20, ipmi15, cipher_suites):
        self.ipmi20 = ipmi20
        self.ipmi15 = ipmi15
        self.cipher_suites = cipher_suites
        """Suite ids offered, in the BMC's order; None when it does not list them."""

    def as_dict(self):
        return {
            "ipmi_versions": [v for v, on in (("2.0", self.ipmi20), ("1.5", self.ipmi15)) if on],
            "offered_cipher_suites": None if self.cipher_suites is None else list(self.cipher_suites),
        }


class AuthCapabilities(object):
    """Get Channel Authentication Capabilities, decoded (IPMI 2.0 table 22-15)."""

    __slots__ = ("channel", "ipmi20", "ipmi15", "anonymous_login", "null_user_names", "ipmi15_auth_types")

    def __init__(self, channel, ipmi20, ipmi15, anonymous_login, null_user_names, ipmi15_auth_types=0):
        self.ipmi15_auth_types = ipmi15_auth_types
        """IPMI 1.5 authentication types enabled at the asked privilege (bits: none, MD2, MD5, -, password, OEM)."""
        self.channel = channel
        self.ipmi20 = ipmi20
        """The channel takes IPMI 2.0 (RMCP+, lanplus) sessions."""
        self.ipmi15 = ipmi15
        self.anonymous_login = anonymous_login
        """Logins with a null user name and an empty password are on."""
        self.null_user_names = null_user_names
        """Users with a null name (the null user, id 1) are enabled."""

    @property
    def ipmi15_open(self):
        """IPMI 1.5 sessions (MD2, MD5, a plain-text password or none at all) are open at this privilege."""
        return self.ipmi15 and bool(self.ipmi15_auth_types & IPMI15_AUTH_TYPE_BITS)


def parse_auth_capabilities(data):
    """AuthCapabilities from the data of Get Channel Authentication Capabilities."""
    if len(data) < 4:
        raise ValueError("authentication capabilities of %d bytes (expected 8)" % len(data))
    extended = bool(data[1] & 0x80)  # "IPMI v2.0+ extended capabilities available"
    # A BMC that cannot even say so speaks IPMI 1.5 only.
    return AuthCapabilities(channel=data[0] & 0x0F,
                            ipmi20=extended and bool(data[3] & 0x02),
                            ipmi15=(not extended) or bool(data[3] & 0x01),
                            anonymous_login=bool(data[2] & 0x01),
                            null_user_names=bool(data[2] & 0x02),
                            ipmi15_auth_types=data[1] & IPMI15_AUTH_TYPE_BITS)


def parse_cipher_suite_records(records):
    """Suite ids from the concatenated record bytes of Get Channel Cipher Suites.

    Each record: 0xC0, suite id, then algorithm bytes (tagged 00/01/10 in the top two
    bits: authentication, integrity, confidentiality); OEM records start 0xC1 and carry
    a 3-byte IANA number after the id.
    """
    suites = []
    index = 0
    while index < len(records):
        tag = records[index]
        if tag in (START_OF_RECORD, START_OF_OEM_RECORD) and index + 1 < len(records):
            suites.append(records[index + 1])
            index += 2 + (3 if tag == START_OF_OEM_RECORD else 0)
            while index < len(records) and records[index] >> 6 != 0b11:
                index += 1  # the suite's algorithm bytes
        else:
            index += 1
    return tuple(suites)


class _Requester(object):
    """Requests over one connected UDP socket to one BMC, each sent up to `attempts` times."""

    def __init__(self, address, port, timeout_s, attempts):
        self.target = (address, port)
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.sequence = 0

    def ask(self, sock, command, data):
        self.sequence = (self.sequence + 1) & 0x3F
        return self.send(sock, request_packet(command, data, self.sequence), command)

    def send(self, sock, packet, command):
        reply = _exchange(sock, packet, lambda answer: response_data(answer, command), self.timeout_s, self.attempts,
                          self.target[0], self.target[1])
        if reply is not None:
            return reply
        raise BmcSilent("no answer from %s:%d to %d requests of %.1f s each (BMC down, unplugged, or not on the "
                        "out-of-band network)" % (self.target[0], self.target[1], self.attempts, self.timeout_s))


def probe(address, port=IPMI_PORT, timeout_s=1.0, attempts=3):
    """Ask the BMC for its IPMI versions and cipher suites; raises BmcSilent when it never answers."""
    requester = _Requester(address, port, timeout_s, attempts)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        try:
            sock.connect((address, port))  # connected: ICMP errors come back, answers from others do not
        except (OSError, socket.gaierror) as error:
            raise BmcSilent("%s:%d: %s" % (address, port, error))
        code, data = requester.send(sock, auth_capabilities_request(), CMD_GET_CHANNEL_AUTH_CAPABILITIES)
        if code == IPMI15_ONLY_COMPLETION_CODE:
            code, data = requester.send(sock, auth_capabilities_request(ipmi20_data=False),
                                        CMD_GET_CHANNEL_AUTH_CAPABILITIES)
            if code == 0:
                return Capabilities(False, True, None)
        if code != 0:
            raise BmcInsecure("%s: the BMC refused to report its authentication capabilities (completion code "
                              "0x%02x)" % (address, code))
        try:
            found = parse_auth_capabilities(data)
        except ValueError as error:
            raise BmcInsecure("%s: %s" % (address, error))
        suites = _cipher_suites(requester, sock) if found.ipmi20 else None
        return Capabilities(found.ipmi20, found.ipmi15, suites)
    finally:
        sock.close()


def _cipher_suites(requester, sock):
    """Every suite the BMC lists, or None when it does not answer the command."""
    records = bytearray()
    for page in range(MAX_CIPHER_SUITE_PAGES):
        code, data = requester.ask(sock, CMD_GET_CHANNEL_CIPHER_SUITES,
                                   [CURRENT_CHANNEL, PAYLOAD_IPMI, 0x80 | page])
        if code != 0 or not data:
            return None if page == 0 else parse_cipher_suite_records(bytes(records))
        records.extend(data[1:])  # data[0] is the channel number
        if len(data) - 1 < RECORD_BYTES_PER_PAGE:
            break
    return parse_cipher_suite_records(bytes(records))


def refusal(capabilities, accepted=ACCEPTED_CIPHER_SUITES):
    """Why rackform must not log in to this BMC, or None when it may.

    A BMC that does not list its suites is allowed on: the login itself proposes
    only suites 17 and 3 and fails if the BMC takes neither.
    """
    if not capabilities.ipmi20:
        return IPMI15_ONLY_REFUSAL
    offered = capabilities.cipher_suites
    if offered is not None and not set(offered) & set(accepted):
        return ("the BMC offers cipher suites %s and none of %s: rackform refuses suite 0 (no authentication: "
                "any password logs in) and every other suite; enable suite 17 or 3 on the BMC"
                % (_suite_list(offered), _suite_list(accepted)))
    return None


def _suite_list(suites):
    return ", ".join(str(suite) for suite in suites) if suites else "none"


# --- does cipher suite 0 still let anyone in? ----------------------------------------------------

AUTH_TYPE_RMCP_PLUS = 0x06
PAYLOAD_OPEN_SESSION_REQUEST, PAYLOAD_OPEN_SESSION_RESPONSE = 0x10, 0x11
PAYLOAD_RAKP1, PAYLOAD_RAKP2, PAYLOAD_RAKP3, PAYLOAD_RAKP4 = 0x12, 0x13, 0x14, 0x15
CMD_GET_DEVICE_ID = 0x01
CMD_CLOSE_SESSION = 0x3C
ROLE_ADMINISTRATOR_BY_NAME = 0x10 | PRIVILEGE_ADMINISTRATOR  # RAKP1: name-only lookup, administrator
CLOSE_WAIT_S = 0.5


def plain_rmcp_plus(payload_type, payload, session_id=0, sequence=0):
    """An IPMI 2.0 packet without integrity or confidentiality (session setup; suite 0 sessions)."""
    return (RMCP_HEADER + bytes([AUTH_TYPE_RMCP_PLUS, payload_type])
            + struct.pack("<IIH", session_id, sequence, len(payload)) + payload)


def _plain_payload(datagram, payload_type):
    """The payload of an unprotected IPMI 2.0 packet of `payload_type`, else None."""
    if len(datagram) < 16 or datagram[:4] != RMCP_HEADER or datagram[4] != AUTH_TYPE_RMCP_PLUS:
        return None
    if datagram[5] != payload_type:  # a set encrypted/authenticated bit is not a suite 0 packet either
        return None
    length = struct.unpack_from("<H", datagram, 14)[0]
    payload = datagram[16:16 + length]
    return payload if len(payload) == length else None


def suite0_gets_in(address, user, port=IPMI_PORT, timeout_s=1.0, attempts=3):
    """True when a cipher suite 0 session (no authentication) as `user` with a password nobody
    holds gets an answer to a command: what `ipmitool -I lanplus -C 0` with any password does.

    Sends no password and no hash (suite 0 has none to send). Refused at Open Session or at
    RAKP is False. Raises BmcSilent when nothing answers Open Session at all.
    """
    name = user.encode("utf-8") if not isinstance(user, bytes) else user
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        try:
            sock.connect((address, port))
        except (OSError, socket.gaierror) as error:
            raise BmcSilent("%s:%d: %s" % (address, port, error))
        console = struct.unpack("<I", os.urandom(4))[0] | 1

        def none_algorithm(kind):
            return bytes([kind, 0, 0, 8, 0, 0, 0, 0])

        request = (bytes([1, 0, 0, 0]) + struct.pack("<I", console)  # 0: the highest privilege there is
                   + none_algorithm(0) + none_algorithm(1) + none_algorithm(2))
        opened = _ask_plain(sock, plain_rmcp_plus(PAYLOAD_OPEN_SESSION_REQUEST, request),
                            PAYLOAD_OPEN_SESSION_RESPONSE, timeout_s, attempts, address, port)
        if opened is None:
            raise BmcSilent("no answer from %s:%d to a cipher suite 0 Open Session" % (address, port))
        if len(opened) < 36 or opened[1] != 0 or (opened[16], opened[24], opened[32]) != (0, 0, 0):
            return False  # refused, or "accepted" with other algorithms
        bmc_session = struct.unpack_from("<I", opened, 8)[0]
        rakp1 = (bytes([2, 0, 0, 0]) + struct.pack("<I", bmc_session) + os.urandom(16)
                 + bytes([ROLE_ADMINISTRATOR_BY_NAME, 0, 0, len(name)]) + name)
        rakp2 = _ask_plain(sock, plain_rmcp_plus(PAYLOAD_RAKP1, rakp1), PAYLOAD_RAKP2, timeout_s, 1, address, port)
        if rakp2 is None or len(rakp2) < 2 or rakp2[1] != 0:
            return False
        rakp3 = bytes([3, 0, 0, 0]) + struct.pack("<I", bmc_session)  # RAKP-none: no authentication code
        rakp4 = _ask_plain(sock, plain_rmcp_plus(PAYLOAD_RAKP3, rakp3), PAYLOAD_RAKP4, timeout_s, 1, address, port)
        if rakp4 is None or len(rakp4) < 2 or rakp4[1] != 0:
            return False
        command = request_message(NETFN_APP, CMD_GET_DEVICE_ID, 1)
        answer = _ask_plain(sock, plain_rmcp_plus(PAYLOAD_IPMI, command, bmc_session, 1), PAYLOAD_IPMI,
                            timeout_s, attempts, address, port)
        response = parse_response_message(answer) if answer is not None else None
        close = request_message(NETFN_APP, CMD_CLOSE_SESSION, 2, struct.pack("<I", bmc_session))
        try:  # awaited briefly, so the next session to this BMC never overlaps this one
            _ask_plain(sock, plain_rmcp_plus(PAYLOAD_IPMI, close, bmc_session, 2), PAYLOAD_IPMI,
                       min(timeout_s, CLOSE_WAIT_S), 1, address, port)
        except BmcSilent:
            pass
        return response is not None and response[3] == 0
    finally:
        sock.close()


def _ask_plain(sock, datagram, payload_type, timeout_s, attempts, address, port):
    """Send `datagram` up to `attempts` times; the first answer of `payload_type`, or None."""
    return _exchange(sock, datagram, lambda answer: _plain_payload(answer, payload_type), timeout_s, attempts,
                     address, port)


def _exchange(sock, datagram, match, timeout_s, attempts, address, port):
    """Send `datagram` up to `attempts` times over the connected `sock`, each time waiting
    `timeout_s` for an answer `match` accepts (others are ignored); its result, or None."""
    for _ in range(attempts):
        try:
            sock.send(datagram)
        except OSError as error:  # e.g. no route to the out-of-band network
            raise BmcSilent("%s:%d: %s" % (address, port, error.strerror or error))
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                answer = sock.recv(1024)
            except socket.timeout:
                break
            except OSError as error:  # ICMP port unreachable: a host is there, its BMC service is not
                raise BmcSilent("%s:%d: %s (nothing answers IPMI there)" % (address, port, error.strerror or error))
            found = match(answer)
            if found is not None:
                return found
    return None
