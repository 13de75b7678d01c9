# -*- coding: utf-8 -*-
"""IPMI over LAN on the wire: RMCP framing, IPMI messages, RMCP+ session setup (RAKP) and
the sealed (HMAC + AES-CBC-128) packets of an open session. Pure functions, no sockets.

Only what rackform uses is here: IPMI 2.0 (RMCP+, "lanplus") with cipher suite 17
(RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128) or 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96,
AES-CBC-128). Suite 0 and IPMI 1.5 sessions are never proposed. The sessionless message
every client starts with (Get Channel Authentication Capabilities), the message checksum
and the accepted suites come from rackform_ipmi_wire. Standard library only (this file
travels inside the Ansible module); AES-CBC-128 comes from `cryptography` where it is
installed (rackform, Ansible's own dependencies) and from the small pure-Python AES below
otherwise, both checked against each other and the FIPS-197 vectors in the unit tests.

Section and table numbers refer to the IPMI v2.0 rev 1.1 specification.
"""

from __future__ import annotations

import hmac
import os
import struct
from dataclasses import dataclass

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import (
    ACCEPTED_CIPHER_SUITES, checksum, parse_response_message, request_message, sessionless_frame)
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_aes import cbc_decrypt, cbc_encrypt

RMCP_HEADER = b"\x06\x00\xff\x07"  # version 6, reserved, no RMCP ACK, class IPMI (13.1.3)
AUTH_TYPE_NONE = 0x00
AUTH_TYPE_RMCP_PLUS = 0x06
PAYLOAD_IPMI = 0x00
PAYLOAD_OPEN_SESSION_REQUEST = 0x10
PAYLOAD_OPEN_SESSION_RESPONSE = 0x11
PAYLOAD_RAKP1 = 0x12
PAYLOAD_RAKP2 = 0x13
PAYLOAD_RAKP3 = 0x14
PAYLOAD_RAKP4 = 0x15
PAYLOAD_ENCRYPTED = 0x80
PAYLOAD_AUTHENTICATED = 0x40
NEXT_HEADER = 0x07  # the integrity trailer's fixed "next header" byte (table 13-8)
NAME_ONLY_LOOKUP = 0x10  # RAKP1 role bit: look the user up by name (and privilege)
AES_BLOCK = 16

PRIVILEGE_USER, PRIVILEGE_OPERATOR, PRIVILEGE_ADMIN = 2, 3, 4

# RMCP+ status codes (table 13-15) that mean "the BMC does not accept this cipher suite".
SUITE_MISMATCH_STATUSES = frozenset({0x04, 0x05, 0x06, 0x07, 0x10, 0x11, 0x12})
RMCP_PLUS_STATUS = {
    0x01: "insufficient resources to create a session",
    0x02: "invalid session id",
    0x03: "invalid payload type",
    0x04: "invalid authentication algorithm",
    0x05: "invalid integrity algorithm",
    0x06: "no matching authentication payload",
    0x07: "no matching integrity payload",
    0x08: "inactive session id",
    0x09: "invalid role",
    0x0A: "unauthorized role or privilege level requested",
    0x0B: "insufficient resources to create a session at the requested role",
    0x0C: "invalid name length",
    0x0D: "unauthorized name",
    0x0E: "unauthorized GUID",
    0x0F: "invalid integrity check value",
    0x10: "invalid confidentiality algorithm",
    0x11: "no cipher suite match with proposed security algorithms",
    0x12: "illegal or unrecognized parameter",
}


@dataclass(frozen=True, slots=True)
class CipherSuite:
    """One RMCP+ cipher suite (table 22-20): the three algorithms proposed together."""

    number: int
    authentication: int  # table 13-17
    integrity: int  # table 13-18
    confidentiality: int  # table 13-19
    hash_name: str
    integrity_length: int  # bytes of the HMAC kept in each packet (and in RAKP4)

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SUITE_17 = CipherSuite(17, authentication=0x03, integrity=0x04, confidentiality=0x01, hash_name="sha256",
                       integrity_length=16)
SUITE_3 = CipherSuite(3, authentication=0x01, integrity=0x01, confidentiality=0x01, hash_name="sha1",
                      integrity_length=12)
SAFE_SUITES = tuple({17: SUITE_17, 3: SUITE_3}[number] for number in ACCEPTED_CIPHER_SUITES)
"""Proposed in this order; nothing else is ever proposed (docs/domain.md, "IPMI safety rules")."""


class WireError(ValueError):
    """A datagram that is not the IPMI it claims to be."""


# --- IPMI messages (section 13.8) -----------------------------------------------------------




@dataclass(frozen=True, slots=True)
class IpmiResponse:
    netfn: int  # the response's netfn (request netfn + 1)
    command: int
    sequence: int
    completion_code: int
    data: bytes


ipmi_request = request_message
"""A request message from the remote console (software id 0x81) to the BMC."""


def parse_ipmi_response(message: bytes) -> IpmiResponse:
    parsed = parse_response_message(message)
    if parsed is None:
        raise WireError(f"IPMI response of {len(message)} bytes is short or fails its checksums")
    netfn, command, sequence, completion_code, data = parsed
    return IpmiResponse(netfn=netfn, command=command, sequence=sequence, completion_code=completion_code,
                        data=data)


# --- packets ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Packet:
    """A received RMCP datagram, framing removed (payload still sealed for session packets)."""

    auth_type: int
    payload_type: int  # PAYLOAD_* with the encrypted/authenticated bits as sent
    session_id: int
    sequence: int
    payload: bytes


sessionless_packet = sessionless_frame
"""IPMI 1.5 framing with no authentication: only for Get Channel Authentication Capabilities."""


def rmcp_plus_packet(payload_type: int, payload: bytes, session_id: int = 0, sequence: int = 0) -> bytes:
    """IPMI 2.0 framing without integrity or confidentiality (session setup, section 13.6)."""
    return (RMCP_HEADER + bytes((AUTH_TYPE_RMCP_PLUS, payload_type))
            + struct.pack("<IIH", session_id, sequence, len(payload)) + payload)


def parse_packet(datagram: bytes) -> Packet:
    if len(datagram) < 14 or datagram[0] != 0x06 or datagram[2:4] != b"\xff\x07":
        raise WireError("not an RMCP/IPMI datagram")
    auth_type = datagram[4]
    if auth_type == AUTH_TYPE_RMCP_PLUS:
        if len(datagram) < 16:
            raise WireError("truncated RMCP+ header")
        session_id, sequence, length = struct.unpack_from("<IIH", datagram, 6)
        payload = datagram[16:16 + length]
        if len(payload) != length:
            raise WireError("truncated RMCP+ payload")
        return Packet(auth_type, datagram[5], session_id, sequence, payload)
    sequence, session_id = struct.unpack_from("<II", datagram, 5)
    offset = 13 + (16 if auth_type != AUTH_TYPE_NONE else 0)  # IPMI 1.5 carries a 16-byte auth code
    if len(datagram) <= offset:
        raise WireError("truncated IPMI 1.5 header")
    length = datagram[offset]
    payload = datagram[offset + 1:offset + 1 + length]
    if len(payload) != length:
        raise WireError("truncated IPMI 1.5 payload")
    return Packet(auth_type, PAYLOAD_IPMI, session_id, sequence, payload)


# --- RMCP+ session setup (sections 13.17 - 13.23) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenSessionResponse:
    tag: int
    status: int
    console_session_id: int
    bmc_session_id: int
    algorithms: tuple[int, int, int]  # authentication, integrity, confidentiality the BMC chose


def open_session_request(tag: int, console_session_id: int, suite: CipherSuite) -> bytes:
    def algorithm(kind: int, number: int) -> bytes:
        return bytes((kind, 0, 0, 8, number, 0, 0, 0))

    return (bytes((tag, 0, 0, 0)) + struct.pack("<I", console_session_id)  # 0: highest privilege
            + algorithm(0, suite.authentication) + algorithm(1, suite.integrity)
            + algorithm(2, suite.confidentiality))


def parse_open_session_response(payload: bytes) -> OpenSessionResponse:
    if len(payload) < 2:
        raise WireError("empty open session response")
    if payload[1] != 0:  # an error response stops after the console session id
        console = struct.unpack_from("<I", payload, 4)[0] if len(payload) >= 8 else 0
        return OpenSessionResponse(payload[0], payload[1], console, 0, (0, 0, 0))
    if len(payload) < 36:
        raise WireError(f"open session response of {len(payload)} bytes (expected 36)")
    console, bmc = struct.unpack_from("<II", payload, 4)
    return OpenSessionResponse(payload[0], 0, console, bmc, (payload[16], payload[24], payload[32]))


def rakp1(tag: int, bmc_session_id: int, console_random: bytes, role: int, user: bytes) -> bytes:
    return (bytes((tag, 0, 0, 0)) + struct.pack("<I", bmc_session_id) + console_random
            + bytes((role, 0, 0, len(user))) + user)


@dataclass(frozen=True, slots=True)
class Rakp2:
    tag: int
    status: int
    console_session_id: int
    bmc_random: bytes
    bmc_guid: bytes
    auth_code: bytes


def parse_rakp2(payload: bytes) -> Rakp2:
    if len(payload) < 8:
        raise WireError("truncated RAKP message 2")
    console = struct.unpack_from("<I", payload, 4)[0]
    if payload[1] != 0:
        return Rakp2(payload[0], payload[1], console, b"", b"", b"")
    if len(payload) < 40:
        raise WireError(f"RAKP message 2 of {len(payload)} bytes")
    return Rakp2(payload[0], 0, console, bytes(payload[8:24]), bytes(payload[24:40]), bytes(payload[40:]))


def rakp2_auth_code(suite: CipherSuite, password: bytes, console_session_id: int, bmc_session_id: int,
                    console_random: bytes, bmc_random: bytes, bmc_guid: bytes, role: int, user: bytes) -> bytes:
    """What the BMC must send in RAKP2 if it holds the same password (section 13.31)."""
    data = (struct.pack("<II", console_session_id, bmc_session_id) + console_random + bmc_random + bmc_guid
            + bytes((role, len(user))) + user)
    return suite.hmac(password, data)


def session_integrity_key(suite: CipherSuite, kg: bytes, console_random: bytes, bmc_random: bytes, role: int,
                          user: bytes) -> bytes:
    return suite.hmac(kg, console_random + bmc_random + bytes((role, len(user))) + user)


def rakp3(tag: int, bmc_session_id: int, auth_code: bytes) -> bytes:
    return bytes((tag, 0, 0, 0)) + struct.pack("<I", bmc_session_id) + auth_code


def rakp3_auth_code(suite: CipherSuite, password: bytes, bmc_random: bytes, console_session_id: int, role: int,
                    user: bytes) -> bytes:
    return suite.hmac(password, bmc_random + struct.pack("<I", console_session_id) + bytes((role, len(user))) + user)


@dataclass(frozen=True, slots=True)
class Rakp4:
    tag: int
    status: int
    console_session_id: int
    integrity_check: bytes


def parse_rakp4(payload: bytes) -> Rakp4:
    if len(payload) < 8:
        raise WireError("truncated RAKP message 4")
    return Rakp4(payload[0], payload[1], struct.unpack_from("<I", payload, 4)[0], bytes(payload[8:]))


def rakp4_integrity_check(suite: CipherSuite, sik: bytes, console_random: bytes, bmc_session_id: int,
                          bmc_guid: bytes) -> bytes:
    return suite.hmac(sik, console_random + struct.pack("<I", bmc_session_id) + bmc_guid)[:suite.integrity_length]


# --- an open session's packets (sections 13.28 - 13.29) -----------------------------------------


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The keys of one established session: K1 signs every packet, K2's first 16 bytes encrypt."""

    suite: CipherSuite
    k1: bytes
    aes_key: bytes

    @classmethod
    def derive(cls, suite: CipherSuite, sik: bytes) -> SessionKeys:
        # The constants are 20 bytes for every suite (as ipmitool, FreeIPMI and pyghmi use them).
        return cls(suite, suite.hmac(sik, b"\x01" * 20), suite.hmac(sik, b"\x02" * 20)[:AES_BLOCK])

    def seal(self, session_id: int, sequence: int, message: bytes, payload_type: int = PAYLOAD_IPMI) -> bytes:
        """An encrypted, signed packet carrying `message` in session `session_id`."""
        pad_length = -(len(message) + 1) % AES_BLOCK
        plain = message + bytes(range(1, pad_length + 1)) + bytes((pad_length,))
        iv = os.urandom(AES_BLOCK)
        payload = iv + cbc_encrypt(self.aes_key, iv, plain)
        body = (bytes((AUTH_TYPE_RMCP_PLUS, payload_type | PAYLOAD_ENCRYPTED | PAYLOAD_AUTHENTICATED))
                + struct.pack("<IIH", session_id, sequence, len(payload)) + payload)
        integrity_pad = -(len(body) + 2) % 4  # pad, pad length and next header end on 4 bytes
        body += b"\xff" * integrity_pad + bytes((integrity_pad, NEXT_HEADER))
        return RMCP_HEADER + body + self.suite.hmac(self.k1, body)[:self.suite.integrity_length]

    def unseal(self, datagram: bytes) -> tuple[Packet, bytes]:
        """(packet, decrypted message) of a sealed session packet; WireError if it fails its checks."""
        packet = parse_packet(datagram)
        if packet.auth_type != AUTH_TYPE_RMCP_PLUS:
            raise WireError("an IPMI 1.5 packet inside an RMCP+ session")
        wanted = PAYLOAD_ENCRYPTED | PAYLOAD_AUTHENTICATED
        if packet.payload_type & wanted != wanted:
            raise WireError("an unprotected packet inside an RMCP+ session")
        length = self.suite.integrity_length
        signed, code = datagram[4:-length], datagram[-length:]
        if not hmac.compare_digest(self.suite.hmac(self.k1, signed)[:length], code):
            raise WireError("integrity check failed")
        encrypted = packet.payload
        if len(encrypted) < 2 * AES_BLOCK or len(encrypted) % AES_BLOCK:
            raise WireError("encrypted payload is not a whole number of AES blocks")
        plain = cbc_decrypt(self.aes_key, encrypted[:AES_BLOCK], encrypted[AES_BLOCK:])
        pad_length = plain[-1]
        if pad_length >= AES_BLOCK:
            raise WireError("bad confidentiality pad")
        return packet, plain[:-1 - pad_length]
