"""`rackform verify`: the report, JUnit parsing from real pytest runs, the emitted
inventory as testinfra sees it, and the helpers the checks share.

The real runs use testinfra's Ansible backend on a hand-written project whose machine
`box` has `ansible_connection: local` (this machine) and `ghost` an SSH port nobody
listens on, so no lab is needed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rackform.model.loader import load_site
from rackform.render.project import render_project
from rackform.run.verify import (
    CHECKS_DIR,
    NO_MACHINE,
    CheckFailure,
    CheckNote,
    HostResult,
    VerifyError,
    VerifyReport,
    auto_workers,
    parse_junit,
    short_reason,
    split_test_name,
    verify,
)
from rackform.run.verify_inventory import (CONTROL_DIR_ENV, SSH_EXTRA_ARGS_ENV, EmittedInventory,
                                           ssh_environment_for_testinfra)

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "unit"


def _load_checklib():
    spec = importlib.util.spec_from_file_location("rackform_checklib", CHECKS_DIR / "checklib.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


checklib = _load_checklib()


# --- report ---------------------------------------------------------------------------------

def _report(*results: HostResult) -> VerifyReport:
    return VerifyReport("unit", {result.host: result for result in results}, ("os",), duration_s=1.25)


def _failed(host: str, check: str, reason: str) -> HostResult:
    return HostResult(host, passed=3, failed=1, failures=[CheckFailure(host, check, reason)])


def test_report_lines_give_counts_then_each_failure():
    report = _report(_failed("node-1", "fabric_ports_mtu", "fabric port MTU fab0: 1500, want 9000"),
                     HostResult("node-2", passed=4, skipped=1))
    assert report.lines() == [
        "node-1           3 passed, 1 failed",
        "  FAIL fabric_ports_mtu: fabric port MTU fab0: 1500, want 9000",
        "node-2           4 passed, 1 skipped",
        "verify unit: 2 machines, 7 passed, 1 failed, 1 skipped in 1.2 s: 1 failed",
    ]


def test_report_of_unreachable_machine_is_one_line():
    reason = "unreachable: ssh: connect to host 10.0.0.9 port 22: Connection refused"
    failures = [CheckFailure("ghost", "a", reason), CheckFailure("ghost", "b", reason)]
    ghost = HostResult("ghost", failed=2, failures=failures)
    assert _report(ghost).lines()[0] == f"ghost            {reason} (2 checks not run)"


def test_report_that_passed_says_so():
    assert _report(HostResult("node-1", passed=5)).lines()[-1].endswith(": all checks passed")


@pytest.mark.parametrize(("results", "exit_code"), [
    ((HostResult("node-1", passed=5, skipped=2),), 0),
    ((HostResult("node-1", passed=5), _failed("node-2", "x", "y")), 1),
])
def test_exit_code(results, exit_code):
    assert _report(*results).exit_code == exit_code


@pytest.mark.parametrize(("name", "expected"), [
    ("test_fabric_ports_mtu[ansible://node-1]", ("fabric_ports_mtu", "node-1")),
    ("test_sshd_running[ansible://leaf-1.dc-2]", ("sshd_running", "leaf-1.dc-2")),
    ("test_passes[local://]", ("passes", "local")),
    ("test_os", ("os", NO_MACHINE)),
])
def test_split_test_name(name, expected):
    assert split_test_name(name) == expected


@pytest.mark.parametrize(("message", "reason"), [
    ("AssertionError: fabric port MTU fab0: 1500, want 9000\nassert not 'fab0: 1500, want 9000'",
     "fabric port MTU fab0: 1500, want 9000"),
    ('failed on setup with "Failed: unreachable: ssh: connect to host 10.0.0.9 port 22: No route to host"',
     "unreachable: ssh: connect to host 10.0.0.9 port 22: No route to host"),
    ("RuntimeError: Unexpected exit code 127 for CommandResult(backend=<x>, exit_status=127, "
     "command=b'ip -j link show', _stdout=b'', _stderr=b'sh: 1: ip: not found\\n')",
     "`ip -j link show` exited 127: sh: 1: ip: not found"),
    ("", "failed"),
])
def test_short_reason(message, reason):
    assert short_reason(message) == reason


def test_short_reason_is_capped():
    assert len(short_reason("x" * 5000)) == 300


@pytest.mark.parametrize(("machines", "workers"), [(3, 0), (31, 0), (32, 2), (200, 12), (10_000, 32)])
def test_auto_workers(machines, workers):
    assert auto_workers(machines) == workers


# --- real pytest runs against this machine ------------------------------------------------

ANSIBLE_CFG = """\
[defaults]
inventory = inventory
host_key_checking = False
"""

GENERATED_CHECKS = '''\
import os

import pytest

pytestmark = pytest.mark.machines("servers")


def test_passes(host):
    assert host.run("true").rc == 0


def test_fails(host):
    assert host.file("/nonexistent-rackform-check").exists, "no /nonexistent-rackform-check here"


def test_skips(host):
    pytest.skip("nothing to check")


@pytest.mark.stage("kubernetes")
def test_of_a_stage_that_did_not_run(host):
    assert False


def test_environment(host):
    assert os.environ.get("RACKFORM_UNIT_MARK") == "set"


def test_notes(host, note):
    note("first note")
    note("second note")
    assert False, "failed after its notes"


def test_environment_without_secrets(host):
    assert os.environ.get("SSH_AUTH_SOCK") == "/run/unit/agent.sock"
    assert not {"RACKFORM_UNIT_TOKEN", "AWS_SECRET_ACCESS_KEY", "PYTEST_ADDOPTS"} & set(os.environ)
'''


def write_project(root: Path, host_vars: dict[str, dict]) -> Path:
    """A minimal emitted project at root/build/unit: every host in `management_plane`."""
    project = root / "build" / SITE
    (project / "inventory" / "host_vars").mkdir(parents=True)
    (project / "ansible.cfg").write_text(ANSIBLE_CFG)
    hosts = "".join(f"            {name}:\n" for name in host_vars)
    (project / "inventory" / "hosts.yml").write_text(
        "all:\n  children:\n    servers:\n      children:\n        management_plane:\n          hosts:\n" + hosts)
    for name, values in host_vars.items():
        (project / "inventory" / "host_vars" / f"{name}.yml").write_text(json.dumps(values))
    return project


def generated_checks(folder: Path) -> Path:
    """A checks folder: the real conftest and helpers, beside a generated check."""
    folder.mkdir()
    for name in ("conftest.py", "checklib.py"):
        shutil.copy(CHECKS_DIR / name, folder / name)
    (folder / "test_generated.py").write_text(GENERATED_CHECKS)
    return folder


LOCAL = {"ansible_connection": "local"}
# Port 1 on loopback: nothing listens, so SSH is refused at once.
NOBODY = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "root"}


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory):
    """One verify run of the generated checks on `box` (this machine) and `ghost`."""
    root = tmp_path_factory.mktemp("verify-unit")
    write_project(root, {"box": LOCAL, "ghost": NOBODY})
    lines: list[str] = []
    report = verify(SITE, root, stages=("os",), checks="not environment and not notes",
                    junit_xml=root / "ci" / "verify.xml",
                    checks_dir=generated_checks(root / "checks"), progress=lines.append)
    return report, lines


def test_counts_per_machine(generated_run):
    box = generated_run[0].hosts["box"]
    assert (box.passed, box.failed, box.skipped) == (1, 1, 1)


def test_failure_reason_is_the_assertion_message(generated_run):
    assert generated_run[0].hosts["box"].failures == [
        CheckFailure("box", "fails", "no /nonexistent-rackform-check here")
    ]


def test_unreachable_machine_fails_every_check_with_ssh_reason(generated_run):
    ghost = generated_run[0].hosts["ghost"]
    assert ghost.unreachable is not None and "port 1" in ghost.unreachable and ghost.failed == 3


def test_failures_reach_progress_as_they_happen(generated_run):
    assert "box: FAIL fails: no /nonexistent-rackform-check here" in generated_run[1]


def test_a_check_s_notes_are_shown_under_its_machine(tmp_path):
    """What a check reports besides its verdict (e.g. every certificate's expiry) reaches the report."""
    write_project(tmp_path, {"box": LOCAL})
    report = verify(SITE, tmp_path, hosts="box", checks="notes", checks_dir=generated_checks(tmp_path / "checks"),
                    progress=lambda line: None)
    box = report.hosts["box"]
    assert box.notes == [CheckNote("box", "notes", "first note"), CheckNote("box", "notes", "second note")]
    assert report.lines()[1:4] == ["  FAIL notes: failed after its notes", "  NOTE notes: first note",
                                   "  NOTE notes: second note"]


def test_unreachable_machine_reaches_progress_once(generated_run):
    assert sum(line.startswith("ghost: unreachable: ") for line in generated_run[1]) == 1


def test_junit_xml_is_kept_where_asked(generated_run):
    report = generated_run[0]
    assert report.junit_xml is not None and parse_junit(report.junit_xml) == report.hosts


def test_exit_code_one_on_failure(generated_run):
    assert generated_run[0].exit_code == 1


def test_passing_run_exit_code_zero(tmp_path):
    write_project(tmp_path, {"box": LOCAL})
    report = verify(SITE, tmp_path, hosts="box", checks="passes",
                    checks_dir=generated_checks(tmp_path / "checks"), progress=lambda line: None)
    assert (report.exit_code, report.hosts["box"].passed) == (0, 1)


def test_envvars_reach_the_checks(tmp_path):
    write_project(tmp_path, {"box": LOCAL})
    report = verify(SITE, tmp_path, checks="environment and not secrets", envvars={"RACKFORM_UNIT_MARK": "set"},
                    checks_dir=generated_checks(tmp_path / "checks"), progress=lambda line: None)
    assert report.hosts["box"].passed == 1, report.lines()


def test_the_checks_get_no_secret_of_this_processs_environment(tmp_path, monkeypatch):
    """pytest gets the allowed part of this process's environment (rackform.process_environment):
    the SSH agent, not a token, a cloud key, or what a pytest run above it set."""
    monkeypatch.setenv("RACKFORM_UNIT_TOKEN", "unit-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/unit/agent.sock")
    write_project(tmp_path, {"box": LOCAL})
    report = verify(SITE, tmp_path, checks="environment_without_secrets",
                    checks_dir=generated_checks(tmp_path / "checks"), progress=lambda line: None)
    assert report.hosts["box"].passed == 1, report.lines()


# The shipped checks, on this machine, with expected values from the inventory.
needs_ip = pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's `ip`")


def _shipped_check_run(tmp_path: Path, fabric_host_mtu: int) -> VerifyReport:
    name = socket.gethostname()
    write_project(tmp_path, {name: {**LOCAL, "fabric_ports": {"lo": {}}, "fabric_host_mtu": fabric_host_mtu}})
    return verify(SITE, tmp_path, stages=("os",), checks="hostname_is_inventory_name or fabric_ports_mtu",
                  progress=lambda line: None)


@needs_ip
def test_shipped_checks_pass_on_matching_machine(tmp_path):
    lo_mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    report = _shipped_check_run(tmp_path, lo_mtu)
    assert report.hosts[socket.gethostname()].passed == 2, report.lines()


@needs_ip
def test_shipped_check_reads_expected_mtu_from_inventory(tmp_path):
    lo_mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    report = _shipped_check_run(tmp_path, 1234)
    assert [failure.reason for failure in report.failures] == [f"fabric port MTU lo: {lo_mtu}, want 1234"]


def test_plain_pytest_does_not_collect_the_checks():
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             str(CHECKS_DIR)], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 5, result.stdout  # 5: no tests collected


# --- what stops a run -------------------------------------------------------------------------

def test_missing_project_names_render(tmp_path):
    with pytest.raises(VerifyError, match="rackform render unit"):
        verify(SITE, tmp_path, progress=lambda line: None)


def test_host_pattern_matching_nothing(tmp_path):
    write_project(tmp_path, {"box": LOCAL})
    with pytest.raises(VerifyError, match="matches 'gpu-\\*'"):
        verify(SITE, tmp_path, hosts="gpu-*", progress=lambda line: None)


def test_unknown_stage(tmp_path):
    write_project(tmp_path, {"box": LOCAL})
    with pytest.raises(VerifyError, match="unknown stage deploy"):
        verify(SITE, tmp_path, stages=("deploy",), progress=lambda line: None)


# --- the emitted inventory ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_project(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("lab-project") / "lab"
    render_project(load_site("lab", REPO_ROOT), project)
    return project


@pytest.fixture(scope="module")
def lab_inventory(lab_project) -> EmittedInventory:
    return EmittedInventory(lab_project / "inventory" / "hosts.yml")


@pytest.fixture(scope="module")
def ansible_listing(lab_project) -> dict:
    """What Ansible itself makes of the same inventory."""
    output = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "--list", "-i", "inventory/hosts.yml"],
        cwd=lab_project, capture_output=True, text=True, check=True,
        env={"PATH": str(Path(sys.executable).parent), "ANSIBLE_CONFIG": str(lab_project / "ansible.cfg")},
    ).stdout
    return json.loads(output)


@pytest.mark.slow
@pytest.mark.parametrize("host", ["mgmt-1", "gpu-1", "stor-1", "leaf-1", "spine-1"])
def test_merged_vars_equal_ansibles(lab_inventory, ansible_listing, host):
    theirs = {key: value for key, value in ansible_listing["_meta"]["hostvars"][host].items() if key != "ansible_local"}
    assert json.loads(json.dumps(lab_inventory.vars_for(host))) == theirs


def test_deeper_group_and_host_vars_win(tmp_path):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "servers").mkdir(parents=True)
    (inventory / "host_vars").mkdir()
    (inventory / "hosts.yml").write_text("all:\n  children:\n    servers:\n      children:\n        gpu:\n"
                                         "          hosts:\n            gpu-1:\n")
    (inventory / "group_vars" / "all.yml").write_text("a: all\nb: all\nc: all\n")
    (inventory / "group_vars" / "servers" / "x.yml").write_text("b: servers\nc: servers\n")
    (inventory / "host_vars" / "gpu-1.yml").write_text("c: host\n")
    assert EmittedInventory(inventory / "hosts.yml").vars_for("gpu-1") == {"a": "all", "b": "servers", "c": "host"}


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("leaf-*", ["leaf-1", "leaf-2"]),
    ("gpu", ["gpu-1", "gpu-2"]),
    ("spine-1", ["spine-1"]),
    ("fabric_switches", ["leaf-1", "leaf-2", "spine-1"]),
    ("nothing", []),
])
def test_match(lab_inventory, pattern, hosts):
    assert lab_inventory.match(pattern) == hosts


def test_group_names(lab_inventory):
    assert lab_inventory.group_names("leaf-1") == [
        "block_sn4700", "cumulus", "fabric_switches", "leaf", "rack_r1", "switches"]


# --- what testinfra, as shipped, is given ------------------------------------------------------

def test_checks_never_prompt_and_use_the_runs_control_folder(tmp_path):
    env = ssh_environment_for_testinfra({}, tmp_path)
    assert (env[SSH_EXTRA_ARGS_ENV], env[CONTROL_DIR_ENV]) == (
        f"-o BatchMode=yes -o ControlPath={tmp_path}/%C", str(tmp_path))


def test_default_key_and_users_extra_args_are_kept(tmp_path):
    env = ssh_environment_for_testinfra({"ANSIBLE_PRIVATE_KEY_FILE": "/keys/default", SSH_EXTRA_ARGS_ENV: "-4"}, tmp_path)
    assert env[SSH_EXTRA_ARGS_ENV].startswith("-4 -o BatchMode=yes")
    assert env[SSH_EXTRA_ARGS_ENV].endswith("-o IdentityFile=/keys/default")


def test_testinfra_is_not_patched():
    """verify hands testinfra nothing but its own inventory file and environment."""
    import rackform.run.verify_inventory as module

    assert not hasattr(module, "install_for_testinfra")
    assert "AnsibleRunner" not in Path(module.__file__).read_text()


@pytest.mark.parametrize(("checking", "options"), [
    (True, "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=known_hosts"),
    (False, "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"),
])
def test_testinfra_as_shipped_reads_the_host_key_options_of_ansible_cfg(tmp_path, monkeypatch, checking, options):
    """testinfra's own runner (its ansible-inventory listing) gives ssh the options ansible.cfg names."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    site = load_site("lab", REPO_ROOT)
    if checking:  # the lab turns checking off; a real site is the lab without that line
        site.user_inventory.group_vars["all"].values.pop("ansible_host_key_checking")
    project = tmp_path / "lab"
    render_project(site, project)
    monkeypatch.setenv("ANSIBLE_CONFIG", str(project / "ansible.cfg"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    monkeypatch.chdir(project)
    backend = AnsibleRunner(str(project / "inventory" / "hosts.yml")).get_host("leaf-1").backend
    assert backend.NAME == "ssh" and options in backend.ssh_extra_args


# --- helpers the checks share -----------------------------------------------------------------

FRR_SUMMARY = {
    "ipv4Unicast": {"peers": {"swp31": {"state": "Established"}, "swp32": {"state": "Active"}}},
    "ipv6Unicast": {"peers": {"swp32": {"state": "Established"}, "swp33": {"state": "Idle"}}},
}


@pytest.mark.parametrize(("output", "states"), [
    (json.dumps(FRR_SUMMARY), {"swp31": "Established", "swp32": "Established", "swp33": "Idle"}),
    ("{}", {}),
    ("% No BGP process is configured", {}),
])
def test_bgp_peer_states(output, states):
    assert checklib.bgp_peer_states(output) == states


def test_parse_sysctl_lines_normalises_whitespace():
    text = "net.ipv4.tcp_rmem = 4096\t87380\t134217728\n# note\nnet.ipv4.tcp_ecn=1\n"
    assert checklib.parse_sysctl_lines(text) == {"net.ipv4.tcp_rmem": "4096 87380 134217728", "net.ipv4.tcp_ecn": "1"}


@pytest.mark.parametrize(("value", "text"), [(1, "1"), (True, "1"), ("4096  87380 134217728", "4096 87380 134217728")])
def test_sysctl_text(value, text):
    assert checklib.sysctl_text(value) == text


def test_mismatches_name_every_difference():
    assert checklib.mismatches({"fab0": 1500, "fab1": 9000}, {"fab0": 9000, "fab1": 9000, "fab2": 9000}) == (
        "fab0: 1500, want 9000; fab2: missing, want 9000")


def test_vault_encrypted_values_do_not_stop_the_reader(tmp_path):
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    bmc-1:\n")
    (tmp_path / "host_vars" / "bmc-1.yml").write_text("password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n")
    assert EmittedInventory(tmp_path / "hosts.yml").vars_for("bmc-1") == {"password": "<vault-encrypted>"}
