"""One RMCP+ session (rackform.ipmi.session) against the in-process fake BMC.

The cipher policy (17, else 3, nothing else; IPMI 2.0 only), each failure's reason, and
that no failure message carries the password. ipmi_sim (tests/lab) is the reference for
suite 3 against a real implementation; suite 17 and the refusals are only testable here.
"""

from __future__ import annotations

import logging
import socket

import pytest

from rackform.ipmi.credentials import Credentials
from rackform.ipmi.errors import IpmiError, Reason
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.ipmi.session import LanSession, Timeouts

PASSWORD = "Zq8-unique-secret-42"
LOGIN = Credentials("ADMIN", PASSWORD)
QUICK = Timeouts(reply_s=0.2, resends=1)


def bmc(**options) -> FakeBmc:
    return FakeBmc(FakeBmcConfig(password=PASSWORD, **options))


def session_to(fake: FakeBmc, credentials: Credentials = LOGIN) -> LanSession:
    return LanSession(fake.address, credentials, port=fake.port, timeouts=QUICK)


def failure(fake: FakeBmc, credentials: Credentials = LOGIN) -> IpmiError:
    with pytest.raises(IpmiError) as raised:
        session_to(fake, credentials).open()
    return raised.value


def test_suite_17_is_preferred():
    with bmc() as fake, session_to(fake) as session:
        assert session.suite.number == 17


def test_suite_3_when_the_bmc_lacks_17():
    with bmc(suites=frozenset({3})) as fake, session_to(fake) as session:
        assert session.suite.number == 3


def test_a_bmc_offering_only_suite_0_is_refused():
    with bmc(suites=frozenset({0})) as fake:
        error = failure(fake)
    assert error.reason is Reason.SUITE_REFUSED and "suite 0" in error.message


def test_a_suite_0_bmc_never_sees_a_login():
    with bmc(suites=frozenset({0})) as fake:
        failure(fake)
        assert fake.logins == 0


def test_an_ipmi_15_only_bmc_is_refused_before_any_credential_is_sent():
    with bmc(ipmi20=False) as fake:
        error = failure(fake)
        assert (error.reason, fake.commands, fake.logins) == (Reason.SUITE_REFUSED, [], 0)
    assert "IPMI 1.5" in error.message


def test_wrong_password_is_auth_rejected():
    with bmc() as fake:
        assert failure(fake, Credentials("ADMIN", "not-it")).reason is Reason.AUTH_REJECTED


def test_unknown_user_is_auth_rejected():
    with bmc() as fake:
        error = failure(fake, Credentials("nobody", PASSWORD))
    assert error.reason is Reason.AUTH_REJECTED and "unauthorized name" in error.message


def test_silence_from_the_start_is_unreachable():
    with bmc(answer_packets=0) as fake:
        assert failure(fake).reason is Reason.UNREACHABLE


def test_an_address_with_no_bmc_listening_is_unreachable():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    # Nothing listens on that port now: the kernel answers with ICMP port unreachable.
    with pytest.raises(IpmiError) as raised:
        LanSession("127.0.0.1", LOGIN, port=port, timeouts=QUICK).open()
    assert raised.value.reason is Reason.UNREACHABLE


def test_a_bmc_that_stops_answering_mid_login_times_out():
    with bmc(answer_packets=3) as fake:  # probe, open session, RAKP2; then silence
        assert failure(fake).reason is Reason.TIMEOUT


def test_a_bmc_that_stops_answering_mid_session_times_out():
    with bmc(answer_packets=5) as fake, session_to(fake) as session:
        with pytest.raises(IpmiError) as raised:
            session.command(0x00, 0x01)
    assert raised.value.reason is Reason.TIMEOUT


def test_close_logs_out():
    with bmc() as fake:
        with session_to(fake):
            assert fake.open_sessions == 1
        assert (fake.open_sessions, fake.closed_sessions) == (0, 1)


def test_an_error_completion_code_raises_command_failed():
    with bmc() as fake, session_to(fake) as session:
        with pytest.raises(IpmiError) as raised:
            session.command(0x30, 0x99)  # not a command the fake knows
    assert (raised.value.reason, raised.value.completion_code) == (Reason.COMMAND_FAILED, 0xC1)


def test_raw_command_speaks_pyghmis_dialect():
    with bmc() as fake, session_to(fake) as session:
        reply = session.raw_command(netfn=0x06, command=0x01)
    assert (reply["netfn"], reply["command"], reply["code"], "error" in reply) == (0x07, 0x01, 0, False)


def test_raw_command_reports_errors_as_pyghmi_does():
    with bmc() as fake, session_to(fake) as session:
        reply = session.raw_command(netfn=0x30, command=0x99)
    assert reply["code"] == 0xC1 and reply["error"]


@pytest.mark.parametrize("options", [{"suites": frozenset({0})}, {"ipmi20": False}, {"answer_packets": 3},
                                     {"password": "other"}, {"user": "root"}])
def test_no_failure_message_carries_the_password(options: dict):
    config = FakeBmcConfig(**{"password": PASSWORD, **options})
    with FakeBmc(config) as fake:
        error = failure(fake)
    assert PASSWORD not in str(error) and PASSWORD not in repr(error)


def test_session_repr_hides_the_password():
    assert PASSWORD not in repr(LanSession("10.0.0.1", LOGIN))


def test_credentials_repr_hides_the_password():
    assert PASSWORD not in repr(LOGIN) and PASSWORD not in str(LOGIN)


def test_debug_logs_carry_no_password(caplog):
    caplog.set_level(logging.DEBUG, logger="rackform.ipmi")
    with bmc() as fake, session_to(fake) as session:
        session.command(0x00, 0x01)
    assert caplog.records and PASSWORD not in caplog.text


@pytest.mark.parametrize(("user", "password"), [("u" * 17, "p"), ("ADMIN", "p" * 21)])
def test_credentials_over_ipmi_limits_are_refused(user: str, password: str):
    with pytest.raises(ValueError, match="longer than"):
        Credentials(user, password)


def test_logins_try_the_password_then_its_first_16_bytes_then_the_previous_ones():
    credentials = Credentials("ADMIN", "A" * 20, previous=("old-one", "B" * 18))
    assert [login.password for login in credentials.logins()] == ["A" * 20, "A" * 16, "old-one", "B" * 18, "B" * 16]


def test_previous_passwords_stay_out_of_repr():
    assert "old-one" not in repr(Credentials("ADMIN", "new", previous=("old-one",)))


# --- the BMC key (K_g) and the BMC's session sequence numbers -----------------------------------

KG = b"0123456789abcdefghij"


@pytest.mark.parametrize("suite", [17, 3])
def test_a_bmc_with_a_kg_logs_in_with_the_same_key(suite):
    with FakeBmc(FakeBmcConfig(suites=frozenset({suite}), kg=KG, power="on")) as fake:
        with LanSession(fake.address, Credentials("ADMIN", "ADMIN"), port=fake.port, kg=KG) as session:
            assert session.command(0x00, 0x01)[0] & 0x01 == 1


def test_a_wrong_kg_is_an_auth_rejection_naming_the_key():
    with FakeBmc(FakeBmcConfig(kg=KG)) as fake:
        session = LanSession(fake.address, Credentials("ADMIN", "ADMIN"), port=fake.port, kg=b"another key")
        with pytest.raises(IpmiError, match="another BMC key") as caught:
            session.open()
        assert caught.value.reason is Reason.AUTH_REJECTED


def test_no_kg_against_a_bmc_with_one_fails_the_login():
    with FakeBmc(FakeBmcConfig(kg=KG)) as fake:
        with pytest.raises(IpmiError):
            LanSession(fake.address, Credentials("ADMIN", "ADMIN"), port=fake.port).open()


def test_a_reply_with_a_session_sequence_seen_before_is_dropped():
    with FakeBmc(FakeBmcConfig(repeat_sequence=True, power="on")) as fake:
        timeouts = Timeouts(reply_s=0.2, resends=0)
        with LanSession(fake.address, Credentials("ADMIN", "ADMIN"), port=fake.port, timeouts=timeouts) as session:
            # the login's Set Session Privilege reply carried sequence 1; every later reply repeats it
            with pytest.raises(IpmiError) as caught:
                session.command(0x00, 0x01)
            assert caught.value.reason is Reason.TIMEOUT


def test_sequence_window_accepts_late_packets_once():
    session = LanSession("192.0.2.1", Credentials("ADMIN", "ADMIN"))
    accepted = [session._fresh(n) for n in (1, 3, 2, 3, 40, 30, 24, 0)]
    assert accepted == [True, True, True, False, True, True, False, False]
