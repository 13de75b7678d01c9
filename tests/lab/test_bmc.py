"""The lab's BMCs: one ipmi_sim per host answers ipmitool, pyghmi and FreeIPMI at its own
OOB address, powers its host through the chassis hook, and `stop_bmcs` leaves nothing behind.

The site is the shipped lab (3 HCI nodes, a storage node, 2 DGX H100) renamed `bmctest`
and moved to 10.96.x, so these tests never touch a lab a person (or the lifecycle tests,
on 10.99.x) has up. Hosts run on the `process` driver, the BMC-only test driver: a real
`sleep infinity` process per host stands for "powered on". One module-wide set of BMCs
serves every test; each stateful test uses a host of its own; the last test stops them.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pyghmi.ipmi import command as pyghmi_command

from rackform.lab import LabError, bmc, chassis_hook, netns
from rackform.model.loader import load_site
from rackform.model.site import Site

# One module-wide set of BMCs: keep the module on one xdist worker (--dist loadgroup).
# Should it be split anyway, each worker gets a site and addresses of its own; a lock
# file per site makes concurrent runs (another checkout, another session) take turns,
# since BMC namespaces, links and addresses are named after the site alone.
pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-bmc")]

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
SITE = "bmctest" if WORKER == 0 else f"bmctest{WORKER}"
LOCK_FILE = Path(tempfile.gettempdir()) / f"rackform-test-{SITE}.lock"
HOSTS = ("gpu-1", "gpu-2", "mgmt-1", "mgmt-2", "mgmt-3", "stor-1")
PASSWORD = bmc.FACTORY_ADMIN_PASSWORD
USER = bmc.FACTORY_ADMIN_USER
TOOLS = ("ipmi_sim", "ipmitool", "ipmipower", "nsenter")


def _moved(text: str) -> str:
    """The lab's addresses moved to 10.96 (mgmt, OOB) and 10.95 (fabric), 10.94/93 for gw1 ..."""
    return text.replace("10.10.", f"10.{96 - 2 * WORKER}.").replace("10.20.", f"10.{95 - 2 * WORKER}.")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt: openipmi ipmitool freeipmi-tools)")
    root = tmp_path_factory.mktemp("bmctest-root")
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    shutil.copy(REPO_ROOT / "topologies" / "defaults.yaml", root / "topologies" / "defaults.yaml")
    shutil.copytree(REPO_ROOT / "topologies" / "profiles", root / "topologies" / "profiles")  # lab.yaml extends them
    (root / "topologies" / "sites").mkdir()
    lab_yaml = (REPO_ROOT / "topologies" / "sites" / "lab.yaml").read_text()
    renamed = re.sub(r"^site: lab$", f"site: {SITE}", lab_yaml, flags=re.MULTILINE)
    (root / "topologies" / "sites" / f"{SITE}.yaml").write_text(_moved(renamed))
    shutil.copytree(REPO_ROOT / "inventories" / "lab", root / "inventories" / SITE)
    for path in (root / "inventories" / SITE).rglob("*.yml"):
        path.write_text(_moved(path.read_text()))
    return load_site(SITE, root)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bmctest-state")


@pytest.fixture(scope="module")
def bmcs(site: Site, state_dir: Path) -> dict[str, bmc.BmcInfo]:
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bmc.stop_bmcs(site, state_dir)  # sweeps what a run that died earlier left
        started = bmc.start_bmcs(site, state_dir, driver="process")
        yield {info.host: info for info in started}
        bmc.stop_bmcs(site, state_dir)


@pytest.fixture(scope="module")
def password_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bmctest-secrets") / "ipmi-password"
    path.touch(mode=0o600)
    path.write_text(f"{PASSWORD}\n")
    return path


@pytest.fixture(scope="module")
def pyghmi_session(bmcs):
    """One pyghmi Command per BMC, as a long-lived client keeps one session per BMC.

    pyghmi 1.6.19 stores the credentials as bytes and compares them with the str it is
    given when looking for a session to reuse, so a second Command(...) for the same BMC in
    one process never matches and then waits forever on the first session's login.
    """
    sessions: dict[str, pyghmi_command.Command] = {}

    def session(host: str) -> pyghmi_command.Command:
        if host not in sessions:
            sessions[host] = pyghmi_command.Command(bmc=str(bmcs[host].address), userid=USER,
                                                    password=PASSWORD)
        return sessions[host]

    return session


def ipmitool(info: bmc.BmcInfo, *args: str, password: str = PASSWORD, user: str = USER,
             password_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    """ipmitool over lanplus with cipher suite 3; the password via -f or the environment, never -P."""
    secret = ["-f", str(password_file)] if password_file else ["-E"]
    environment = {**os.environ, "IPMI_PASSWORD": password}
    return subprocess.run(["ipmitool", "-I", "lanplus", "-C", "3", "-H", str(info.address), "-U", user,
                           *secret, *args], capture_output=True, text=True, env=environment, timeout=60)


def host_process(info: bmc.BmcInfo) -> chassis_hook.ProcessDriver:
    return chassis_hook.ProcessDriver(SITE, info.host, info.state_dir)


def power_status(info: bmc.BmcInfo) -> str:
    return ipmitool(info, "chassis", "power", "status").stdout.strip()


def wait_for_power_status(info: bmc.BmcInfo, state: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    status = power_status(info)
    while status != f"Chassis Power is {state}" and time.monotonic() < deadline:
        time.sleep(0.1)
        status = power_status(info)
    return status


def expected_power_w(site: Site, host: str) -> float:
    block = site.hosts[host].block
    return block.power.typical_w / block.nodes


# --- start ---------------------------------------------------------------------------------------

def test_every_host_with_a_bmc_address_gets_a_bmc(site: Site, bmcs):
    assert set(bmcs) == {h.name for h in site.hosts.values() if h.bmc_address is not None} == set(HOSTS)


@pytest.mark.parametrize("host", HOSTS)
def test_bmc_listens_at_the_inventory_address(site: Site, bmcs, state_dir: Path, host: str):
    status = {s.host: s for s in bmc.bmc_status(site, state_dir)}[host]
    assert (status.up, status.address) == (True, site.hosts[host].bmc_address)


@pytest.mark.parametrize("host", HOSTS)
def test_each_bmc_runs_in_its_own_network_namespace(bmcs, host: str):
    inside = os.readlink(f"/proc/{bmcs[host].pid}/ns/net")
    assert bmcs[host].netns == f"{SITE}-bmc-{host}" and inside != os.readlink("/proc/self/ns/net")


def test_long_veth_names_are_shortened_to_the_kernel_limit(bmcs):
    names = {info.veth for info in bmcs.values()}
    assert len(names) == len(bmcs) and all(len(name) <= netns.IFNAME_MAX for name in names)


def test_second_start_keeps_the_running_bmcs(site: Site, state_dir: Path, bmcs):
    again = bmc.start_bmcs(site, state_dir, driver="process")
    assert {info.host: info.pid for info in again} == {host: info.pid for host, info in bmcs.items()}


def test_a_second_state_dir_cannot_take_over_running_bmcs(site: Site, bmcs, tmp_path: Path):
    with pytest.raises(LabError, match="already runs from"):
        bmc.start_bmcs(site, tmp_path, driver="process")
    assert list(tmp_path.iterdir()) == []


# --- ipmitool --------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", HOSTS)
def test_chassis_power_status_answers(bmcs, host: str):
    result = ipmitool(bmcs[host], "chassis", "power", "status")
    assert result.returncode == 0 and re.fullmatch(r"Chassis Power is (on|off)", result.stdout.strip())


def test_password_file_logs_in(bmcs, password_file: Path):
    result = ipmitool(bmcs["mgmt-2"], "chassis", "power", "status", password_file=password_file)
    assert result.returncode == 0, result.stderr


def test_wrong_password_is_rejected(bmcs):
    result = ipmitool(bmcs["mgmt-2"], "chassis", "power", "status", password="not-the-password")
    assert result.returncode != 0 and "Unable to establish IPMI v2 / RMCP+ session" in result.stderr


def test_null_user_is_enabled_as_shipped(bmcs):
    """Factory default on purpose: provisioning must disable user 1 (docs/domain.md, "IPMI safety rules")."""
    result = ipmitool(bmcs["mgmt-2"], "chassis", "power", "status", user="", password="")
    assert result.returncode == 0, result.stderr


def test_power_on_starts_the_host(bmcs):
    info = bmcs["mgmt-1"]
    ipmitool(info, "chassis", "power", "on")
    assert (power_status(info), host_process(info).is_running()) == ("Chassis Power is on", True)


def test_power_off_stops_the_host(bmcs):
    info = bmcs["mgmt-1"]
    ipmitool(info, "chassis", "power", "on")
    pid = host_process(info).host_pid()
    ipmitool(info, "chassis", "power", "off")
    assert (pid is not None, power_status(info), host_process(info).host_pid()) == (
        True, "Chassis Power is off", None)


def test_host_runs_outside_the_bmc_network_namespace(bmcs):
    info = bmcs["mgmt-1"]
    ipmitool(info, "chassis", "power", "on")
    assert os.readlink(f"/proc/{host_process(info).host_pid()}/ns/net") == os.readlink("/proc/self/ns/net")


def test_bootdev_pxe_is_recorded(bmcs):
    info = bmcs["mgmt-2"]
    result = ipmitool(info, "chassis", "bootdev", "pxe")
    assert result.returncode == 0 and bmc.boot_device(info) == "pxe"


def test_pxe_boot_reimages_the_host_once(bmcs):
    info = bmcs["mgmt-3"]
    ipmitool(info, "chassis", "power", "off")
    ipmitool(info, "chassis", "bootdev", "pxe")
    ipmitool(info, "chassis", "power", "on")
    reimages = (info.state_dir / chassis_hook.REIMAGE_COUNT_FILE).read_text().strip()
    assert (reimages, bmc.boot_device(info), host_process(info).is_running()) == ("1", "default", True)


def test_reset_restarts_the_host(bmcs):
    info = bmcs["gpu-1"]
    ipmitool(info, "chassis", "power", "on")
    before = host_process(info).host_pid()
    ipmitool(info, "chassis", "power", "reset")
    after = host_process(info).host_pid()
    assert after is not None and after != before


def test_soft_power_off_stops_the_host(bmcs):
    info = bmcs["gpu-2"]
    ipmitool(info, "chassis", "power", "on")
    ipmitool(info, "chassis", "power", "soft")  # answered at once, carried out in the background
    assert wait_for_power_status(info, "off") == "Chassis Power is off"


# --- pyghmi and FreeIPMI ---------------------------------------------------------------------------

def test_pyghmi_powers_the_host_on_and_reads_it_back(bmcs, pyghmi_session):
    info = bmcs["stor-1"]
    ipmi = pyghmi_session("stor-1")
    result = ipmi.set_power("on", wait=True)
    assert (result, ipmi.get_power(), host_process(info).is_running()) == (
        {"powerstate": "on"}, {"powerstate": "on"}, True)


def test_pyghmi_powers_the_host_off(bmcs, pyghmi_session):
    info = bmcs["stor-1"]
    ipmi = pyghmi_session("stor-1")
    ipmi.set_power("on", wait=True)
    assert (ipmi.set_power("off", wait=True), host_process(info).is_running()) == ({"powerstate": "off"}, False)


@pytest.mark.parametrize("host", HOSTS)
def test_pyghmi_power_sensor_reads_the_catalog_figure(site: Site, pyghmi_session, host: str):
    readings = {reading.name: reading for reading in pyghmi_session(host).get_sensor_data()}
    power = readings["Power Draw"]
    assert (power.value, power.units) == (pytest.approx(expected_power_w(site, host)), "W")


def test_dgx_power_sensor_reads_8500_w(pyghmi_session):
    assert {r.name: r.value for r in pyghmi_session("gpu-1").get_sensor_data()}["Power Draw"] == 8500


def test_pyghmi_wrong_password_raises(bmcs):
    with pytest.raises(Exception, match="Incorrect password"):
        pyghmi_command.Command(bmc=str(bmcs["mgmt-2"].address), userid=USER, password="not-the-password")


def test_ipmipower_reaches_every_bmc_at_once(bmcs, tmp_path: Path):
    config = tmp_path / "freeipmi.conf"
    config.touch(mode=0o600)
    config.write_text(f"username {USER}\npassword {PASSWORD}\n")
    addresses = ",".join(str(info.address) for info in bmcs.values())
    result = subprocess.run(["ipmipower", "-D", "LAN_2_0", "-W", "opensesspriv", "-h", addresses,
                             f"--config-file={config}", "--stat"], capture_output=True, text=True, timeout=60)
    answers = dict(re.findall(r"^(\S+): (on|off)$", result.stdout, flags=re.MULTILINE))
    assert set(answers) == {str(info.address) for info in bmcs.values()}, result.stdout + result.stderr


# --- secrets ---------------------------------------------------------------------------------------

def test_lan_conf_is_readable_by_root_only(bmcs):
    info = bmcs["gpu-1"]
    modes = (info.state_dir.stat().st_mode & 0o777, (info.state_dir / bmc.LAN_CONF).stat().st_mode & 0o777)
    assert modes == (0o700, 0o600)


def test_password_is_on_no_command_line(bmcs):
    command_lines = [Path(f"/proc/{info.pid}/cmdline").read_bytes().split(b"\0") for info in bmcs.values()]
    assert all(PASSWORD.encode() not in words for words in command_lines)


def test_password_is_only_in_lan_conf(bmcs):
    info = bmcs["mgmt-1"]
    ipmitool(info, "chassis", "power", "on")  # so that the hook has written its log
    names = (bmc.EMULATOR_COMMANDS, bmc.RECORD, bmc.LOG, chassis_hook.EVENTS_FILE)
    assert [name for name in names if PASSWORD in (info.state_dir / name).read_text()] == []


# --- the chassis hook on its own -----------------------------------------------------------------

HEAVY_MODULES = ("pydantic", "yaml", "jinja2", "rackform.model", "rackform.render")


def test_hook_get_power_imports_nothing_heavy(tmp_path: Path):
    """ipmi_sim runs the hook on every chassis status request: it must start fast."""
    probe = ("import runpy, sys\n"
             f"sys.argv = ['hook', '--site', 's', '--node', 'n', '--driver', 'process', "
             f"'--state-dir', {str(tmp_path)!r}, 'get', 'power']\n"
             "try:\n    runpy.run_module('rackform.lab.chassis_hook', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             f"print([m for m in sys.modules if m.startswith({HEAVY_MODULES!r})])\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines() == ["power:0", "[]"], result.stderr


def _nspawn_hook(state_dir: Path, *request_words: str) -> subprocess.CompletedProcess[str]:
    """The hook on the nspawn driver for a site whose lab is not up (an empty lab state dir)."""
    environment = {**os.environ, "RACKFORM_LAB_STATE_DIR": str(state_dir / "labs")}
    return subprocess.run([sys.executable, "-m", "rackform.lab.chassis_hook", "--site", "nolab", "--node",
                           "n1", "--driver", "nspawn", "--state-dir", str(state_dir), *request_words],
                          capture_output=True, text=True, env=environment, timeout=60)


def test_hook_nspawn_driver_reads_a_lab_that_is_not_up_as_off(tmp_path: Path):
    assert _nspawn_hook(tmp_path, "get", "power").stdout == "power:0\n"


def test_hook_nspawn_driver_says_why_it_cannot_power_on(tmp_path: Path):
    result = _nspawn_hook(tmp_path, "set", "power", "1")
    assert result.returncode == 1 and "lab nolab is not up" in result.stdout


@pytest.mark.parametrize("request_words", [["get", "fan"], ["set", "power", "2"], ["set", "boot", "floppy"],
                                           ["set", "power"]])
def test_hook_refuses_what_it_cannot_do(tmp_path: Path, request_words: list[str]):
    arguments = ["--site", "s", "--node", "n1", "--driver", "process", "--state-dir", str(tmp_path)]
    assert chassis_hook.main([*arguments, *request_words]) == 1


# --- sensor scaling (no BMC needed) ------------------------------------------------------------------

@pytest.mark.parametrize(("watts", "scale"), [(22, (1, 22)), (400, (2, 200)), (900, (4, 225)),
                                                (8500, (34, 250)), (10200, (40, 255))])
def test_power_figures_scale_exactly_into_one_byte(watts: int, scale: tuple[int, int]):
    assert bmc.linear_scale(watts) == scale


def test_a_figure_without_an_exact_scale_is_off_by_less_than_the_multiplier():
    multiplier, raw = bmc.linear_scale(8501)
    assert raw <= 255 and abs(multiplier * raw - 8501) <= multiplier / 2


# --- stop (keep last: it stops the module's BMCs) ---------------------------------------------------

def _live_processes_in(folder: Path) -> list[str]:
    """Live processes whose working directory is (or was) under `folder`: ipmi_sim and test hosts."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")  # zombies have none
            argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, UnicodeDecodeError):
            continue
        if cwd.startswith(f"{folder}/"):
            found.append(f"{proc.name} {argv0}")
    return found


def test_stop_bmcs_leaves_nothing_behind(site: Site, state_dir: Path, bmcs):
    ipmitool(bmcs["mgmt-1"], "chassis", "power", "on")  # a host process to clean up too
    bmc.stop_bmcs(site, state_dir)
    leftovers = {
        "namespaces": netns.list_netns(f"{SITE}-bmc-"),
        "links": [name for name in [*(i.veth for i in bmcs.values()), bmc.oob_bridge_name(SITE)]
                  if netns.link(name) is not None],
        "processes": _live_processes_in(state_dir),
        "files": [str(p) for p in state_dir.rglob("*")],
    }
    assert leftovers == {"namespaces": [], "links": [], "processes": [], "files": []}
