"""Role pxe_server without a machine: its filters, its iPXE-scripts module and its templates.

The templates are rendered here with Jinja set up as Ansible's template module sets
it up (trim_blocks, the role's filters); the lab test (tests/lab/test_pxe_lab.py)
runs the whole role against a real dnsmasq.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path
from types import ModuleType

import jinja2
import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
ROLE = REPO / "roles" / "pxe_server"
SITE = "pxetest"


def _load(relative: str) -> ModuleType:
    path = PLUGINS / relative
    spec = importlib.util.spec_from_file_location(f"pxe_server_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


filters = _load("filter/pxe_server.py")
scripts = _load("modules/ipxe_scripts.py")


def host(n: int, role: str = "compute") -> dict[str, str]:
    return {"name": f"node-{n}", "mac": f"02:64:00:00:{n // 256:02x}:{n % 256:02x}",
            "address": f"10.64.{n // 256}.{n % 256}", "role": role}


# --- filter: pxe_server_hosts --------------------------------------------------------------------

HOSTVARS = {
    "node-1": {"management_mac": "02:64:00:00:00:0B", "management_address": "10.64.0.11",
               "host_role": "management_plane"},
    "node-2": {"management_mac": "02:64:00:00:00:0c", "management_address": "10.64.0.12", "host_role": "gpu"},
    "no-mac": {"management_address": "10.64.0.13"},
}


def test_reservation_carries_name_mac_address_and_role():
    assert filters.pxe_server_hosts(["node-2"], HOSTVARS) == [
        {"name": "node-2", "mac": "02:64:00:00:00:0c", "address": "10.64.0.12", "role": "gpu"}]


def test_reservation_mac_is_lower_case():
    assert filters.pxe_server_hosts(["node-1"], HOSTVARS)[0]["mac"] == "02:64:00:00:00:0b"


def test_host_without_a_mac_gets_no_reservation():
    assert [r["name"] for r in filters.pxe_server_hosts(["node-1", "no-mac", "node-2"], HOSTVARS)] == [
        "node-1", "node-2"]


def test_host_named_twice_is_reserved_once():
    assert len(filters.pxe_server_hosts(["node-1", "node-2", "node-1"], HOSTVARS)) == 2


def test_each_host_variables_are_read_once():
    """One pass over the site: Ansible builds a host's variables on every hostvars lookup."""
    lookups: list[str] = []

    class CountingHostvars(dict):
        def __getitem__(self, name):
            lookups.append(name)
            return super().__getitem__(name)

    filters.pxe_server_hosts(["node-1", "node-2", "no-mac"], CountingHostvars(HOSTVARS))
    assert sorted(lookups) == ["no-mac", "node-1", "node-2"]


@pytest.mark.parametrize(("prefix", "netmask"), [("10.64.0.0/24", "255.255.255.0"),
                                                  ("10.64.0.0/16", "255.255.0.0"),
                                                  ("10.64.0.0/22", "255.255.252.0")])
def test_netmask_of_a_prefix(prefix: str, netmask: str):
    assert filters.pxe_server_netmask(prefix) == netmask


# --- module: rackform.site.ipxe_scripts --------------------------------------------------------

def sync(dest: Path, hosts: list[dict], check: bool = False):
    return scripts.sync_scripts(str(dest), hosts, "../install.ipxe", SITE, check=check)


def test_script_is_named_like_ipxe_hexhyp():
    assert scripts.script_name("02:64:00:00:00:0C") == "02-64-00-00-00-0c.ipxe"


def test_script_sets_the_host_and_chains_the_install_script(tmp_path: Path):
    sync(tmp_path, [host(12, "gpu")])
    assert (tmp_path / "02-64-00-00-00-0c.ipxe").read_text().splitlines()[2:] == [
        "set rackform_host node-12", "set rackform_address 10.64.0.12", "set rackform_role gpu",
        "chain --autofree ../install.ipxe"]


def test_script_starts_with_the_ipxe_magic(tmp_path: Path):
    sync(tmp_path, [host(12)])
    assert (tmp_path / "02-64-00-00-00-0c.ipxe").read_text().startswith("#!ipxe\n")


def test_first_sync_writes_every_script(tmp_path: Path):
    assert sync(tmp_path, [host(11), host(12)]) == (["node-11", "node-12"], [])


def test_second_sync_changes_nothing(tmp_path: Path):
    sync(tmp_path, [host(11), host(12)])
    assert sync(tmp_path, [host(11), host(12)]) == ([], [])


def test_edited_script_is_written_again(tmp_path: Path):
    sync(tmp_path, [host(11), host(12)])
    (tmp_path / "02-64-00-00-00-0b.ipxe").write_text("#!ipxe\nshell\n")
    assert sync(tmp_path, [host(11), host(12)]) == (["node-11"], [])


def test_script_with_other_permissions_is_corrected(tmp_path: Path):
    sync(tmp_path, [host(11)])
    (tmp_path / "02-64-00-00-00-0b.ipxe").chmod(0o600)
    sync(tmp_path, [host(11)])
    assert (tmp_path / "02-64-00-00-00-0b.ipxe").stat().st_mode & 0o777 == 0o644


def test_script_of_a_machine_that_left_is_removed(tmp_path: Path):
    sync(tmp_path, [host(11), host(12)])
    assert (sync(tmp_path, [host(11)]), sorted(os.listdir(tmp_path))) == (
        ([], ["02-64-00-00-00-0c.ipxe"]), ["02-64-00-00-00-0b.ipxe"])


def test_other_files_in_the_folder_are_kept(tmp_path: Path):
    (tmp_path / "README").write_text("not a script\n")
    sync(tmp_path, [host(11)])
    assert (tmp_path / "README").exists()


def test_check_mode_reports_and_writes_nothing(tmp_path: Path):
    dest = tmp_path / "hosts"
    assert (sync(dest, [host(11)], check=True), dest.exists()) == ((["node-11"], []), False)


def test_two_machines_with_one_mac_are_refused(tmp_path: Path):
    twin = {**host(12), "name": "twin"}
    with pytest.raises(ValueError, match="twin and node-12 share MAC"):
        sync(tmp_path, [host(12), twin])


@pytest.mark.parametrize(("entry", "message"), [
    ({"name": "node-1", "address": "10.64.0.11"}, "lacks mac"),
    ({"name": "node-1", "mac": "02:64:00:00:00", "address": "10.64.0.11"}, "not six colon-separated"),
    ({"name": "node 1", "mac": "02:64:00:00:00:01", "address": "10.64.0.11"}, "name may hold only"),
    ({"name": "node-1", "mac": "02:64:00:00:00:01", "address": "${x}"}, "address may hold only"),
])
def test_bad_host_entry_is_refused_with_the_reason(tmp_path: Path, entry: dict, message: str):
    with pytest.raises(ValueError, match=message):
        sync(tmp_path, [entry])


def test_a_refused_entry_writes_nothing(tmp_path: Path):
    with pytest.raises(ValueError):
        sync(tmp_path, [host(11), {"name": "bad", "address": "10.64.0.99"}])
    assert os.listdir(tmp_path) == []


# --- templates ---------------------------------------------------------------------------------

def role_environment() -> jinja2.Environment:
    """Jinja as Ansible's template module runs it, with the collection's filters (by their full names)."""
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"), trim_blocks=True,
                                     undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters.update({f"rackform.site.{name}": filter_ for name, filter_ in filters.FilterModule().filters().items()})
    return environment


def role_vars(**overrides) -> dict:
    """The role's variables as Ansible resolves them for the pxetest lab site."""
    values = {
        "site_name": SITE,
        "pxe_server_network": {"purpose": "management", "prefix": "10.64.0.0/24", "gateway": "10.64.0.1"},
        "pxe_server_reservations": [host(11, "management_plane"), host(12)],
        "pxe_server_listen_address": "10.64.0.11",
        "pxe_server_user": "dnsmasq",
        "pxe_server_lease_file": "/var/lib/rackform-pxe/dnsmasq.leases",
        "pxe_server_gateway": "10.64.0.1",
        "pxe_server_dns_servers": ["10.64.0.1"],
        "pxe_server_ntp_servers": ["10.64.0.1"],
        "pxe_server_domain": "pxetest.rackform.test",
        "pxe_server_lease_time": "24h",
        "pxe_server_dynamic_range": [],
        "pxe_server_authoritative": True,
        "pxe_server_log_dhcp": False,
        "pxe_server_tftp_root": "/srv/tftp",
        "pxe_server_host_scripts_dir": "hosts",
        "pxe_server_bios_boot_file": "undionly.kpxe",
        "pxe_server_efi_boot_file": "ipxe.efi",
        "pxe_server_entry_script": "rackform.ipxe",
        "pxe_server_installer_kernel": "",
        "pxe_server_installer_initrd": "",
        "pxe_server_installer_cmdline": "",
    }
    return {**values, **overrides}


def render(template: str, **overrides) -> list[str]:
    return role_environment().get_template(template).render(role_vars(**overrides)).splitlines()


def settings(lines: list[str], key: str) -> list[str]:
    """The values of `key=` lines of a dnsmasq configuration."""
    return [line.split("=", 1)[1] for line in lines if line.startswith(f"{key}=")]


def test_one_reservation_per_machine():
    assert settings(render("dnsmasq.conf.j2"), "dhcp-host") == [
        "02:64:00:00:00:0b,10.64.0.11,node-11", "02:64:00:00:00:0c,10.64.0.12,node-12"]


def test_addresses_only_for_reservations_by_default():
    assert settings(render("dnsmasq.conf.j2"), "dhcp-range") == [
        "set:management,10.64.0.0,static,255.255.255.0,24h"]


def test_dynamic_pool_when_the_site_asks_for_one():
    lines = render("dnsmasq.conf.j2", pxe_server_dynamic_range=["10.64.0.200", "10.64.0.250"])
    assert settings(lines, "dhcp-range")[1:] == ["set:management,10.64.0.200,10.64.0.250,255.255.255.0,24h"]


def test_dns_is_off():
    assert settings(render("dnsmasq.conf.j2"), "port") == ["0"]


def test_runs_unprivileged_with_its_own_lease_file():
    lines = render("dnsmasq.conf.j2")
    assert (settings(lines, "user"), settings(lines, "dhcp-leasefile")) == (
        ["dnsmasq"], ["/var/lib/rackform-pxe/dnsmasq.leases"])


def test_serves_only_on_the_management_address():
    lines = render("dnsmasq.conf.j2")
    assert (settings(lines, "listen-address"), "bind-dynamic" in lines) == (["10.64.0.11"], True)


@pytest.mark.parametrize(("overrides", "router"), [
    ({}, ["option:router,10.64.0.1"]),
    ({"pxe_server_gateway": ""}, ["option:router"]),  # an empty option: no router, not dnsmasq itself
])
def test_router_option(overrides: dict, router: list[str]):
    options = settings(render("dnsmasq.conf.j2", **overrides), "dhcp-option")
    assert [option for option in options if option.startswith("option:router")] == router


@pytest.mark.parametrize("option", ["option:dns-server,10.64.0.1", "option:ntp-server,10.64.0.1",
                                    "option:domain-name,pxetest.rackform.test"])
def test_site_settings_reach_the_clients(option: str):
    assert option in settings(render("dnsmasq.conf.j2"), "dhcp-option")


def test_boot_files_go_to_known_machines_only():
    assert settings(render("dnsmasq.conf.j2"), "dhcp-boot") == [
        "tag:known,tag:ipxe,rackform.ipxe",
        "tag:known,tag:!ipxe,tag:efi64,ipxe.efi",
        "tag:known,tag:!ipxe,tag:!efi64,undionly.kpxe",
    ]


def test_tftp_root():
    lines = render("dnsmasq.conf.j2")
    assert ("enable-tftp" in lines, settings(lines, "tftp-root")) == (True, ["/srv/tftp"])


def test_ten_thousand_reservations_render_in_one_pass():
    """One loop over the machines, on the PXE host only: linear in the site's size."""
    many = [host(n) for n in range(1, 10_001)]
    started = time.perf_counter()
    lines = render("dnsmasq.conf.j2", pxe_server_reservations=many)
    elapsed_s = time.perf_counter() - started
    assert (len(settings(lines, "dhcp-host")), elapsed_s < 5.0) == (10_000, True)


def test_entry_script_chains_the_machines_own_script():
    assert "chain --autofree hosts/${mac:hexhyp}.ipxe || goto unknown" in render("rackform.ipxe.j2")


def test_install_script_without_an_installer_boots_from_disk():
    lines = render("install.ipxe.j2")
    assert ("exit" in lines, any(line.startswith("kernel ") for line in lines)) == (True, False)


def test_install_script_boots_the_installer():
    lines = render("install.ipxe.j2", pxe_server_installer_kernel="http://10.64.0.5/linux",
                   pxe_server_installer_initrd="http://10.64.0.5/initrd.gz",
                   pxe_server_installer_cmdline="auto=true hostname=${rackform_host}")
    assert [line for line in lines if re.match(r"(kernel|initrd|boot)\b", line)] == [
        "kernel http://10.64.0.5/linux auto=true hostname=${rackform_host}",
        "initrd http://10.64.0.5/initrd.gz",
        "boot",
    ]


def test_scripts_written_for_ten_thousand_machines_in_one_call(tmp_path: Path):
    many = [host(n) for n in range(1, 10_001)]
    written, _ = sync(tmp_path, many)
    assert (len(written), sync(tmp_path, many)) == (10_000, ([], []))
