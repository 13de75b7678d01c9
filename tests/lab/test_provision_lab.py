"""The emitted provision stage against real RMCP+ BMCs (ipmi_sim), through ansible-runner.

Site `provtest` (addresses in 10.61.0.0/16 only): six HCI nodes whose BMCs start with
factory defaults (ADMIN/ADMIN and the null user) and power `process`-driver hosts (a
`sleep` process per host), so no container is needed. The vault lives in a temporary
secrets folder. The SSH wait (bmc_reachable) and the PXE play are skipped: these hosts
have no SSH and the PXE service has tests of its own.

The module's tests run in order and share the BMCs: first the hardening run and its
re-run, then the faults (each puts its BMC back), then the secret scan over everything
the runs left behind. Figures (hardening and re-run time) are printed with -s.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rackform.lab import bmc, chassis_hook
from rackform.model.loader import load_site
from rackform.render.project import render_project
from rackform.run.ansible import RunResult, run_playbook
from rackform.secrets import SiteVault
from sitebuilder import build_site, networks, one_rack_site

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-provision")]

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "provtest"
LOCK_FILE = Path(tempfile.gettempdir()) / f"rackform-test-{SITE}.lock"
HOSTS = ("node-1", "node-2", "node-3", "node-4", "node-5", "node-6")
TOOLS = ("ipmi_sim", "ipmitool", "nsenter")
POWER_TASK = "Set the next boot device, then the power state, each read back from the BMC"
HARDEN_TASK = "Harden the BMC (site admin with the vault password; null and factory users disabled)"
IPMI15_PASSWORD_BYTES = 16  # what ipmi_sim keeps of a password (OpenIPMI copies 16 bytes)

SITE_YAML = one_rack_site(SITE, "Provision tests - six HCI nodes with factory-default BMCs", """\
- {name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2, node-3, node-4]}
- {name: hci-2, block: hci, position_u: 3, hosts: [node-5, node-6]}
""", networks("10.61.0.0/24", "10.61.1.0/24", "10.61.16.0/20") + "fabric:\n  no_single_point_of_failure: false\n")

HOST_VARS = """\
management_address: 10.61.0.{n}
management_mac: "02:3d:00:00:00:{n:02x}"
bmc_address: 10.61.1.{n}
bmc_mac: "02:3d:01:00:00:{n:02x}"
serial: PROVTEST-{n}
"""


# --- the site, its BMCs, its vault and its project ---------------------------------------------

@pytest.fixture(scope="module")
def site_root(tmp_path_factory) -> Path:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt: openipmi ipmitool util-linux)")
    if os.geteuid() != 0:
        pytest.skip("the lab's BMCs need root (network namespaces)")
    host_vars = {host: HOST_VARS.format(n=number) for number, host in enumerate(HOSTS, 11)}
    return build_site(tmp_path_factory.mktemp("provtest-root"), SITE, SITE_YAML, host_vars,
                      f"ansible_user: root\ndomain: {SITE}.rackform.test\n")


@pytest.fixture(scope="module")
def site(site_root):
    return load_site(SITE, site_root)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("provtest-state")


@pytest.fixture(scope="module")
def bmcs(site, state_dir) -> dict[str, bmc.BmcInfo]:
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        bmc.stop_bmcs(site, state_dir)
        try:
            started = bmc.start_bmcs(site, state_dir, driver="process")
            yield {info.host: info for info in started}
        finally:
            bmc.stop_bmcs(site, state_dir)


def running_bmcs(site, state_dir) -> dict[str, bmc.BmcInfo]:
    """(Re)start every BMC that is not running (its users and settings persist) and return them all."""
    return {info.host: info for info in bmc.start_bmcs(site, state_dir, driver="process")}


@pytest.fixture(scope="module")
def vault(site, tmp_path_factory) -> SiteVault:
    made = SiteVault(SITE, tmp_path_factory.mktemp("provtest-secrets"), environ={})
    made.ensure(HOSTS)
    return made


@pytest.fixture(scope="module")
def project(site, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("provtest-build") / SITE
    render_project(site, out)
    return out


class Runs:
    """Runs provision.yml and keeps every result (the secret scan reads their folders)."""

    def __init__(self, project: Path, vault: SiteVault):
        self.project = project
        self.vault = vault
        self.results: list[RunResult] = []
        self.command_lines: list[bytes] = []

    def __call__(self, limit: str | None = None, run_tags: str | None = None, on_event=None) -> RunResult:
        envvars = {**self.vault.runner_envvars(), "ANSIBLE_SKIP_TAGS": "bmc_reachable,pxe"}
        if run_tags:
            envvars["ANSIBLE_RUN_TAGS"] = run_tags

        def handler(event: dict) -> None:
            if event.get("event") == "runner_on_start":
                self.command_lines.extend(_command_lines())
            if on_event is not None:
                on_event(event)

        result = run_playbook(self.project, "provision.yml", limit=limit, envvars=envvars, event_handler=handler)
        self.results.append(result)
        return result


def _command_lines() -> list[bytes]:
    """Every process's command line now (the module runs while a task runs)."""
    found = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(path.read_bytes())
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def runs(project, vault) -> Runs:
    return Runs(project, vault)


@pytest.fixture(scope="module")
def first_run(bmcs, runs) -> RunResult:
    result = runs()
    print(f"\nhardening {len(HOSTS)} factory-default BMCs: {result.duration_s:.1f} s ({result.summary()})")
    return result


@pytest.fixture(scope="module")
def second_run(first_run, runs) -> RunResult:
    result = runs()
    print(f"\nre-run on {len(HOSTS)} hardened BMCs: {result.duration_s:.1f} s, {result.changed} changed")
    return result


# --- talking to a BMC from the test ----------------------------------------------------------------

def ipmitool(info: bmc.BmcInfo, user: str, password: str, *args: str, suite: str = "3"):
    """ipmitool over lanplus; the password through the environment (-E), never on the command line."""
    return subprocess.run(["ipmitool", "-I", "lanplus", "-C", suite, "-H", str(info.address), "-U", user, "-E",
                           *args], capture_output=True, text=True, env={**os.environ, "IPMI_PASSWORD": password},
                          timeout=60)


def site_password(vault: SiteVault, host: str) -> str:
    """The part of the vault password ipmi_sim keeps (its first 16 bytes)."""
    return vault.load()[host].password[:IPMI15_PASSWORD_BYTES]


def host_is_running(info: bmc.BmcInfo) -> bool:
    return chassis_hook.ProcessDriver(SITE, info.host, info.state_dir).is_running()


def failures_by_host(result: RunResult) -> dict[str, str]:
    return {failure.host: failure.message for failure in result.failures}


def facts(result: RunResult, host: str) -> dict:
    cached = next((result.run_dir / "artifacts").glob(f"*/fact_cache/*{host}"))
    return json.loads(json.loads(cached.read_text())["__payload__"])["rackform_bmc"]


def live_bmc(state_dir: Path, host: str) -> bmc.BmcInfo:
    """The host's BMC as recorded now (its pid changes when it is restarted)."""
    return next(info for info in bmc.recorded_bmcs(state_dir, SITE) if info.host == host)


def kill_bmc(state_dir: Path, host: str) -> None:
    """SIGKILL the host's ipmi_sim: the BMC vanishes mid-conversation."""
    info = live_bmc(state_dir, host)
    proc = Path(f"/proc/{info.pid}")
    if (proc / "comm").read_text().strip() != "ipmi_sim" or (proc / "cwd").resolve() != info.state_dir.resolve():
        raise AssertionError(f"pid {info.pid} is not {host}'s ipmi_sim")
    os.kill(info.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while proc.exists() and (proc / "stat").read_text().split()[2] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)


# --- first contact and the re-run ------------------------------------------------------------------

def test_first_run_hardens_every_bmc(first_run):
    assert (first_run.ok, sorted(h for h, s in first_run.hosts.items() if s.changed)) == (True, list(HOSTS)), \
        first_run.summary()


def test_factory_login_is_refused_afterwards(first_run, bmcs):
    accepted = [host for host, info in bmcs.items() if ipmitool(info, "ADMIN", "ADMIN", "chassis", "status").returncode == 0]
    assert accepted == []


def test_null_user_is_refused_afterwards(first_run, bmcs):
    accepted = [host for host, info in bmcs.items() if ipmitool(info, "", "", "chassis", "status").returncode == 0]
    assert accepted == []


def test_site_admin_logs_in_with_the_vault_password(first_run, bmcs, vault):
    refused = [host for host, info in bmcs.items()
               if ipmitool(info, "rackform", site_password(vault, host), "chassis", "status").returncode != 0]
    assert refused == []


def test_site_admin_has_administrator_privilege(first_run, bmcs, vault):
    info = bmcs["node-1"]
    listing = ipmitool(info, "rackform", site_password(vault, "node-1"), "user", "list", "1").stdout
    assert any(line.split()[1:2] == ["rackform"] and line.rstrip().endswith("ADMINISTRATOR")
               for line in listing.splitlines())


def test_harden_logged_in_with_cipher_suite_3_and_reports_the_16_byte_password(first_run):
    found = facts(first_run, "node-1")
    assert (found["cipher_suite"], found["password_bytes"], found["admin_user_id"]) == (3, IPMI15_PASSWORD_BYTES, 3)


def test_every_host_is_powered_on(first_run, bmcs):
    assert [host for host, info in bmcs.items() if not host_is_running(info)] == []


def test_every_host_boots_from_disk(first_run, bmcs):
    assert {host: bmc.boot_device(info) for host, info in bmcs.items()} == dict.fromkeys(HOSTS, "default")


def test_second_run_changes_nothing(second_run):
    assert (second_run.ok, second_run.changed) == (True, 0), second_run.summary()


def test_check_mode_on_the_hardened_fleet_changes_nothing(second_run, project, vault):
    envvars = {**vault.runner_envvars(), "ANSIBLE_SKIP_TAGS": "bmc_reachable,pxe"}
    result = run_playbook(project, "provision.yml", check=True, envvars=envvars)
    assert (result.ok, result.changed) == (True, 0), result.summary()


def test_a_restarted_bmc_keeps_its_hardening(second_run, site, state_dir, bmcs, runs):
    kill_bmc(state_dir, "node-6")
    running_bmcs(site, state_dir)
    result = runs(limit="node-6")
    assert (result.ok, result.changed) == (True, 0), result.summary()


def test_harden_set_the_cipher_suite_levels_and_ipmi_sim_reads_them_back(first_run, bmcs, vault):
    """Read back by ipmitool, not by rackform: LAN parameter 24 on channel 1. ipmi_sim lists
    suites 1-16 in parameter 23, so only its third entry (suite 3) keeps administrator."""
    for host, info in bmcs.items():
        done = ipmitool(info, "rackform", site_password(vault, host), "raw", "0x0c", "0x02", "1", "24", "0", "0")
        assert done.stdout.split() == ["11", "00", "00", "04", "00", "00", "00", "00", "00", "00"], (host, done.stderr)


def test_ipmi_sim_still_lets_suite_0_in_and_the_site_exception_reports_it(first_run, bmcs):
    """ipmi_sim stores the levels without honouring them: the proof finds suite 0 open, and the
    site's recorded exception (tests/lab/sitebuilder.py) turns the failure into a report."""
    found = facts(first_run, "node-1")
    assert found["suite0_open"] is True and "stores the cipher suite privilege levels" in found["suite0_exception"]
    result = ipmitool(bmcs["node-1"], "rackform", "not-the-password", "chassis", "status", suite="0")
    assert result.returncode == 0, result.stderr


def test_rotating_the_password_of_a_hardened_bmc(second_run, bmcs, vault, runs):
    """`rackform secrets --rotate`: the run logs in with the previous password and sets the new one."""
    info = bmcs["node-3"]
    old = site_password(vault, "node-3")
    vault.rotate(["node-3"])
    new = site_password(vault, "node-3")
    result = runs(limit="node-3")
    assert (result.ok, result.changed > 0) == (True, True), result.summary()
    assert ipmitool(info, "rackform", new, "chassis", "status").returncode == 0
    assert ipmitool(info, "rackform", old, "chassis", "status").returncode != 0
    again = runs(limit="node-3")
    assert (again.ok, again.changed) == (True, 0), again.summary()


# --- faults: each fails its own host, with a clear message, and is put right afterwards ----------

def test_wrong_password_fails_that_host_alone(second_run, bmcs, vault, runs):
    from pyghmi.ipmi import command

    info = bmcs["node-2"]
    changed_elsewhere = "Elsewhere00000000"[:16]
    ipmi = command.Command(bmc=str(info.address), userid="rackform", password=site_password(vault, "node-2"))
    ipmi.set_user_password(3, password=changed_elsewhere)  # someone changed it outside rackform
    try:
        result = runs()
    finally:
        restore = command.Command(bmc=str(info.address), userid="rackform", password=changed_elsewhere)
        restore.set_user_password(3, password=vault.load()["node-2"].password)
    failed = failures_by_host(result)
    assert (list(failed), result.changed) == (["node-2"], 0), result.summary()
    # Ansible masks every no_log value in module output: the factory user's name is its password here.
    assert "rejected every credential rackform has for it (site, factory account '********')" in failed["node-2"]


def test_unreachable_bmc_fails_that_host_alone(second_run, bmcs, runs):
    info = bmcs["node-3"]
    subprocess.run(["ip", "link", "set", info.veth, "down"], check=True)
    try:
        result = runs()
    finally:
        subprocess.run(["ip", "link", "set", info.veth, "up"], check=True)
    failed = failures_by_host(result)
    assert (list(failed), result.changed) == (["node-3"], 0), result.summary()
    assert "no answer from 10.61.1.13:623" in failed["node-3"] and "gave up after 4 tries" in failed["node-3"]


def test_bmc_killed_mid_run_fails_that_host_alone_while_the_others_finish(second_run, site, state_dir, bmcs, runs):
    def kill_after_harden(event: dict) -> None:  # between its harden and its power task
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("host") == "node-4" and data.get("task") == HARDEN_TASK:
            kill_bmc(state_dir, "node-4")

    try:
        result = runs(on_event=kill_after_harden)
    finally:
        running_bmcs(site, state_dir)
    failed = failures_by_host(result)
    finished = [host for host, stats in result.hosts.items() if host != "node-4" and stats.failed == 0]
    assert (list(failed), sorted(finished)) == (["node-4"], sorted(set(HOSTS) - {"node-4"})), result.summary()
    assert "10.61.1.14" in failed["node-4"] and "gave up after" in failed["node-4"]


@pytest.fixture
def fake_bmc(site, state_dir, bmcs):
    """Replace node-5's ipmi_sim by rackform.ipmi.fakebmc in mode `mode` (in its namespace)."""
    info = bmcs["node-5"]
    started: list[subprocess.Popen] = []

    def start(mode: str) -> subprocess.Popen:
        kill_bmc(state_dir, "node-5")
        process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{info.netns}", sys.executable, "-m", "rackform.ipmi.fakebmc",
             "--address", str(info.address), "--mode", mode], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
        started.append(process)
        assert process.stdout.readline().startswith("listening"), "the fake BMC did not start"
        return process

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)
    running_bmcs(site, state_dir)


def _requests_seen(process: subprocess.Popen) -> list[str]:
    process.terminate()
    return process.communicate(timeout=10)[0].split()


@pytest.mark.parametrize(("mode", "reason"), [
    ("suite0", "offers cipher suites 0 and none of 17, 3: rackform refuses suite 0"),
    ("ipmi15", "speaks only IPMI 1.5"),
])
def test_insecure_bmc_is_refused_before_any_login(second_run, fake_bmc, runs, mode, reason):
    process = fake_bmc(mode)
    result = runs(limit="node-5")
    failed = failures_by_host(result)
    assert (list(failed), reason in failed.get("node-5", "")) == (["node-5"], True), result.summary()
    assert "open-session" not in _requests_seen(process)


def test_a_bmc_refusing_suites_17_and_3_at_login_is_not_retried(second_run, fake_bmc, runs):
    process = fake_bmc("silent-list")
    result = runs(limit="node-5")
    assert "accepts neither cipher suite 17 nor 3" in failures_by_host(result).get("node-5", ""), result.summary()
    assert _requests_seen(process).count("open-session") == 2  # suite 17, then 3: one try, no retry


def test_too_many_failed_bmcs_stop_the_play(second_run, bmcs, runs):
    """Two of six (33 %) is over the default max_fail_percentage of 25: the others stop too."""
    down = [bmcs["node-1"], bmcs["node-2"]]
    for info in down:
        subprocess.run(["ip", "link", "set", info.veth, "down"], check=True)
    powered: list[str] = []

    def note_power(event: dict) -> None:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_start" and data.get("task") == POWER_TASK:
            powered.append(data.get("host"))

    try:
        result = runs(on_event=note_power)
    finally:
        for info in down:
            subprocess.run(["ip", "link", "set", info.veth, "up"], check=True)
    assert (sorted(failures_by_host(result)), powered, result.ok) == (["node-1", "node-2"], [], False)


# --- boot device and power -------------------------------------------------------------------------

def test_reimage_boots_once_from_pxe(second_run, bmcs, runs):
    info = bmcs["node-6"]
    before = chassis_hook.ProcessDriver(SITE, "node-6", info.state_dir).host_pid()
    result = runs(limit="node-6", run_tags="all,reimage")
    reimages = (info.state_dir / chassis_hook.REIMAGE_COUNT_FILE).read_text().strip()
    after = chassis_hook.ProcessDriver(SITE, "node-6", info.state_dir).host_pid()
    assert (result.ok, reimages, bmc.boot_device(info), after not in (None, before)) == (
        True, "1", "default", True), result.summary()


def test_a_run_after_reimaging_changes_nothing(second_run, runs):
    result = runs(limit="node-6")
    assert (result.ok, result.changed) == (True, 0), result.summary()


@pytest.fixture
def chassis_session(bmcs, vault):
    """The module's own login and chassis code, run here against node-5's BMC."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "unit"))
    from provision_support import load_ipmi_modules

    modules = load_ipmi_modules()
    session = modules["rackform_ipmi_session"]
    credential = session.Credential("rackform", vault.load()["node-5"].password, "site")
    ipmi, _, _, _ = session.first_login(str(bmcs["node-5"].address), 623, [credential])
    yield modules["rackform_ipmi_chassis"], ipmi
    session.logout(ipmi)


@pytest.mark.parametrize(("wanted", "running"), [("off", False), ("on", True), ("soft", False), ("cycle", True),
                                                  ("reset", True)])
def test_power_change_is_read_back(second_run, bmcs, chassis_session, wanted, running):
    chassis, ipmi = chassis_session
    result = chassis.set_power(ipmi, wanted, timeout_s=30)
    assert (result["power"], host_is_running(bmcs["node-5"])) == ("on" if running else "off", running)


def test_reset_restarts_the_host(second_run, bmcs, chassis_session):
    chassis, ipmi = chassis_session
    chassis.set_power(ipmi, "on", timeout_s=30)
    driver = chassis_hook.ProcessDriver(SITE, "node-5", bmcs["node-5"].state_dir)
    before = driver.host_pid()
    chassis.set_power(ipmi, "reset", timeout_s=30)
    assert driver.host_pid() not in (None, before)


def test_commands_do_not_wait_out_pyghmi_retry_timer(second_run, chassis_session):
    """With rackform's fix to pyghmi's lost wake-up (docs/provisioning.md), an answer that came
    back before pyghmi started waiting is taken at once. Without it, about one command in ten
    took 0.5-1 s here; a few slow ones are allowed for a machine starved of CPU."""
    _, ipmi = chassis_session
    slow = 0
    for _ in range(200):
        started = time.monotonic()
        ipmi.raw_command(netfn=0x06, command=0x46, data=[3])  # Get User Name
        slow += time.monotonic() - started > 0.45
    assert slow <= 4


# --- secrets: keep last, it reads what every run above left behind ---------------------------------

def _generated_passwords(vault: SiteVault) -> set[bytes]:
    found = set()
    for credential in vault.load().values():
        for password in (credential.password, *credential.previous):
            found |= {password.encode(), password[:IPMI15_PASSWORD_BYTES].encode()}
    return found


def _files_holding(folder: Path, secrets: set[bytes], skip=()) -> list[str]:
    holding = []
    for path in folder.rglob("*"):
        if path.is_file() and not any(part in skip for part in path.relative_to(folder).parts):
            data = path.read_bytes()
            holding += [str(path) for secret in secrets if secret in data]
    return holding


def test_no_generated_password_in_the_project_artifacts_or_logs(second_run, runs, project, vault, state_dir):
    passwords = _generated_passwords(vault)
    assert len(runs.results) >= 2 and list((project / "artifacts").iterdir())
    bmc_logs = [path for path in state_dir.rglob("*") if path.name in (bmc.LOG, chassis_hook.EVENTS_FILE)]
    ansible_temp = Path.home() / ".ansible" / "tmp"  # AnsiballZ files (module arguments) if any were kept
    found = {
        "project and artifacts": _files_holding(project, passwords),
        "ansible temp": _files_holding(ansible_temp, passwords) if ansible_temp.is_dir() else [],
        "BMC logs": [str(p) for p in bmc_logs for secret in passwords if secret in p.read_bytes()],
        "command lines": [line.decode(errors="replace")[:80] for line in runs.command_lines
                          for secret in passwords if secret in line],
    }
    assert found == {"project and artifacts": [], "ansible temp": [], "BMC logs": [], "command lines": []}


def test_the_secret_scan_would_see_a_password(tmp_path, vault):
    """The scan itself works: a planted password is found."""
    (tmp_path / "leak.txt").write_bytes(b"password: " + vault.load()["node-1"].password.encode())
    assert _files_holding(tmp_path, _generated_passwords(vault)) != []
