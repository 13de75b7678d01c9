"""Cipher suite 0 closed over the wire: LAN parameter 24 set through rackform's own session,
read back, and checked by tools that share no code with rackform (ipmitool, pyghmi), against
the fake BMC, which honours the setting (ipmi_sim stores it and ignores it: tests/lab)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest

from rackform.ipmi import prelogin
from rackform.ipmi.credentials import Credentials
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.ipmi.session import LanSession, Timeouts
from rackform.role_code import module_utils_file

CIPHERS_FILE = module_utils_file("rackform_ipmi_ciphers")
WEAK_AND_STRONG = frozenset({0, 3, 17})
needs_ipmitool = pytest.mark.skipif(shutil.which("ipmitool") is None, reason="ipmitool is not installed")


def _ciphers():
    """The Ansible module's own file (what the harden action runs), loaded as it is shipped."""
    name = "ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_ciphers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CIPHERS_FILE)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


ciphers = _ciphers()


def session(bmc: FakeBmc, password: str = "ADMIN") -> LanSession:
    return LanSession(bmc.address, Credentials("ADMIN", password), port=bmc.port,
                      timeouts=Timeouts(reply_s=0.3, resends=1))


def ipmitool(bmc: FakeBmc, suite: int, password: str, *command: str) -> subprocess.CompletedProcess:
    # -P on a command line is fine for a throwaway test BMC on the loopback; rackform never does it.
    return subprocess.run(["ipmitool", "-I", "lanplus", "-H", bmc.address, "-p", str(bmc.port), "-U", "ADMIN",
                           "-P", password, "-C", str(suite), "-N", "1", "-R", "2", *command],
                          capture_output=True, text=True, timeout=30)


def close_suite0(bmc: FakeBmc) -> dict:
    with session(bmc) as opened:
        return ciphers.allow_only(opened, channel=1)


@pytest.fixture()
def open_bmc():
    with FakeBmc(FakeBmcConfig(suites=WEAK_AND_STRONG, power="on")) as bmc:
        yield bmc


# --- rackform's own proof --------------------------------------------------------------------------


def test_suite0_gets_in_with_any_password_before_hardening(open_bmc):
    assert prelogin.suite0_gets_in(open_bmc.address, "ADMIN", open_bmc.port, 0.3, 2) is True
    assert open_bmc.suite0_logins == 1 and open_bmc.open_sessions == 0  # and it logged out


def test_allow_only_sets_the_levels_reads_them_back_and_suite0_is_refused(open_bmc):
    outcome = close_suite0(open_bmc)
    assert (outcome["changed"], outcome["cipher_suite_privileges"]) == (True, {0: 0, 3: 4, 17: 4})
    assert prelogin.suite0_gets_in(open_bmc.address, "ADMIN", open_bmc.port, 0.3, 2) is False
    assert open_bmc.suite0_logins == 0


def test_a_second_allow_only_writes_nothing(open_bmc):
    close_suite0(open_bmc)
    open_bmc.commands.clear()
    assert close_suite0(open_bmc)["changed"] is False
    assert (0x0C, 0x01) not in open_bmc.commands


def test_suites_17_and_3_still_log_in_after_hardening(open_bmc):
    close_suite0(open_bmc)
    for suite in (17, 3):
        with session(open_bmc) as opened:
            assert opened.suite.number in (17, 3)
    assert open_bmc.logins >= 3


def test_firmware_that_ignores_the_levels_reads_back_right_and_still_lets_suite0_in():
    config = FakeBmcConfig(suites=WEAK_AND_STRONG, honours_cipher_levels=False)
    with FakeBmc(config) as bmc:
        assert close_suite0(bmc)["changed"] is True
        assert close_suite0(bmc)["changed"] is False  # stored: it reads back as set
        assert prelogin.suite0_gets_in(bmc.address, "ADMIN", bmc.port, 0.3, 2) is True


def test_suite0_on_a_silent_address_is_an_error_not_a_no():
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as bmc:
        with pytest.raises(prelogin.BmcSilent):
            prelogin.suite0_gets_in(bmc.address, "ADMIN", bmc.port, 0.1, 1)


# --- independent checks: ipmitool and pyghmi share no code with rackform ------------------------------


@needs_ipmitool
@pytest.mark.parametrize("suite", [17, 3])
def test_ipmitool_logs_in_to_the_fake_bmc_and_reads_the_power(suite):
    with FakeBmc(FakeBmcConfig(power="on")) as bmc:
        done = ipmitool(bmc, suite, "ADMIN", "chassis", "power", "status")
        assert (done.returncode, done.stdout.strip()) == (0, "Chassis Power is on"), done.stderr
        assert (0x00, 0x01) in bmc.commands


@needs_ipmitool
@pytest.mark.parametrize("suite", [17, 3])
def test_ipmitool_with_a_wrong_password_is_rejected(suite):
    with FakeBmc(FakeBmcConfig(power="on")) as bmc:
        assert ipmitool(bmc, suite, "not-the-password", "chassis", "power", "status").returncode != 0
        assert bmc.logins == 0


@needs_ipmitool
def test_ipmitool_suite0_with_any_password_gets_in_then_not_after_hardening(open_bmc):
    assert ipmitool(open_bmc, 0, "anything", "chassis", "power", "status").returncode == 0
    close_suite0(open_bmc)
    refused = ipmitool(open_bmc, 0, "anything", "chassis", "power", "status")
    assert refused.returncode != 0 and "Chassis Power" not in refused.stdout
    assert ipmitool(open_bmc, 17, "ADMIN", "chassis", "power", "status").returncode == 0


@needs_ipmitool
def test_ipmitool_reads_back_the_levels_rackform_set(open_bmc):
    close_suite0(open_bmc)
    done = ipmitool(open_bmc, 17, "ADMIN", "raw", "0x0c", "0x02", "1", "24", "0", "0")
    # revision, reserved, then entries 0 (suite 0), 1 (suite 3), 2 (suite 17): 0, 4, 4
    assert done.stdout.split() == ["11", "00", "40", "04", "00", "00", "00", "00", "00", "00"], done.stderr


def test_pyghmi_logs_in_to_the_fake_bmc_with_suite_17_and_issues_commands():
    pyghmi_command = pytest.importorskip("pyghmi.ipmi.command")
    with FakeBmc(FakeBmcConfig(power="on")) as bmc:
        ipmi = pyghmi_command.Command(bmc=bmc.address, userid="ADMIN", password="ADMIN", port=bmc.port)
        try:
            assert ipmi.get_power() == {"powerstate": "on"}
            assert ipmi.ipmi_session.integrityalgo == 256  # HMAC-SHA256-128: suite 17
            device = ipmi.raw_command(netfn=0x06, command=0x01)
            assert device["code"] == 0 and device["data"][6:9] == bytearray(b"\x91\x12\x00")
        finally:
            ipmi.ipmi_session.logout()


# --- the module's stack runs on the standard library alone ----------------------------------------

STANDALONE = r"""
import importlib.abc, importlib.util, os, sys

for blocked in ("rackform", "pyghmi", "cryptography"):  # what the module must not need
    sys.modules[blocked] = None
folder = sys.argv[1]


class RoleModuleUtils(importlib.abc.MetaPathFinder):
    # what AnsiballZ does: the collection's module_utils, from plugins/module_utils/
    def find_spec(self, name, path, target=None):
        if name.startswith("ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_"):
            return importlib.util.spec_from_file_location(name, os.path.join(folder, name.rsplit(".", 1)[1] + ".py"))
        if "ansible_collections.rackform.site.plugins.module_utils".startswith(name):
            return importlib.util.spec_from_loader(name, loader=None, is_package=True)
        return None


sys.meta_path.insert(0, RoleModuleUtils())
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_aes import Cipher
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_session import Credential, login, logout
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_chassis import read_power

assert Cipher is None  # the pure-Python AES
ipmi, suite = login(sys.argv[2], int(sys.argv[3]), Credential("ADMIN", "ADMIN", "site"))
print(suite, read_power(ipmi))
logout(ipmi)
"""


@pytest.mark.parametrize("suite", [17, 3])
def test_the_modules_session_runs_with_the_standard_library_only(suite, tmp_path):
    from rackform.ipmi.module_utils import MODULE_UTILS_DIR

    script = tmp_path / "standalone.py"
    script.write_text(STANDALONE)
    with FakeBmc(FakeBmcConfig(suites=frozenset({suite}), power="on")) as bmc:
        done = subprocess.run([sys.executable, "-I", str(script), str(MODULE_UTILS_DIR), bmc.address, str(bmc.port)],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert (done.returncode, done.stdout.split()) == (0, [str(suite), "on"]), done.stderr
        assert bmc.logins == 1 and bmc.closed_sessions == 1
