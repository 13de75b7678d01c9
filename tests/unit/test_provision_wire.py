"""The questions rackform asks a BMC before any login: packets, parsing, and a real UDP
exchange with the fake BMC (rackform.ipmi.fakebmc, in the modes the lab starts it in) on
the loopback, in process and as the lab starts it: `python -m rackform.ipmi.fakebmc`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from provision_support import REPO, load_ipmi_modules
from rackform.ipmi.fakebmc import MODES, FakeBmc, FakeBmcConfig

wire = load_ipmi_modules()["rackform_ipmi_wire"]

# ipmi_sim's answer to Get Channel Cipher Suites, page 0 (records of suites 0, 1, 2 and the start of 3).
IPMI_SIM_PAGE_0 = bytes.fromhex("c0 00 00 40 80 c0 01 01 40 80 c0 02 01 41 80 c0".replace(" ", ""))
IPMI_SIM_PAGE_1 = bytes.fromhex("03 01 41 81".replace(" ", ""))


def test_request_packet_is_ipmi_15_sessionless_with_valid_checksums():
    packet = wire.request_packet(0x38, [0x8E, 0x04], sequence=5)
    message = packet[14:]
    assert (packet[:5], packet[13], sum(message[:3]) & 0xFF, sum(message[3:]) & 0xFF, message[5]) == (
        bytes([6, 0, 0xFF, 7, 0]), len(message), 0, 0, 0x38)


@pytest.mark.parametrize(("data", "versions"), [
    (bytes([0x01, 0x84, 0x05, 0x03]), (True, True)),
    (bytes([0x01, 0x80, 0x04, 0x02]), (True, False)),
    (bytes([0x01, 0x04, 0x04, 0x00]), (False, True)),  # no extended data: an IPMI 1.5 BMC
])
def test_auth_capabilities_say_which_ipmi_versions_a_bmc_speaks(data, versions):
    capabilities = wire.parse_auth_capabilities(data)
    assert (capabilities.ipmi20, capabilities.ipmi15) == versions


def test_null_user_and_anonymous_login_are_reported():
    capabilities = wire.parse_auth_capabilities(bytes((1, 0x84, 0x03, 0x02, 0, 0, 0, 0)))
    assert (capabilities.channel, capabilities.null_user_names, capabilities.anonymous_login) == (1, True, True)


def test_a_short_capabilities_answer_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="3 bytes"):
        wire.parse_auth_capabilities(bytes((1, 0x84, 0x03)))


@pytest.mark.parametrize("corrupt_at", [2, -1])
def test_a_response_failing_either_checksum_is_ignored(corrupt_at):
    request = wire.request_message(wire.NETFN_APP, 0x38, 1)
    head = bytes((request[3], (wire.NETFN_APP + 1) << 2))
    body = bytes((request[0], request[4], 0x38, 0)) + bytes(8)
    message = bytearray(head + bytes((wire.checksum(head),)) + body + bytes((wire.checksum(body),)))
    assert wire.response_data(wire.sessionless_frame(bytes(message)), 0x38) == (0, bytes(8))
    message[corrupt_at] ^= 0x01
    assert wire.response_data(wire.sessionless_frame(bytes(message)), 0x38) is None


def test_cipher_suite_records_across_pages():
    assert wire.parse_cipher_suite_records(IPMI_SIM_PAGE_0 + IPMI_SIM_PAGE_1) == (0, 1, 2, 3)


def test_oem_cipher_suite_records_are_skipped_over_their_iana_number():
    records = bytes([0xC1, 0x80, 0x57, 0x01, 0x00, 0x01, 0x41, 0x81, 0xC0, 0x11, 0x03, 0x44, 0x81])
    assert wire.parse_cipher_suite_records(records) == (0x80, 17)


@pytest.mark.parametrize(("capabilities", "refused"), [
    (wire.Capabilities(False, True, None), "IPMI 1.5"),
    (wire.Capabilities(True, True, (0,)), "suite 0 (no authentication"),
    (wire.Capabilities(True, True, (0, 1, 2)), "offers cipher suites 0, 1, 2"),
])
def test_refusals(capabilities, refused):
    assert refused in wire.refusal(capabilities)


@pytest.mark.parametrize("suites", [(0, 1, 2, 3), (17,), None])
def test_bmcs_offering_3_or_17_or_not_listing_are_let_through(suites):
    assert wire.refusal(wire.Capabilities(True, True, suites)) is None


def test_refusal_follows_the_accepted_list():
    assert wire.refusal(wire.Capabilities(True, True, (3,)), accepted=(17,)) is not None


# --- over UDP --------------------------------------------------------------------------------------

@pytest.fixture
def fake_bmc():
    started = []

    def start(mode: str) -> FakeBmc:
        bmc = FakeBmc(MODES[mode])
        bmc.start()
        started.append(bmc)
        return bmc

    yield start
    for bmc in started:
        bmc.stop()


def test_probe_reads_a_suite_0_only_bmc(fake_bmc):
    bmc = fake_bmc("suite0")
    capabilities = wire.probe("127.0.0.1", bmc.port, timeout_s=1.0)
    assert capabilities.as_dict() == {"ipmi_versions": ["2.0"], "offered_cipher_suites": [0]}


def test_probe_reads_an_ipmi_15_bmc(fake_bmc):
    bmc = fake_bmc("ipmi15")
    capabilities = wire.probe("127.0.0.1", bmc.port, timeout_s=1.0)
    assert (capabilities.ipmi20, capabilities.cipher_suites) == (False, None)


def test_probe_asks_no_login(fake_bmc):
    bmc = fake_bmc("suite0")
    wire.probe("127.0.0.1", bmc.port, timeout_s=1.0)
    assert bmc.requests == ["auth-capabilities", "cipher-suites"]


def test_probe_accepts_a_bmc_that_does_not_list_its_suites(fake_bmc):
    bmc = fake_bmc("silent-list")
    assert wire.probe("127.0.0.1", bmc.port, timeout_s=1.0).cipher_suites is None


def test_probe_reads_a_list_longer_than_one_page():
    bmc = FakeBmc(FakeBmcConfig(suites=frozenset({0, 1, 2, 3, 17})))  # 25 bytes of records: 2 pages
    bmc.start()
    try:
        capabilities = wire.probe("127.0.0.1", bmc.port, timeout_s=1.0)
    finally:
        bmc.stop()
    assert (capabilities.cipher_suites, bmc.requests.count("cipher-suites")) == ((0, 1, 2, 3, 17), 2)


def test_an_ipmi_15_bmc_ignores_rmcp_plus(fake_bmc):
    bmc = fake_bmc("ipmi15")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(0.3)
        client.sendto(wire.plain_rmcp_plus(0x10, bytes(32)), ("127.0.0.1", bmc.port))
        with pytest.raises(TimeoutError):
            client.recv(1024)
    assert bmc.requests == ["open-session"]


@pytest.mark.parametrize(("mode", "versions", "suites", "refused"), [
    ("suite0", ["2.0"], [0], "rackform refuses suite 0"),
    ("ipmi15", ["1.5"], None, "speaks only IPMI 1.5"),
    ("silent-list", ["2.0"], None, None),
])
def test_the_fake_as_the_lab_starts_it(mode, versions, suites, refused):
    """`python -m rackform.ipmi.fakebmc` prints where it listens, then a word per request; the probe reads it."""
    process = subprocess.Popen([sys.executable, "-m", "rackform.ipmi.fakebmc", "--address", "127.0.0.1",
                                "--port", "0", "--mode", mode], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        listening = process.stdout.readline()
        assert listening.startswith("listening on 127.0.0.1:") and listening.rstrip().endswith(f"({mode})")
        port = int(listening.split()[2].rsplit(":", 1)[1])
        capabilities = wire.probe("127.0.0.1", port, timeout_s=1.0)
    finally:
        process.terminate()
        words = process.communicate(timeout=10)[0].split()
    assert capabilities.as_dict() == {"ipmi_versions": versions, "offered_cipher_suites": suites}
    refusal = wire.refusal(capabilities)
    assert refusal is None if refused is None else refused in refusal
    assert "open-session" not in words and words[0] == "auth-capabilities"


def test_the_fake_says_why_it_cannot_listen():
    done = subprocess.run([sys.executable, "-m", "rackform.ipmi.fakebmc", "--address", "192.0.2.1", "--port", "0",
                           "--mode", "suite0"], capture_output=True, text=True, cwd=REPO, timeout=30)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("fakebmc: cannot listen on 192.0.2.1:0: ") and "Traceback" not in done.stderr


def test_probe_of_a_bmc_that_never_answers_gives_up_after_its_attempts():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as mute:
        mute.bind(("127.0.0.1", 0))
        started = time.monotonic()
        with pytest.raises(wire.BmcSilent, match=r"no answer .* to 2 requests of 0.2 s each"):
            wire.probe("127.0.0.1", mute.getsockname()[1], timeout_s=0.2, attempts=2)
    assert time.monotonic() - started < 2.0


def test_probe_of_a_closed_port_fails_at_once():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as gone:
        gone.bind(("127.0.0.1", 0))
        port = gone.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(wire.BmcSilent):
        wire.probe("127.0.0.1", port, timeout_s=1.0, attempts=3)
    assert time.monotonic() - started < 1.0
