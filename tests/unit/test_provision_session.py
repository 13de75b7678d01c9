"""Logging in and giving up: login order, retries with backoff, error kinds, the per-BMC
lock, and the module's refusal of insecure arguments (rackform's IPMI module)."""

from __future__ import annotations

import pytest

from provision_support import load_ipmi_modules

MODULES = load_ipmi_modules()
session = MODULES["rackform_ipmi_session"]
wire = MODULES["rackform_ipmi_wire"]
module = MODULES["rackform_ipmi"]
Credential = session.Credential

TWENTY = "Ab3dEf6hIj9lMn2pQr5t"


def login_accepting(*accepted: tuple[str, str], tried: list | None = None):
    def login(address, port, credential):
        if tried is not None:
            tried.append((credential.user, credential.password))
        if (credential.user, credential.password) in accepted:
            return f"session as {credential.user}", 3
        raise session.BmcAuthRejected(f"{address}: Incorrect password provided")

    return login


# --- first_login ---------------------------------------------------------------------------------

def test_first_login_stops_at_the_first_accepted_credential():
    tried: list = []
    credentials = [Credential("rackform", TWENTY, "site"), Credential("ADMIN", "ADMIN", "factory")]
    result = session.first_login("bmc", 623, credentials, login_accepting(("ADMIN", "ADMIN"), tried=tried))
    assert (result[2].label, tried) == ("factory", [("rackform", TWENTY), ("rackform", TWENTY[:16]),
                                                    ("ADMIN", "ADMIN")])


def test_first_login_tries_the_first_16_bytes_of_a_longer_password():
    result = session.first_login("bmc", 623, [Credential("rackform", TWENTY, "site")],
                                 login_accepting(("rackform", TWENTY[:16])))
    assert (result[2].label, result[3]) == ("site", 16)


def test_first_login_reports_the_full_length_when_the_bmc_takes_it():
    result = session.first_login("bmc", 623, [Credential("rackform", TWENTY, "site")],
                                 login_accepting(("rackform", TWENTY)))
    assert result[3] == 20


def test_first_login_names_every_credential_it_tried():
    with pytest.raises(session.BmcAuthRejected, match=r"\(site, factory\)"):
        session.first_login("bmc", 623, [Credential("rackform", TWENTY, "site"), Credential("ADMIN", "x", "factory")],
                            login_accepting())


def test_a_silent_bmc_stops_the_login_order_at_once():
    tried: list = []

    def silent(address, port, credential):
        tried.append(credential.label)
        raise wire.BmcSilent(f"{address}: no answer")

    with pytest.raises(wire.BmcSilent):
        session.first_login("bmc", 623, [Credential("a", "b", "site"), Credential("c", "d", "factory")], silent)
    assert tried == ["site"]


def test_credential_repr_hides_the_password():
    assert TWENTY not in repr(Credential("rackform", TWENTY, "site"))


# --- with_retries ---------------------------------------------------------------------------------

class Flaky:
    def __init__(self, *errors):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_a_silent_bmc_is_retried_with_doubling_waits_capped():
    waits: list[float] = []
    attempt = Flaky(*[wire.BmcSilent("x: no answer")] * 4)
    assert session.with_retries(attempt, 4, 1.0, 3.0, sleep=waits.append) == "done"
    assert waits == [1.0, 2.0, 3.0, 3.0]


def test_retries_are_bounded_and_the_message_counts_the_tries():
    attempt = Flaky(*[wire.BmcSilent("x: no answer")] * 10)
    with pytest.raises(wire.BmcSilent, match=r"gave up after 3 tries"):
        session.with_retries(attempt, 2, 0.0, 0.0, sleep=lambda _: None)
    assert attempt.calls == 3


def test_rejected_logins_are_retried_fewer_times():
    attempt = Flaky(*[session.BmcAuthRejected("x: rejected")] * 10)
    with pytest.raises(session.BmcAuthRejected, match="gave up after 2 tries"):
        session.with_retries(attempt, 5, 0.0, 0.0, auth_retries=1, sleep=lambda _: None)


def test_an_insecure_bmc_is_never_retried():
    attempt = Flaky(wire.BmcInsecure("x: suite 0 only"))
    with pytest.raises(wire.BmcInsecure):
        session.with_retries(attempt, 5, 0.0, 0.0, sleep=lambda _: None)
    assert attempt.calls == 1


# --- classify -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("reason", "kind"), [
    ("AUTH_REJECTED", "BmcAuthRejected"),
    ("SUITE_REFUSED", "BmcInsecure"),
    ("UNREACHABLE", "BmcSilent"),
    ("TIMEOUT", "BmcSilent"),
    ("PROTOCOL", "BmcSilent"),
])
def test_classify(reason, kind):
    errors = MODULES["rackform_ipmi_errors"]
    classified = session.classify(errors.IpmiError(errors.Reason[reason], "10.61.1.11: what happened"))
    assert (type(classified).__name__, str(classified)) == (kind, "10.61.1.11: what happened")


# --- the per-BMC lock ------------------------------------------------------------------------------

def test_a_second_holder_of_a_bmc_lock_waits_then_gives_up(tmp_path):
    with session.bmc_lock(str(tmp_path), "10.61.1.11", 1.0):
        with pytest.raises(wire.BmcSilent, match="another rackform process"):
            with session.bmc_lock(str(tmp_path), "10.61.1.11", 0.1):
                pass


def test_locks_of_two_bmcs_are_independent(tmp_path):
    with session.bmc_lock(str(tmp_path), "10.61.1.11", 1.0):
        with session.bmc_lock(str(tmp_path), "10.61.1.12", 0.1) as second:
            assert second.handle is not None


# --- module arguments -------------------------------------------------------------------------------

def arguments(**overrides) -> dict:
    values = {"action": "harden", "user": "rackform", "password": TWENTY, "cipher_suites": [17, 3],
              "factory_credentials": [{"user": "ADMIN", "password": "ADMIN"}], "power": None,
              "boot_device": None, "min_password_bytes": 16, "previous_passwords": []}
    values.update(overrides)
    return values


@pytest.mark.parametrize("suites", [[0], [3, 0], [1], [2, 17]])
def test_cipher_suites_other_than_3_and_17_are_refused(suites):
    assert "rackform uses only suites 17 and 3" in module.parameter_problem(arguments(cipher_suites=suites))


def test_the_refusal_of_suite_0_says_why():
    assert "any password logs in" in module.parameter_problem(arguments(cipher_suites=[0]))


@pytest.mark.parametrize(("overrides", "problem"), [
    ({"cipher_suites": []}, "cipher_suites is empty"),
    ({"password": None}, "needs user and password"),
    ({"user": "a-very-long-user-name"}, "longer than IPMI's 16 bytes"),
    ({"user": "ADMIN"}, "must not be a factory account"),
    ({"action": "power"}, "action power needs power"),
    ({"action": "boot"}, "action boot needs boot_device"),
    ({"min_password_bytes": 12}, "between 16 and 20"),
])
def test_unusable_arguments_are_named(overrides, problem):
    assert problem in module.parameter_problem(arguments(**overrides))


def test_good_arguments_pass():
    assert module.parameter_problem(arguments()) is None


def test_login_order_is_site_then_previous_then_factory():
    found = module.credentials(arguments(previous_passwords=["old"]), "harden")
    assert [c.label for c in found] == ["site", "previous site password 1", "factory account 'ADMIN'"]


def test_power_and_boot_never_use_the_factory_login():
    assert [c.label for c in module.credentials(arguments(), "power")] == ["site"]


def test_every_password_argument_is_declared_no_log():
    spec = module.ARGUMENT_SPEC
    assert (spec["password"]["no_log"], spec["previous_passwords"]["no_log"],
            spec["factory_credentials"]["options"]["password"]["no_log"]) == (True, True, True)


# --- the module's session against a BMC that takes neither suite 17 nor 3 -------------------------

def test_login_proposes_only_suites_17_and_3_and_reports_the_refusal():
    from rackform.ipmi.fakebmc import MODES, FakeBmc

    with FakeBmc(MODES["silent-list"]) as bmc:
        with pytest.raises(wire.BmcInsecure, match="accepts neither cipher suite 17 nor 3"):
            session.login("127.0.0.1", bmc.port, Credential("rackform", TWENTY, "site"))
    assert bmc.requests.count("open-session") == 2  # SHA-256 (17), then SHA-1 (3); never suite 0


# --- the module's commands, as bytes on the wire (IPMI 2.0 sections 22.26-22.30, 28.12) ------------

class RecordingSession:
    def __init__(self, answers=None):
        self.sent = []
        self.answers = answers or {}

    def raw_command(self, netfn, command, data=()):
        self.sent.append((netfn, command, bytes(data)))
        return {"code": 0, "data": bytearray(self.answers.get((netfn, command), b""))}


def commands(answers=None):
    recorder = RecordingSession(answers)
    return MODULES["rackform_ipmi_commands"].BmcCommands(recorder), recorder


def test_a_20_byte_password_is_sent_in_the_20_byte_form():
    ipmi, sent = commands()
    ipmi.set_user_password(3, mode="set_password", password=TWENTY)
    assert sent.sent == [(0x06, 0x47, bytes([0x83, 2]) + TWENTY.encode())]


def test_a_short_password_is_padded_to_16_bytes_and_enable_sends_no_password():
    ipmi, sent = commands()
    ipmi.set_user_password(2, mode="set_password", password="ADMIN")
    ipmi.set_user_password(2, mode="enable")
    assert sent.sent == [(0x06, 0x47, bytes([2, 2]) + b"ADMIN" + bytes(11)), (0x06, 0x47, bytes([2, 1]))]


def test_user_access_and_name_bytes():
    ipmi, sent = commands()
    ipmi.set_user_access(3, 1, callback=False, link_auth=False, ipmi_msg=True, privilege_level="administrator")
    ipmi.set_user_access(2, 1, callback=False, link_auth=False, ipmi_msg=False, privilege_level="no_access")
    ipmi.set_user_name(3, "rackform")
    assert sent.sent == [(0x06, 0x43, bytes([0x91, 3, 4, 0])), (0x06, 0x43, bytes([0x81, 2, 0x0F, 0])),
                         (0x06, 0x45, bytes([3]) + b"rackform" + bytes(8))]


def test_user_names_are_read_up_to_the_first_nul():
    ipmi, _ = commands({(0x06, 0x46): b"ADMIN" + bytes(11)})
    assert ipmi.get_user_name(2) == "ADMIN"


def test_one_time_pxe_and_the_boot_flags_read_back():
    ipmi, sent = commands({(0x00, 0x09): bytes([1, 5, 0x80, 0x04, 0, 0, 0])})
    ipmi.set_bootdev("network", persist=False)
    assert sent.sent == [(0x00, 0x08, bytes([3, 8])), (0x00, 0x08, bytes([5, 0x80, 0x04, 0, 0, 0]))]
    assert ipmi.get_bootdev() == {"bootdev": "network", "persistent": False, "uefimode": False}


def test_boot_flags_without_their_valid_bit_read_as_no_override():
    ipmi, _ = commands({(0x00, 0x09): bytes([1, 5, 0x00, 0x04, 0, 0, 0])})  # what ipmi_sim reports
    assert ipmi.get_bootdev() == {"bootdev": "default", "persistent": True}


def test_the_lan_channel_is_found_by_its_medium():
    recorder = RecordingSession()
    recorder.raw_command = lambda netfn, command, data=(): {
        "code": 0, "data": bytearray([data[0], 0x04 if data[0] == 2 else 0x05, 0x01])}
    ipmi = MODULES["rackform_ipmi_commands"].BmcCommands(recorder)
    assert ipmi.get_network_channel() == 2
