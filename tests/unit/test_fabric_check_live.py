"""Reading live devices: snapshot scripts, what a snapshot becomes, Onyx over netmiko
against the emulator, and the paths shared with the roles that write them."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import yaml

from rackform.fabric import live
from rackform.fabric.live import (
    LiveError,
    OnyxLogin,
    SshTransport,
    Target,
    Unreadable,
    read_cumulus,
    read_device,
    read_host,
)
from rackform.lab.onyx_emulator import OnyxEmulator
from rackform.model.loader import load_site

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "fabric_check"
ONYX_PASSWORD = "lab-only-password"


def role_default(role: str, name: str):
    return yaml.safe_load((REPO_ROOT / "roles" / role / "defaults" / "main.yml").read_text())[name]


# ---------------------------------------------------------------- in step with the roles


@pytest.mark.parametrize(("constant", "role", "variable"), [
    (live.ROCE_HOST_CONFIG_FILE, "roce_host", "roce_host_config_file"),
    (live.NCCL_CONF_FILE, "roce_host", "roce_host_nccl_conf_file"),
    (live.ROCE_HOST_UNIT, "roce_host", "roce_host_unit"),
    (live.CUMULUS_QOS_FILE, "switch_baseline", "switch_baseline_qos_file"),
])
def test_reads_where_the_roles_write(constant, role, variable):
    assert constant == role_default(role, variable)


# ---------------------------------------------------------------- snapshots


def test_cumulus_snapshot():
    device = read_cumulus("leaf-1", (DATA / "leaf-1.snapshot").read_text())
    assert (device.qos.pfc("swp1"), device.bgp.unnumbered_ports, device.interfaces["swp31"].mtu,
            device.links["swp2"].alias) == ((3,), {"swp31"}, 9216, "node-2:fab0")


def test_host_snapshot_without_an_rdma_nic():
    device = read_host("node-1", (DATA / "node-1.snapshot").read_text(), ["fab0"])
    nic = device.nics["fab0"]
    assert (nic.qos, nic.roce_tos, nic.ecn_priorities, nic.cnp_priority) == (Unreadable("no RDMA NIC"),) * 4


def test_host_snapshot_persisted_settings_and_unit():
    device = read_host("node-1", (DATA / "node-1.snapshot").read_text(), ["fab0"])
    assert (device.roce_config.pfc_priorities, device.nccl["NCCL_IB_TC"], device.roce_unit,
            device.sysctls["net.ipv4.tcp_ecn"]) == ((3,), "106", "enabled", "1")


def test_host_snapshot_of_a_port_that_is_not_there():
    device = read_host("node-1", (DATA / "node-1.snapshot").read_text(), ["fab7"])
    assert device.nics["fab7"].qos == Unreadable("fab7 missing")


def test_host_script_quotes_port_names():
    assert "'fab0;reboot'" in live.host_script(["fab0;reboot"])


def test_a_snapshot_without_links_is_an_error():
    with pytest.raises(LiveError, match="ip -j link"):
        read_cumulus("leaf-1", "@@rackform-section ip-link\nip: not found\n@@rackform-rc 127\n")


# ---------------------------------------------------------------- the scripts run in a real shell


@pytest.fixture
def local_ssh(tmp_path, monkeypatch) -> SshTransport:
    """`ssh` that runs the script here: the snapshot scripts meet a real sh, ip and sysfs."""
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\nexec sh -s\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return SshTransport()


def test_host_script_runs_in_sh_and_reads_back(local_ssh):
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2")
    device = read_device(Target("here", "host", "127.0.0.1", ("lo",)), local_ssh, OnyxLogin())
    assert (device.error, device.links["lo"].mtu > 0, device.nics["lo"].qos) == (None, True, Unreadable("no RDMA NIC"))


def test_cumulus_script_runs_in_sh_and_reads_back(local_ssh):
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2")
    device = read_device(Target("here", "cumulus", "127.0.0.1"), local_ssh, OnyxLogin())
    assert device.error is None and device.qos.pfc_default == ()


def test_unreachable_device_comes_back_with_the_reason(tmp_path, monkeypatch):
    fake = tmp_path / "ssh"
    fake.write_text("#!/bin/sh\necho 'ssh: connect to host 10.66.0.99 port 22: No route to host' >&2\nexit 255\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    device = read_device(Target("node-9", "host", "10.66.0.99", ("fab0",)), SshTransport(), OnyxLogin())
    assert device.error == "SSH to 10.66.0.99 failed: ssh: connect to host 10.66.0.99 port 22: No route to host"


def test_ssh_checks_host_keys_when_given_known_hosts(tmp_path):
    argv = SshTransport(key_file=tmp_path / "key", known_hosts=tmp_path / "known").ssh_argv("10.66.0.11", 2222)
    assert ("StrictHostKeyChecking=yes" in argv and argv[argv.index("-p") + 1] == "2222"
            and argv[-3:] == ["root@10.66.0.11", "sh", "-s"])


# ---------------------------------------------------------------- what is read


def test_targets_are_cabled_hosts_and_fabric_switches(tmp_path):
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", tmp_path / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", tmp_path / "topologies" / "versions.yaml")
    shutil.copytree(DATA / "site", tmp_path, dirs_exist_ok=True)
    site = load_site("chktest", tmp_path)
    assert {(t.name, t.os, t.fabric_ports) for t in live.targets(site)} == {
        ("node-1", "host", ("fab0",)), ("node-2", "host", ("fab0",)),
        ("leaf-1", "cumulus", ()), ("spine-1", "cumulus", ())}


# ---------------------------------------------------------------- Onyx over netmiko


@pytest.fixture(scope="module")
def onyx(tmp_path_factory):
    state = tmp_path_factory.mktemp("onyx")
    shutil.copy(DATA / "onyx-leaf.running-config", state / "saved-config.txt")  # replayed at boot
    with OnyxEmulator("leaf-1", 8, state, password=ONYX_PASSWORD) as emulator:
        yield emulator


def test_onyx_running_config_over_netmiko(onyx, tmp_path):
    login = OnyxLogin(password=ONYX_PASSWORD, known_hosts=onyx.scanned_known_hosts())
    device = read_device(Target("leaf-1", "onyx", "127.0.0.1", port=onyx.port), SshTransport(), login)
    assert (device.error, device.qos.pfc("Eth1/1"), device.qos.mtu_by_port) == (None, (3,), {"Eth1/1": 9216})


def test_onyx_wrong_password_is_an_unreachable_device(onyx, tmp_path):
    device = read_device(Target("leaf-1", "onyx", "127.0.0.1", port=onyx.port), SshTransport(),
                         OnyxLogin(password="wrong", known_hosts=onyx.scanned_known_hosts()))
    assert device.error.startswith(f"Onyx login to 127.0.0.1:{onyx.port} failed")


def test_onyx_password_comes_from_the_variable_the_onyx_switch_role_reads(monkeypatch):
    import re

    import yaml

    from rackform.paths import ROLES_DIR

    defaults = yaml.safe_load((ROLES_DIR / "onyx_switch" / "defaults" / "main.yml").read_text())
    variable = re.fullmatch(r"\{\{ lookup\('ansible.builtin.env', '(\w+)'\) \}\}", defaults["onyx_switch_password"])[1]
    monkeypatch.setenv(variable, "from-the-environment")
    assert OnyxLogin.from_environment("admin").password == "from-the-environment"


def test_the_onyx_password_may_come_from_the_file_a_run_or_the_pulumi_provider_names(tmp_path, monkeypatch):
    from rackform.fabric.live import SWITCH_PASSWORD_FILE_VARIABLE, SWITCH_PASSWORD_VARIABLE, LiveError
    from rackform.run.ansible import SECRET_FILE_VARIABLES

    credentials = (REPO_ROOT / "stacks" / "providers" / "credentials.py").read_text()  # the Pulumi provider's side
    assert SECRET_FILE_VARIABLES[SWITCH_PASSWORD_VARIABLE] == SWITCH_PASSWORD_FILE_VARIABLE
    assert f'ENV_SWITCH_PASSWORD_FILE = "{SWITCH_PASSWORD_FILE_VARIABLE}"' in credentials
    monkeypatch.delenv(SWITCH_PASSWORD_VARIABLE, raising=False)
    secret = tmp_path / "switch-password"
    secret.write_text("from-the-file\n")
    monkeypatch.setenv(SWITCH_PASSWORD_FILE_VARIABLE, str(secret))
    assert OnyxLogin.from_environment("admin").password == "from-the-file"
    monkeypatch.setenv(SWITCH_PASSWORD_VARIABLE, "the-variable-wins")
    assert OnyxLogin.from_environment("admin").password == "the-variable-wins"
    monkeypatch.delenv(SWITCH_PASSWORD_VARIABLE)
    monkeypatch.setenv(SWITCH_PASSWORD_FILE_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(LiveError, match="cannot read"):
        OnyxLogin.from_environment("admin")


# --- host keys: an unknown or changed key refuses the login ------------------------------------

def test_ssh_checks_host_keys_even_without_known_hosts():
    argv = SshTransport().ssh_argv("10.66.0.11")
    assert "StrictHostKeyChecking=yes" in argv and not any(arg.startswith("UserKnownHostsFile") for arg in argv)


@pytest.fixture(scope="module")
def onyx_emulator(tmp_path_factory):
    from rackform.lab.onyx_emulator import OnyxEmulator

    with OnyxEmulator("sw-keys", 4, tmp_path_factory.mktemp("onyx-keys"), password="pw") as running:
        yield running


def _onyx_read(emulator, known_hosts):
    from rackform.fabric.live import OnyxLogin, onyx_running_config

    target = Target("leaf-9", "onyx", "127.0.0.1", port=emulator.port)
    return onyx_running_config(target, OnyxLogin(username="admin", password="pw", known_hosts=known_hosts))


def test_onyx_login_refuses_an_unknown_host_key(onyx_emulator, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(LiveError, match=r"leaf-9: host key of 127\.0\.0\.1:\d+ is unknown \(not in .*known_hosts\)"):
        _onyx_read(onyx_emulator, empty)


def test_onyx_login_refuses_a_changed_host_key(onyx_emulator, tmp_path):
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{onyx_emulator.port} {other}\n")
    with pytest.raises(LiveError, match=r"host key of 127\.0\.0\.1:\d+ CHANGED"):
        _onyx_read(onyx_emulator, known)


def test_onyx_login_accepts_the_recorded_host_key(onyx_emulator, tmp_path):
    assert _onyx_read(onyx_emulator, onyx_emulator.scanned_known_hosts())  # logged in: no LiveError
