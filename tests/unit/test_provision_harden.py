"""BMC hardening as rackform's IPMI module does it, against an in-memory BMC.

The module's own `Run` drives each case (probe, login order, harden), with the network
parts replaced: `probe` answers what a given BMC offers and `login` checks credentials
against the FakeBmc's users the way RAKP does.
"""

from __future__ import annotations

import pytest

from provision_support import FakeBmc, FakeUser, fake_login, load_ipmi_modules

MODULES = load_ipmi_modules()
module = MODULES["rackform_ipmi"]
wire = MODULES["rackform_ipmi_wire"]
session = MODULES["rackform_ipmi_session"]
users = MODULES["rackform_ipmi_users"]

SITE_PASSWORD = "Kq3vT9xLw2Zp7RbN4sYd"  # 20 characters, like the vault's
OLD_PASSWORD = "Hh5jP8nC1mX6qW3eR0tY"
ADDRESS = "10.61.1.11"


class StubModule:
    def __init__(self, **params):
        self.params = params


def params(**overrides) -> dict:
    values = {
        "action": "harden", "address": ADDRESS, "port": 623, "user": "rackform", "password": SITE_PASSWORD,
        "previous_passwords": [], "factory_credentials": [{"user": "ADMIN", "password": "ADMIN"}],
        "admin_user_id": 3, "min_password_bytes": 16, "cipher_suites": [17, 3], "power": None,
        "power_timeout_s": 5.0, "boot_device": None, "boot_persistent": False, "boot_uefi": False,
        "answer_timeout_s": 0.1, "answer_attempts": 1, "retries": 0, "auth_retries": 0, "backoff_s": 0.0,
        "max_backoff_s": 0.0, "lock_dir": None, "lock_timeout_s": 1.0, "exceptions": [],
    }
    values.update(overrides)
    return values


@pytest.fixture
def run_on(monkeypatch):
    """run_on(bmc, **params) -> the finished Run (raises what the module would report)."""

    def run(bmc: FakeBmc, logins: list | None = None, capabilities=None, **overrides):
        offered = capabilities or wire.Capabilities(True, True, (0, 1, 2, 3))
        monkeypatch.setattr(module, "probe", lambda *args: offered)
        monkeypatch.setattr(module, "login", fake_login(bmc, session, logins))
        monkeypatch.setattr(module, "suite0_gets_in", lambda *args: bmc.suite0_gets_in())
        harden_run = module.Run(StubModule(**params(**overrides)))
        harden_run.attempt()
        return harden_run

    return run


def hardened(run_on) -> FakeBmc:
    bmc = FakeBmc.factory()
    run_on(bmc)
    bmc.writes.clear()
    return bmc


# --- first contact -----------------------------------------------------------------------------

def test_first_contact_creates_the_site_admin_in_slot_3(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc)
    admin = bmc.users[3]
    assert (admin.name, admin.privilege, admin.ipmi_messaging, admin.enabled) == ("rackform", 4, True, True)


def test_first_contact_sets_the_vault_password(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc)
    assert bmc.accepts("rackform", SITE_PASSWORD)


def test_first_contact_disables_the_null_user(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc)
    null = bmc.users[1]
    assert (null.enabled, null.privilege, null.ipmi_messaging) == (False, 0x0F, False)


def test_first_contact_disables_the_factory_user_and_scrambles_its_password(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc)
    factory = bmc.users[2]
    assert (factory.enabled, factory.privilege, factory.password == b"ADMIN") == (False, 0x0F, False)


def test_factory_login_no_longer_works(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc)
    assert not bmc.accepts("ADMIN", "ADMIN")


def test_first_contact_reports_each_change(run_on):
    result = run_on(FakeBmc.factory())
    words = ["created the site admin 'rackform' as user id 3", "password", "administrator access",
             "null user", "factory user 'ADMIN' (id 2)"]
    assert [any(word in change for change in result.result["changes"]) for word in words] == [True] * 5


def test_the_new_account_is_proven_before_the_factory_user_is_disabled(run_on):
    bmc = FakeBmc.factory()
    logins: list = []
    run_on(bmc, logins)
    site_login = logins.index(("rackform", "site", 20), 2)  # after the first (rejected) site logins
    disable = bmc.writes.index("password 2 disable")
    assert site_login == 3 and disable > bmc.writes.index("access 3 administrator")


def test_a_bmc_that_does_not_take_the_new_password_keeps_its_factory_user(run_on):
    bmc = FakeBmc.factory(refuse_password_change=True)
    with pytest.raises(session.BmcAuthRejected):
        run_on(bmc)
    assert bmc.accepts("ADMIN", "ADMIN")


# --- a second run -----------------------------------------------------------------------------

def test_second_run_writes_nothing(run_on):
    bmc = hardened(run_on)
    run_on(bmc)
    assert bmc.writes == []


def test_second_run_reports_no_change(run_on):
    bmc = hardened(run_on)
    assert run_on(bmc).changed is False


def test_second_run_logs_in_with_the_site_password_first(run_on):
    bmc = hardened(run_on)
    logins: list = []
    run_on(bmc, logins)
    assert logins == [("rackform", "site", 20)]


def test_a_re_enabled_factory_user_is_disabled_again(run_on):
    bmc = hardened(run_on)
    bmc.users[2] = FakeUser("ADMIN", b"ADMIN", True, 4, True)
    result = run_on(bmc)
    assert (result.changed, bmc.users[2].enabled) == (True, False)


def test_a_bmc_without_enable_bits_is_judged_by_its_access(run_on):
    bmc = FakeBmc.factory(reports_enable_bits=False)
    run_on(bmc)
    bmc.writes.clear()
    run_on(bmc)
    assert bmc.writes == []


# --- BMCs that keep 16 bytes of a password ------------------------------------------------------

def test_a_16_byte_bmc_is_logged_in_with_the_first_16_characters(run_on):
    bmc = FakeBmc.factory(password_bytes=16)
    result = run_on(bmc)
    assert (result.facts["password_bytes"], bmc.accepts("rackform", SITE_PASSWORD[:16])) == (16, True)


def test_a_16_byte_bmc_second_run_writes_nothing(run_on):
    bmc = FakeBmc.factory(password_bytes=16)
    run_on(bmc)
    bmc.writes.clear()
    run_on(bmc)
    assert bmc.writes == []


def test_a_16_byte_bmc_is_refused_when_the_site_asks_for_20(run_on):
    with pytest.raises(users.HardenError, match="keeps only the first 16 bytes"):
        run_on(FakeBmc.factory(password_bytes=16), min_password_bytes=20)


# --- rotation and wrong passwords ---------------------------------------------------------------

def test_rotation_logs_in_with_the_previous_password_and_sets_the_new_one(run_on):
    bmc = FakeBmc.factory()
    run_on(bmc, password=OLD_PASSWORD)
    result = run_on(bmc, previous_passwords=[OLD_PASSWORD])
    assert (result.changed, bmc.accepts("rackform", SITE_PASSWORD), bmc.accepts("rackform", OLD_PASSWORD)) == (
        True, True, False)


def test_wrong_passwords_everywhere_fail_with_the_credentials_tried(run_on):
    bmc = hardened(run_on)
    with pytest.raises(session.BmcAuthRejected, match=r"rejected every credential .*\(site, factory account 'ADMIN'\)"):
        run_on(bmc, password="Wrong0000000000000000")


def test_power_refuses_a_bmc_not_hardened_yet(run_on):
    with pytest.raises(session.BmcAuthRejected, match="run the harden step first"):
        run_on(FakeBmc.factory(), action="power", power="on", previous_passwords=["ADMIN"], user="ADMIN",
               factory_credentials=[])


def test_power_never_falls_back_to_the_factory_login(run_on):
    logins: list = []
    with pytest.raises(session.BmcAuthRejected):
        run_on(FakeBmc.factory(), logins, action="power", power="on")
    assert [user for user, _, _ in logins] == ["rackform", "rackform"]


# --- user slots ------------------------------------------------------------------------------

@pytest.mark.parametrize(("names", "expected"), [
    ({2: "ADMIN", 3: None, 4: None}, 3),
    ({2: "ADMIN", 3: "ops", 4: None}, 4),
    ({2: "ADMIN", 3: "ops", 4: "rackform"}, 4),
    ({2: "ADMIN", 3: "rackform"}, 3),
])
def test_admin_slot(names, expected):
    assert users.choose_admin_slot(names, "rackform", 3, {2}) == expected


def test_no_free_slot_is_a_clear_error():
    with pytest.raises(users.HardenError, match="no free user slot"):
        users.choose_admin_slot({2: "ADMIN", 3: "a", 4: "b"}, "rackform", 3, {2})


def test_only_the_first_16_user_ids_are_read():
    bmc = FakeBmc.factory(max_users=63)
    asked: list[int] = []
    ipmi = __import__("provision_support").FakeIpmi(bmc)
    original = ipmi.get_user_name
    ipmi.get_user_name = lambda uid: asked.append(uid) or original(uid)
    users.harden(ipmi, "site", session.Credential("rackform", SITE_PASSWORD, "site"), {"ADMIN"}, 3,
                 lambda site: (ipmi, 20), 16, 20)
    assert max(asked) == users.USER_ID_LIMIT


# --- security refusals before any login ----------------------------------------------------------

@pytest.mark.parametrize(("capabilities", "reason"), [
    (wire.Capabilities(False, True, None), "speaks only IPMI 1.5"),
    (wire.Capabilities(True, False, (0,)), "offers cipher suites 0 and none of 17, 3"),
])
def test_an_insecure_bmc_is_refused_before_any_login(run_on, capabilities, reason):
    logins: list = []
    with pytest.raises(wire.BmcInsecure, match=reason):
        run_on(FakeBmc.factory(), logins, capabilities=capabilities)
    assert logins == []


# --- the power action ---------------------------------------------------------------------------

def test_power_action_sets_the_boot_device_first_and_reports_both(run_on):
    bmc = hardened(run_on)
    bmc.power = "on"
    result = run_on(bmc, action="power", power="reset", boot_device="pxe")
    assert (bmc.writes, result.changed, "changed" in result.result, result.result["boot_device"]) == (
        ["bootdev network", "power reset"], True, False, "pxe")


def test_power_action_on_a_powered_host_booting_from_disk_changes_nothing(run_on):
    bmc = hardened(run_on)
    bmc.power = "on"
    result = run_on(bmc, action="power", power="on", boot_device="disk")
    assert (bmc.writes, result.changed) == ([], False)


# --- check mode -----------------------------------------------------------------------------------

@pytest.fixture
def check_run_on(monkeypatch):
    def run(bmc: FakeBmc, **overrides):
        monkeypatch.setattr(module, "probe", lambda *args: wire.Capabilities(True, True, (3,)))
        monkeypatch.setattr(module, "login", fake_login(bmc, session))
        monkeypatch.setattr(module, "suite0_gets_in", lambda *args: bmc.suite0_gets_in())
        stub = StubModule(**params(**overrides))
        stub.check_mode = True
        checked = module.Run(stub)
        checked.attempt()
        return checked

    return run


def test_check_mode_lists_the_hardening_and_writes_nothing(check_run_on):
    bmc = FakeBmc.factory()
    result = check_run_on(bmc)
    assert (bmc.writes, result.changed, len(result.result["changes"])) == ([], True, 4)


def test_check_mode_on_a_hardened_bmc_reports_no_change(run_on, check_run_on):
    bmc = hardened(run_on)
    assert (check_run_on(bmc).changed, bmc.writes) == (False, [])


def test_check_mode_power_says_what_it_would_send(check_run_on, run_on):
    bmc = hardened(run_on)
    result = check_run_on(bmc, action="power", power="on", boot_device="pxe")
    assert (bmc.writes, result.result["power_action"], result.changed) == ([], "on", True)


# --- cipher suite 0 closed (LAN configuration parameter 24) --------------------------------------

ciphers = MODULES["rackform_ipmi_ciphers"]
SIM_MODEL = (0x001291, 0x1234)


def test_first_contact_allows_only_suites_17_and_3_at_administrator(run_on):
    bmc = FakeBmc.factory()
    result = run_on(bmc)
    allowed = {suite: level for suite, level in zip(bmc.cipher_entries, bmc.cipher_levels) if level}
    assert (allowed, result.result["suite0_open"]) == ({3: 4, 17: 4}, False)
    assert "cipher suite privileges" in bmc.writes
    assert any(change.startswith("closed cipher suites other than 17 and 3") for change in result.result["changes"])


def test_a_hardened_bmc_keeps_its_cipher_levels_and_nothing_is_written(run_on):
    bmc = hardened(run_on)
    result = run_on(bmc)
    assert (bmc.writes, result.changed, result.result["suite0_open"]) == ([], False, False)


def test_the_levels_follow_the_entries_of_parameter_23_not_suite_numbers(run_on):
    bmc = FakeBmc.factory(cipher_entries=tuple(range(1, 16)))  # what ipmi_sim lists
    run_on(bmc, exceptions=[{"manufacturer_id": SIM_MODEL[0], "allow": ["cipher_suite_0"], "reason": "sim"}])
    assert bmc.cipher_levels == [0, 0, 4] + [0] * 13  # the third entry is suite 3


def test_a_bmc_that_stores_the_levels_without_honouring_them_fails(run_on):
    bmc = FakeBmc.factory(honours_cipher_levels=False)
    with pytest.raises(users.HardenError, match=r"cipher suite 0 still lets anyone in .*manufacturer id 4753, "
                                                r"product id 4660\).*provisioning.bmc_exceptions"):
        run_on(bmc)


def test_a_site_exception_for_the_model_reports_the_open_suite_instead(run_on):
    bmc = FakeBmc.factory(honours_cipher_levels=False)
    exception = {"manufacturer_id": SIM_MODEL[0], "product_id": SIM_MODEL[1], "allow": ["cipher_suite_0"],
                 "reason": "a simulator"}
    result = run_on(bmc, exceptions=[exception])
    assert (result.facts["suite0_open"], result.facts["suite0_exception"]) == (True, "a simulator")


@pytest.mark.parametrize("exception", [
    {"manufacturer_id": SIM_MODEL[0], "product_id": 1, "allow": ["cipher_suite_0"], "reason": "another product"},
    {"manufacturer_id": 343, "allow": ["cipher_suite_0"], "reason": "another manufacturer"},
    {"manufacturer_id": SIM_MODEL[0], "allow": ["ipmi_1.5"], "reason": "another opening"},
])
def test_an_exception_for_another_model_or_opening_does_not_apply(run_on, exception):
    with pytest.raises(users.HardenError, match="still lets anyone in"):
        run_on(FakeBmc.factory(honours_cipher_levels=False), exceptions=[exception])


def test_a_bmc_that_does_not_keep_the_levels_fails_with_what_it_reads_back(run_on, monkeypatch):
    bmc = FakeBmc.factory()
    from provision_support import FakeIpmi

    answer = FakeIpmi.raw_command

    def forgetful(self, netfn, command, data=()):
        if (netfn, command) == (0x0C, 0x01):
            return {"data": bytearray()}  # acknowledged, never stored
        return answer(self, netfn, command, data)

    monkeypatch.setattr(FakeIpmi, "raw_command", forgetful)
    with pytest.raises(ciphers.CipherSettingError, match="reads back 004444444444444444, not 000040000000400000"):
        run_on(bmc)


def test_a_bmc_without_parameter_24_is_judged_by_the_suite_0_login(run_on, monkeypatch):
    from provision_support import FakeIpmi

    answer = FakeIpmi.raw_command

    def no_parameter_24(self, netfn, command, data=()):
        if (netfn, command) == (0x0C, 0x02) and data[1] == 24:
            return {"error": "parameter not supported", "code": 0x80}
        return answer(self, netfn, command, data)

    monkeypatch.setattr(FakeIpmi, "raw_command", no_parameter_24)
    bmc = FakeBmc.factory(cipher_entries=(3, 17))  # offers no suite 0 at all
    assert run_on(bmc).result["suite0_open"] is False


def test_check_mode_says_it_would_close_suite_0_and_does_not_try_it(check_run_on):
    bmc = FakeBmc.factory(honours_cipher_levels=False)
    result = check_run_on(bmc)
    assert any(change.startswith("would close cipher suites") for change in result.result["changes"])
    assert "suite0_open" not in result.result


@pytest.mark.parametrize("levels", [[4] * 16, [0, 0, 4] + [0] * 13, list(range(16))])
def test_levels_encode_and_decode_as_parameter_24(levels):
    assert ciphers.decode_levels(ciphers.encode_levels(levels)) == levels
