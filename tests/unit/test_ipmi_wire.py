"""IPMI on the wire (rackform.ipmi.wire): messages, framing, and sealed session packets."""

from __future__ import annotations

import pytest

from provision_support import load_ipmi_modules
from rackform.ipmi import prelogin, wire


def test_checksum_makes_the_bytes_sum_to_zero():
    data = bytes((0x20, 0x18))
    assert (sum(data) + wire.checksum(data)) % 256 == 0


def _response_to(request: bytes, code: int, data: bytes) -> bytes:
    head = bytes((request[3], ((request[1] >> 2) + 1) << 2))
    body = bytes((request[0], request[4], request[5], code)) + data
    return head + bytes((wire.checksum(head),)) + body + bytes((wire.checksum(body),))


def test_a_response_is_matched_to_its_request_by_sequence_and_command():
    request = wire.ipmi_request(0x00, 0x01, sequence=7)
    response = wire.parse_ipmi_response(_response_to(request, 0, b"\x01\x00\x00\x00"))
    assert (response.netfn, response.command, response.sequence, response.completion_code, response.data) == (
        0x01, 0x01, 7, 0, b"\x01\x00\x00\x00")


def test_a_corrupted_response_is_refused():
    message = bytearray(_response_to(wire.ipmi_request(0x00, 0x01, 1), 0, b"\x01"))
    message[-2] ^= 0xFF
    with pytest.raises(wire.WireError, match="checksum"):
        wire.parse_ipmi_response(bytes(message))


def test_sessionless_packet_round_trips():
    message = wire.ipmi_request(0x06, 0x38, 0, b"\x8e\x04")
    assert wire.parse_packet(wire.sessionless_packet(message)).payload == message


@pytest.mark.parametrize("datagram", [b"", b"\x06\x00\xff\x07", b"\x01" * 20, b"\x06\x00\xff\x07\x06\x00" + b"\x00" * 8])
def test_garbage_is_not_a_packet(datagram: bytes):
    with pytest.raises(wire.WireError):
        wire.parse_packet(datagram)


def test_the_fleet_asks_its_first_question_with_the_ansible_modules_own_code():
    """One copy of the pre-login rules: prelogin is the role's module_utils file, loaded as is."""
    shared = load_ipmi_modules()["rackform_ipmi_wire"]
    assert prelogin.parse_auth_capabilities.__code__.co_filename == str(prelogin.MODULE_UTILS_FILE)
    assert prelogin.auth_capabilities_request() == shared.auth_capabilities_request()
    assert [suite.number for suite in wire.SAFE_SUITES] == list(shared.ACCEPTED_CIPHER_SUITES)


def test_sessionless_request_parses_back_as_the_same_message():
    packet = prelogin.auth_capabilities_request(wire.PRIVILEGE_ADMIN, sequence=3)
    parsed = wire.parse_packet(packet)
    assert (parsed.auth_type, parsed.session_id, parsed.payload[5], parsed.payload[6:8]) == (
        wire.AUTH_TYPE_NONE, 0, prelogin.CMD_GET_CHANNEL_AUTH_CAPABILITIES, bytes((0x8E, wire.PRIVILEGE_ADMIN)))


@pytest.mark.parametrize("suite", wire.SAFE_SUITES, ids=lambda s: f"suite{s.number}")
def test_open_session_request_proposes_exactly_the_suites_algorithms(suite: wire.CipherSuite):
    payload = wire.open_session_request(tag=5, console_session_id=0x11223344, suite=suite)
    assert (payload[12], payload[20], payload[28]) == (suite.authentication, suite.integrity, suite.confidentiality)


def test_only_suites_17_and_3_are_ever_proposed():
    assert [suite.number for suite in wire.SAFE_SUITES] == [17, 3]


@pytest.mark.parametrize("suite", wire.SAFE_SUITES, ids=lambda s: f"suite{s.number}")
@pytest.mark.parametrize("message", [b"", b"\x20\x04\xdc\x81\x04\x01\x7a", bytes(range(40))])
def test_sealed_packet_opens_to_the_same_message(suite: wire.CipherSuite, message: bytes):
    keys = wire.SessionKeys.derive(suite, b"k" * 20)
    packet, opened = keys.unseal(keys.seal(0x1234, 9, message))
    assert (opened, packet.session_id, packet.sequence) == (message, 0x1234, 9)


def test_sealed_packet_is_encrypted():
    keys = wire.SessionKeys.derive(wire.SUITE_3, b"k" * 20)
    message = b"chassis status, very secret"
    assert message not in keys.seal(1, 1, message)


def test_tampered_packet_fails_its_integrity_check():
    keys = wire.SessionKeys.derive(wire.SUITE_17, b"k" * 20)
    sealed = bytearray(keys.seal(1, 1, b"\x20\x00\xe0\x81\x04\x01\x7a"))
    sealed[20] ^= 0x01
    with pytest.raises(wire.WireError, match="integrity"):
        keys.unseal(bytes(sealed))


def test_a_packet_signed_with_other_keys_is_refused():
    ours = wire.SessionKeys.derive(wire.SUITE_3, b"a" * 20)
    theirs = wire.SessionKeys.derive(wire.SUITE_3, b"b" * 20)
    with pytest.raises(wire.WireError, match="integrity"):
        ours.unseal(theirs.seal(1, 1, b"\x20\x00\xe0\x81\x04\x01\x7a"))


def test_rakp_codes_depend_on_the_password():
    arguments = dict(console_session_id=1, bmc_session_id=2, console_random=b"r" * 16, bmc_random=b"s" * 16,
                     bmc_guid=b"g" * 16, role=0x14, user=b"ADMIN")
    right = wire.rakp2_auth_code(wire.SUITE_3, b"ADMIN", **arguments)
    wrong = wire.rakp2_auth_code(wire.SUITE_3, b"ADMIN2", **arguments)
    assert right != wrong and len(right) == 20


# --- one copy: the fleet runs the Ansible module's files -----------------------------------------

def test_the_session_packets_and_errors_are_the_roles_module_utils():
    from rackform.ipmi import errors, session
    from rackform.ipmi.module_utils import MODULE_UTILS_DIR

    for function, file in ((session.LanSession.open, "rackform_ipmi_lan.py"),
                           (wire.rakp2_auth_code, "rackform_ipmi_rmcp.py"),
                           (errors.ipmi15_only, "rackform_ipmi_errors.py")):
        assert function.__code__.co_filename == str(MODULE_UTILS_DIR / file)


# --- AES-CBC-128 without `cryptography` (what the module falls back to) ----------------------------

def test_the_pure_python_aes_gives_the_fips_197_vector():
    from rackform.ipmi.module_utils import load

    aes = load("rackform_ipmi_aes")
    key, plain = bytes(range(16)), bytes.fromhex("00112233445566778899aabbccddeeff")
    assert aes.pure_cbc_encrypt(key, bytes(16), plain).hex() == "69c4e0d86a7b0430d8cdb78070b4c55a"


def test_the_pure_python_aes_agrees_with_cryptography_both_ways():
    import os

    from rackform.ipmi.module_utils import load

    aes = load("rackform_ipmi_aes")
    assert aes.Cipher is not None  # rackform's own runs use cryptography
    for blocks in (1, 2, 5):
        key, iv, plain = os.urandom(16), os.urandom(16), os.urandom(16 * blocks)
        sealed = aes.cbc_encrypt(key, iv, plain)
        assert aes.pure_cbc_encrypt(key, iv, plain) == sealed
        assert aes.pure_cbc_decrypt(key, iv, sealed) == plain
