"""Stage os (role base_os) on the servers: identity, name resolution, time, kernel
network settings and fabric port MTU, as the role sets them."""

from __future__ import annotations

import pytest

from checklib import mismatches, parse_sysctl_lines, sysctl_text

pytestmark = [pytest.mark.stage("os"), pytest.mark.machines("servers")]

ROLE = "base_os"
TIME_SYNC_UNIT = "systemd-timesyncd.service"
TIME_SYNC_DROPIN = "/etc/systemd/timesyncd.conf.d/rackform.conf"
FABRIC_MTU_UNIT = "rackform-fabric-mtu.service"


@pytest.fixture
def fabric_ports(machine_vars) -> dict:
    """The server's cabled fabric ports (inventory `fabric_ports`)."""
    ports = machine_vars.get("fabric_ports") or {}
    if not ports:
        pytest.skip("no cabled fabric ports")
    return ports


@pytest.fixture
def base_os_sysctls(role_setting) -> dict[str, str]:
    return {key: sysctl_text(value) for key, value in role_setting(ROLE, "base_os_sysctls").items()}


def test_hostname_is_inventory_name(host, machine):
    hostname = host.check_output("hostname")
    assert hostname == machine, f"hostname is {hostname}, the inventory says {machine}"


def test_etc_hosts_lists_every_site_machine(host, project):
    rendered = (project / "files" / "etc_hosts").read_text(encoding="utf-8")
    wanted = [" ".join(line.split()) for line in rendered.splitlines() if line.strip() and not line.startswith("#")]
    present = {" ".join(line.split()) for line in host.file("/etc/hosts").content_string.splitlines()}
    missing = [line for line in wanted if line not in present]
    assert not missing, f"/etc/hosts lacks {len(missing)} of the site's {len(wanted)} lines, first: {missing[0]}"


def test_time_sync_uses_site_ntp_servers(host, machine_vars):
    wanted = list(machine_vars.get("base_os_ntp_servers", machine_vars.get("site_ntp_servers") or []))
    dropin = host.file(TIME_SYNC_DROPIN)
    assert dropin.exists, f"{TIME_SYNC_DROPIN} is missing"
    settings = [line for line in dropin.content_string.splitlines() if line.startswith("NTP=")]
    configured = settings[-1].removeprefix("NTP=").split() if settings else None
    assert configured == wanted, f"{TIME_SYNC_DROPIN}: NTP servers {configured}, want {wanted}"


def test_time_sync_enabled(unit_state):
    state = unit_state(TIME_SYNC_UNIT)
    assert state["UnitFileState"] == "enabled", f"{TIME_SYNC_UNIT} is {state['UnitFileState'] or 'not installed'}"


def test_time_sync_active(unit_state):
    state = unit_state(TIME_SYNC_UNIT)
    if state["ActiveState"] != "active" and state["ConditionResult"] == "no" and state["ConditionTimestamp"]:
        # systemd tried and a unit condition said no: in a container the clock
        # belongs to the machine that runs it (ConditionVirtualization=!container).
        pytest.skip(f"{TIME_SYNC_UNIT}: its unit conditions keep it stopped on this machine")
    assert state["ActiveState"] == "active", f"{TIME_SYNC_UNIT} is {state['ActiveState']} ({state['SubState']})"


def test_kernel_network_settings(live_sysctls, base_os_sysctls):
    problems = mismatches(live_sysctls(list(base_os_sysctls)), base_os_sysctls)
    assert not problems, f"sysctl {problems}"


def test_kernel_network_settings_kept_at_boot(host, role_setting, base_os_sysctls):
    path = role_setting(ROLE, "base_os_sysctl_file")
    written = host.file(path)
    problems = mismatches(parse_sysctl_lines(written.content_string) if written.exists else {}, base_os_sysctls)
    assert not problems, f"{path}: {problems}"


def test_fabric_ports_up(fabric_ports, links):
    problems = [f"{port} ({'down' if port in links else 'missing'})"
                for port in fabric_ports if port not in links or not links[port].up]
    assert not problems, f"fabric ports not up: {', '.join(problems)}"


def test_fabric_ports_mtu(fabric_ports, links, machine_vars):
    mtu = int(machine_vars.get("base_os_fabric_mtu", machine_vars.get("fabric_host_mtu", 9000)))
    live = {port: links[port].mtu for port in fabric_ports if port in links}
    problems = mismatches(live, dict.fromkeys(fabric_ports, mtu))
    assert not problems, f"fabric port MTU {problems}"


def test_fabric_mtu_kept_at_boot(fabric_ports, unit_state):
    state = unit_state(FABRIC_MTU_UNIT)
    assert state["UnitFileState"] == "enabled", f"{FABRIC_MTU_UNIT} is {state['UnitFileState'] or 'not installed'}"
