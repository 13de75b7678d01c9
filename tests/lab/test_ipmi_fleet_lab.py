"""rackform.ipmi against the lab's BMCs (OpenIPMI ipmi_sim, a real RMCP+ implementation):
fleet power with read-back, boot device, sensors, the failures a run must survive, `rackform
bmc status`, `rackform discover` and the BareMetalNode provider.

The site is the shipped lab renamed `ipmitest` and moved into 10.62.0.0/16 (management
10.62.0.x, OOB 10.62.1.x, fabric 10.62.16.0/20), so it never touches a lab a person or
another test has up. Hosts run on the `process` driver (a `sleep infinity` per powered
host). Each BMC serves a FRU carrying the host's inventory serial (rackform.lab.fru), so
discovery and `bmc status` have serials to read. One module-wide set of BMCs serves
every test; each test that changes state uses a host of its own.

What ipmi_sim cannot be made to do (offer only suite 0, only IPMI 1.5, suite 17) is
covered against the fake BMC in tests/unit/test_ipmi_session.py.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from rackform.checks.runner import run_checks
from rackform.commands import bmc as bmc_command
from rackform.commands import discover as discover_command
from rackform.ipmi.client import BmcClient
from rackform.ipmi.credentials import Credentials, factory_credentials, from_mapping
from rackform.ipmi.errors import Reason
from rackform.ipmi.fleet import BmcLocks, BmcTarget, Fleet, RetryPolicy
from rackform.ipmi.session import LanSession, Timeouts
from rackform.ipmi.status import read_node_status, site_targets
from rackform.lab import bmc, chassis_hook
from rackform.model.loader import load_site
from rackform.model.site import Site
from sitebuilder import without_data_sets

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-ipmi")]

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "ipmitest"
LOCK_FILE = Path(tempfile.gettempdir()) / f"rackform-test-{SITE}.lock"
TOOLS = ("ipmi_sim", "ipmitool", "nsenter", "setsid", "ip")
HOSTS = ("mgmt-1", "mgmt-2", "mgmt-3", "stor-1", "gpu-1", "gpu-2")
LOGIN = factory_credentials()
ADDRESS_MOVES = (("10.20.0.0/16", "10.62.16.0/20"), ("10.20.1.", "10.62.17."), ("10.20.2.", "10.62.18."),
                 ("10.10.", "10.62."))


def moved(text: str) -> str:
    for old, new in ADDRESS_MOVES:
        text = text.replace(old, new)
    return text


def make_root(root: Path) -> Path:
    """A repo root holding the catalog and the lab renamed `ipmitest`, moved into 10.62.0.0/16."""
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    shutil.copy(REPO_ROOT / "topologies" / "defaults.yaml", root / "topologies" / "defaults.yaml")
    shutil.copytree(REPO_ROOT / "topologies" / "profiles", root / "topologies" / "profiles")  # lab.yaml extends them
    (root / "topologies" / "sites").mkdir(parents=True)
    lab_yaml = without_data_sets((REPO_ROOT / "topologies" / "sites" / "lab.yaml").read_text())
    renamed = re.sub(r"^site: lab$", f"site: {SITE}", lab_yaml, flags=re.MULTILINE)
    (root / "topologies" / "sites" / f"{SITE}.yaml").write_text(moved(renamed))
    shutil.copytree(REPO_ROOT / "inventories" / "lab", root / "inventories" / SITE)
    for path in (root / "inventories" / SITE).rglob("*.yml"):
        path.write_text(moved(path.read_text()))
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt: openipmi ipmitool util-linux iproute2)")
    if os.geteuid() != 0:
        pytest.skip("the lab's BMCs need root (network namespaces)")
    return make_root(tmp_path_factory.mktemp("ipmitest-root"))


@pytest.fixture(scope="module")
def site(root: Path) -> Site:
    return load_site(SITE, root)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ipmitest-state")


@pytest.fixture(scope="module")
def bmcs(site: Site, state_dir: Path) -> dict[str, bmc.BmcInfo]:
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bmc.stop_bmcs(site, state_dir)  # whatever a run that died earlier left
        try:
            started = bmc.start_bmcs(site, state_dir, driver="process")
            yield {info.host: info for info in started}
        finally:
            bmc.stop_bmcs(site, state_dir)


@pytest.fixture(scope="module")
def targets(site: Site, bmcs) -> dict[str, BmcTarget]:
    return {target.node: target for target in site_targets(site)}


def fleet(credentials=LOGIN, **options) -> Fleet:
    return Fleet(credentials, **options)


def quick_fleet(credentials=LOGIN) -> Fleet:
    """Short timeouts and no pauses: for the failure cases."""
    return Fleet(credentials, retry=RetryPolicy(attempts=2, jitter=0.0), timeouts=Timeouts(0.5, 1),
                 sleep=lambda _s: None, locks=BmcLocks())


def host_is_on(info: bmc.BmcInfo) -> bool:
    return chassis_hook.ProcessDriver(SITE, info.host, info.state_dir).is_running()


def ipmitool_power(info: bmc.BmcInfo, action: str) -> str:
    result = subprocess.run(["ipmitool", "-I", "lanplus", "-C", "3", "-H", str(info.address), "-U", "ADMIN", "-E",
                             "chassis", "power", action], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "IPMI_PASSWORD": "ADMIN"})
    return result.stdout.strip()


# --- sessions and the fleet ------------------------------------------------------------------------


def test_every_bmc_answers_a_fleet_power_status(targets):
    results = fleet().power_status(targets.values())
    assert {r.node: (r.ok, r.value in ("on", "off")) for r in results} == {host: (True, True) for host in HOSTS}


def test_ipmi_sim_lacks_suite_17_so_the_session_uses_3(bmcs):
    with LanSession(str(bmcs["mgmt-1"].address), Credentials("ADMIN", "ADMIN")) as session:
        assert session.suite.number == 3


def test_sessions_are_closed_so_logins_never_run_out(bmcs, targets):
    """ipmi_sim allows 10 sessions per user: twelve runs in a row must all log in."""
    results = [fleet().power_status([targets["mgmt-2"]])[0] for _ in range(12)]
    assert [r.reason for r in results] == [None] * 12


def test_power_on_is_confirmed_and_starts_the_host(bmcs, targets):
    fleet().power([targets["mgmt-1"]], "off")
    change = fleet().power([targets["mgmt-1"]], "on")[0].value
    assert (change.before, change.after, host_is_on(bmcs["mgmt-1"])) == ("off", "on", True)


def test_power_off_is_confirmed_and_stops_the_host(bmcs, targets):
    fleet().power([targets["mgmt-1"]], "on")
    change = fleet().power([targets["mgmt-1"]], "off")[0].value
    assert (change.after, host_is_on(bmcs["mgmt-1"])) == ("off", False)


def test_power_on_twice_changes_nothing_the_second_time(bmcs, targets):
    fleet().power([targets["mgmt-1"]], "on")
    assert fleet().power([targets["mgmt-1"]], "on")[0].value.changed is False


def test_soft_off_waits_for_the_host_to_go_down(bmcs, targets):
    fleet().power([targets["mgmt-2"]], "on")
    result = fleet().power([targets["mgmt-2"]], "soft")[0]
    assert (result.ok, result.value.after, host_is_on(bmcs["mgmt-2"])) == (True, "off", False)


def test_reset_restarts_the_host(bmcs, targets):
    fleet().power([targets["mgmt-3"]], "on")
    before = chassis_hook.ProcessDriver(SITE, "mgmt-3", bmcs["mgmt-3"].state_dir).host_pid()
    fleet().power([targets["mgmt-3"]], "reset")
    after = chassis_hook.ProcessDriver(SITE, "mgmt-3", bmcs["mgmt-3"].state_dir).host_pid()
    assert after is not None and after != before


def test_cycle_ends_on(bmcs, targets):
    fleet().power([targets["mgmt-3"]], "on")
    result = fleet().power([targets["mgmt-3"]], "cycle")[0]
    assert (result.ok, result.value.after, host_is_on(bmcs["mgmt-3"])) == (True, "on", True)


def test_pxe_boot_device_is_set_once(bmcs, targets):
    fleet().set_boot_device([targets["stor-1"]], "pxe")
    assert bmc.boot_device(bmcs["stor-1"]) == "pxe"


# --- sensors and inventory -------------------------------------------------------------------------


@pytest.mark.parametrize("host", HOSTS)
def test_power_draw_is_the_catalog_figure(site: Site, targets, host: str):
    status = fleet().run([targets[host]], read_node_status)[0].value
    block = site.hosts[host].block
    assert status.power_draw_w == pytest.approx(block.power.typical_w / block.nodes)


def test_temperatures_and_firmware_are_read(targets):
    status = fleet().run([targets["gpu-1"]], read_node_status)[0].value
    assert (status.temperatures_c, status.firmware) == ({"Inlet Temp": 22.0}, "1.00")


def test_fru_serial_is_read(site: Site, targets):
    serial = fleet().run([targets["gpu-2"]], lambda client: client.serial())[0].value
    assert serial == site.hosts["gpu-2"].serial


# --- what a run must survive -------------------------------------------------------------------------


SET_USER_PASSWORD = (0x06, 0x47)
ROTATED = "Lab20charsRotatedAb9"  # 20 characters, as rackform.secrets makes them


def _set_admin_password(info: bmc.BmcInfo, current: str, new: str) -> None:
    """Set user 2's password over IPMI (no command line): 20-byte form when it is longer than 16."""
    size, flag = (20, 0x80) if len(new) > 16 else (16, 0x00)
    with LanSession(str(info.address), Credentials("ADMIN", current)) as session:
        session.command(*SET_USER_PASSWORD, bytes((bmc.FACTORY_ADMIN_USER_ID | flag, 0x02)) + new.encode().ljust(size, b"\0"))


def test_a_rotated_20_character_password_logs_in(bmcs, targets):
    """ipmi_sim keeps 16 bytes of a 20-byte password: the fleet tries those next."""
    info = bmcs["stor-1"]
    _set_admin_password(info, "ADMIN", ROTATED)
    try:
        result = quick_fleet(lambda node: Credentials("ADMIN", ROTATED)).power_status([targets["stor-1"]])[0]
    finally:
        _set_admin_password(info, ROTATED[:16], "ADMIN")
    assert (result.ok, result.attempts) == (True, 1)



def test_a_wrong_password_fails_that_node_alone(targets):
    logins = from_mapping({host: Credentials("ADMIN", "ADMIN") for host in HOSTS} | {"gpu-1": Credentials("ADMIN", "wrong")})
    results = quick_fleet(logins).power_status(targets.values())
    assert {r.node: r.reason for r in results} == {**dict.fromkeys(HOSTS), "gpu-1": Reason.AUTH_REJECTED}


def test_an_address_without_a_bmc_is_unreachable(targets):
    results = quick_fleet().power_status([targets["mgmt-1"], BmcTarget("ghost", "10.62.1.99")])
    assert [(r.node, r.reason) for r in results] == [("mgmt-1", None), ("ghost", Reason.UNREACHABLE)]


def test_a_bmc_killed_mid_run_fails_alone_and_the_fleet_carries_on(site: Site, state_dir: Path, bmcs, targets):
    victim = bmcs["gpu-2"]

    def status_then_kill(client: BmcClient) -> str:
        first = client.power_state()
        if client.address == str(victim.address):
            os.kill(victim.pid, signal.SIGKILL)  # the BMC dies between two commands
            _wait_until_gone(victim.pid)
            client.power_state()
        return first

    try:
        results = quick_fleet().run(targets.values(), status_then_kill)
    finally:
        bmc.start_bmcs(site, state_dir, driver="process")  # bring the victim back for later tests
    failed = {r.node: r.reason for r in results if not r.ok}
    assert list(failed) == ["gpu-2"] and failed["gpu-2"] in (Reason.TIMEOUT, Reason.UNREACHABLE)


def _wait_until_gone(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}/stat").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        if state == "Z":
            return
        time.sleep(0.02)


# --- the commands ------------------------------------------------------------------------------------


def parse(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_bmc_status_shows_every_node_and_the_rack_figure(site: Site, root: Path, bmcs, capsys):
    code = bmc_command.run(parse(bmc_command, ["status", SITE, "--root", str(root), "--factory"]))
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in [[h] for h in HOSTS]}
    expected_w = sum(h.block.power.typical_w / h.block.nodes for h in site.hosts.values())
    assert (code, set(rows), rows["gpu-1"][4]) == (0, set(HOSTS), "8,500")
    assert f"r1    {expected_w:,.0f}" in out
    # ipmi_sim lets suite 0 and MD5 IPMI 1.5 in; lab.yaml's exception for it is shown, not failed
    gpu_1 = " ".join(rows["gpu-1"])
    assert "suite 0, IPMI 1.5 ok, accepted by the site: a simulator" in gpu_1, out


def test_bmc_status_fails_on_suite_0_without_the_sites_exception(tmp_path: Path, bmcs, capsys):
    strict = make_root(tmp_path)
    design = strict / "topologies" / "sites" / f"{SITE}.yaml"
    design.write_text(design.read_text().replace("manufacturer_id: 4753", "manufacturer_id: 343"))
    code = bmc_command.run(parse(bmc_command, ["status", SITE, "--root", str(strict), "--factory"]))
    out = capsys.readouterr().out
    assert code == 1 and f"{len(HOSTS)} BMC(s) let a weak login in" in out, out
    assert "suite 0 and IPMI 1.5 still get(s) in" in out


@pytest.fixture()
def pending_root(tmp_path: Path) -> Path:
    """ipmitest with stor-1 and gpu-2 racked in the design but not yet in the inventory."""
    pending = make_root(tmp_path)
    inventory = pending / "inventories" / SITE
    for host in ("stor-1", "gpu-2"):
        (inventory / "host_vars" / f"{host}.yml").unlink()
        hosts_file = inventory / "hosts.yml"
        hosts_file.write_text(hosts_file.read_text().replace(f"    {host}:\n", ""))
    return pending


def test_discover_enlists_new_bmcs_and_only_their_fabric_addresses_are_left(site: Site, pending_root: Path, bmcs,
                                                                             capsys):
    """discover learns what the BMCs say (address, MAC, serial); a cabled fabric port still needs its
    address (`rackform node add` allocates them), and validate names exactly those."""
    code = discover_command.run(parse(discover_command, [SITE, "--root", str(pending_root), "--oob", "10.62.1.0/24"]))
    found = load_site(SITE, pending_root)
    new = {name: (str(found.hosts[name].bmc_address), found.hosts[name].bmc_mac, found.hosts[name].serial)
           for name in ("stor-1", "gpu-2")}
    assert code == 0, capsys.readouterr()
    assert new == {name: (str(site.hosts[name].bmc_address), site.hosts[name].bmc_mac, site.hosts[name].serial)
                   for name in ("stor-1", "gpu-2")}
    errors = [f for f in run_checks(found) if f.severity == "error"]
    assert errors and {(f.check, f.loc.path.rsplit("/", 1)[-1]) for f in errors} <= {
        ("cabled_fabric_ports_addressed", "stor-1.yml"), ("cabled_fabric_ports_addressed", "gpu-2.yml")}


def test_discover_leaves_existing_entries_alone(pending_root: Path, bmcs, capsys):
    inventory = pending_root / "inventories" / SITE
    before = {path.name: path.read_bytes() for path in (inventory / "host_vars").iterdir()}
    hosts_before = (inventory / "hosts.yml").read_text().splitlines(keepends=True)
    discover_command.run(parse(discover_command, [SITE, "--root", str(pending_root), "--oob", "10.62.1.10-20"]))
    after = {path.name: path.read_bytes() for path in (inventory / "host_vars").iterdir()}
    hosts_after = (inventory / "hosts.yml").read_text().splitlines(keepends=True)
    assert {name: after[name] for name in before} == before
    assert [line for line in hosts_after if line in hosts_before] == hosts_before


# --- the BareMetalNode provider ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider():
    import sys

    stacks = str(REPO_ROOT / "stacks")
    if stacks not in sys.path:
        sys.path.insert(0, stacks)
    from providers.baremetal import BareMetalProvider

    return BareMetalProvider()


def node_props(root: Path, info: bmc.BmcInfo, **changes) -> dict:
    return {"site": SITE, "root": str(root), "node": info.host, "bmc_address": str(info.address), "bmc_port": 623,
            "power_state": "on", "boot_device": "disk", "login": "factory"} | changes


def test_provider_create_pxe_boots_the_node_once(provider, root: Path, bmcs, targets):
    info = bmcs["gpu-1"]
    fleet().power([targets["gpu-1"]], "off")
    created = provider.create(node_props(root, info, boot_device="pxe"))
    reimages = (info.state_dir / chassis_hook.REIMAGE_COUNT_FILE).read_text().strip()
    assert (created.outs["power_state"], host_is_on(info), reimages, bmc.boot_device(info)) == ("on", True, "1", "default")


def test_provider_read_returns_real_power_and_fru_but_no_telemetry(provider, root: Path, bmcs, site: Site):
    info = bmcs["gpu-1"]
    created = provider.create(node_props(root, info))
    ipmitool_power(info, "off")  # switched off behind Pulumi's back
    read = provider.read(created.id, created.outs).outs
    assert (read["power_state"], "power_draw_w" in read, "temperatures_c" in read) == ("off", False, False)
    assert (read["serial"], read["product"]) == (site.hosts["gpu-1"].serial, site.hosts["gpu-1"].block.display_name)


def test_provider_update_brings_a_drifted_node_back(provider, root: Path, bmcs):
    info = bmcs["gpu-1"]
    created = provider.create(node_props(root, info))
    ipmitool_power(info, "off")
    refreshed = provider.read(created.id, created.outs).outs
    wanted = node_props(root, info)
    assert provider.diff(created.id, refreshed, wanted).changes is True
    provider.update(created.id, refreshed, wanted)
    assert (ipmitool_power(info, "status"), host_is_on(info)) == ("Chassis Power is on", True)
