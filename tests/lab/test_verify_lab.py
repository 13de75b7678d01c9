"""`rackform verify` against a live lab: a small site of its own (`vtest`: two HCI hosts
on one Cumulus leaf), brought up, rendered, given its provision and os stages, then
verified.

Every check passes on a freshly deployed site; after one thing is broken by hand
(node-1's fab0 MTU set to 1500 over SSH) verify reports exactly that failure, for that
machine. The lab always goes down again. `vtest` has its own name and addresses
(10.87.x, 10.86.x), apart from the `lab` and `labtest` sites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.lab import lab, state
from rackform.model.loader import load_site
from rackform.pipeline import build_dir
from rackform.render.project import render_project
from rackform.run.ansible import run_playbook
from rackform.run.verify import VerifyReport, verify
from rackform.secrets import ensure_site_vault
from labenv import skip_reason
from sitebuilder import build_site, group_vars, networks, two_hosts_on_a_leaf

pytestmark = pytest.mark.lab

SITE = "vtest"
DEPLOYED_STAGES = ("provision", "os")
BROKEN_HOST, BROKEN_PORT, BROKEN_MTU = "node-1", "fab0", 1500

SITE_YAML = two_hosts_on_a_leaf(SITE, "Verify tests - two HCI hosts on one Cumulus leaf",
                                networks("10.87.0.0/24", "10.87.1.0/24", "10.86.0.0/16"))

HOST_VARS = """\
management_address: 10.87.0.{n}
management_mac: "02:57:00:00:00:{n:02x}"
bmc_address: 10.87.1.{n}
bmc_mac: "02:57:01:00:00:{n:02x}"
serial: VTEST-{n}
fabric_ports:
  fab0: {{mac: "02:56:01:00:00:{n:02x}", address: 10.86.1.{n}/24}}
"""

LEAF_VARS = """\
management_address: 10.87.0.201
management_mac: "02:57:00:00:00:c9"
serial: VTEST-LEAF-1
"""


def write_site(root: Path) -> Path:
    """A repo root holding the real catalog and the `vtest` site with its inventory."""
    host_vars = {f"node-{n}": HOST_VARS.format(n=10 + n) for n in (1, 2)} | {"leaf-1": LEAF_VARS}
    # The lab's own key, where `rackform lab up` keeps it (never in the repo).
    return build_site(root, SITE, SITE_YAML, host_vars, group_vars(SITE, "10.87.0.1", lab_key=True))


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, pytestconfig) -> Path:
    """The `vtest` lab up, its project rendered and its stages run; down afterwards."""
    reason = skip_reason(pytestconfig)
    if reason:
        pytest.skip(reason)
    root = write_site(tmp_path_factory.mktemp("vtest-root"))
    try:
        status = lab.up(SITE, root, progress=lambda line: None)
        assert status.up, "\n".join(status.lines())
        project = build_dir(root, SITE)
        site = load_site(SITE, root)
        render_project(site, project)
        # provision hardens the lab's BMCs with passwords from a vault of this test's own
        vault = ensure_site_vault(site, tmp_path_factory.mktemp("vtest-secrets"))
        for stage in DEPLOYED_STAGES:
            result = run_playbook(project, f"{stage}.yml", envvars=vault.runner_envvars())
            assert result.ok, result.summary()
        yield root
    finally:
        lab.down(SITE, progress=lambda line: None)


@pytest.fixture(scope="module")
def healthy_report(deployed: Path, tmp_path_factory) -> VerifyReport:
    junit = tmp_path_factory.mktemp("vtest-junit") / "verify.xml"
    return verify(SITE, deployed, stages=DEPLOYED_STAGES, junit_xml=junit, progress=lambda line: None)


@pytest.fixture(scope="module")
def broken_report(deployed: Path, healthy_report: VerifyReport) -> VerifyReport:
    """After the healthy run: node-1's fab0 at MTU 1500, set by hand behind Ansible's back."""
    lab_state = state.require(SITE)
    lab.ssh(lab_state, lab_state.node(BROKEN_HOST), f"ip link set dev {BROKEN_PORT} mtu {BROKEN_MTU}")
    return verify(SITE, deployed, stages=DEPLOYED_STAGES, progress=lambda line: None)


def test_deployed_site_passes_every_check(healthy_report):
    assert healthy_report.failures == [], "\n".join(healthy_report.lines())


def test_every_machine_is_checked(healthy_report):
    assert sorted(healthy_report.hosts) == ["leaf-1", "node-1", "node-2"]


@pytest.mark.parametrize("machine", ["node-1", "node-2", "leaf-1"])
def test_each_machine_passes_some_checks(healthy_report, machine):
    assert healthy_report.hosts[machine].passed > 0


def test_healthy_exit_code_is_zero(healthy_report):
    assert healthy_report.exit_code == 0


def test_junit_xml_is_written(healthy_report):
    assert healthy_report.junit_xml is not None and "<testcase" in healthy_report.junit_xml.read_text()


def test_broken_mtu_is_the_only_failure(broken_report):
    assert [(failure.host, failure.check) for failure in broken_report.failures] == [
        (BROKEN_HOST, "fabric_ports_mtu")
    ]


def test_broken_mtu_reason_names_port_and_values(broken_report):
    assert broken_report.failures[0].reason == f"fabric port MTU {BROKEN_PORT}: {BROKEN_MTU}, want 9000"


def test_broken_exit_code_is_one(broken_report):
    assert broken_report.exit_code == 1


def test_the_installed_tool_repairs_the_site_and_verifies_it(broken_report, deployed, installed_rackform):
    """rackform as a user installs it (a wheel in a fresh venv, no checkout on its path):
    its `deploy --stage os` puts node-1's fab0 back to the design's MTU, and its `verify`
    (the host checks shipped in the wheel) then passes. Last: it repairs what broken_report broke."""
    assert broken_report.exit_code == 1  # node-1's fab0 is still at 1500 here
    deployed_by_wheel = installed_rackform.run("deploy", SITE, "--stage", "os", cwd=deployed)
    assert deployed_by_wheel.returncode == 0, deployed_by_wheel.stdout + deployed_by_wheel.stderr
    assert "changed" in deployed_by_wheel.stdout

    verified = installed_rackform.run("verify", SITE, "--stage", *DEPLOYED_STAGES, cwd=deployed)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    lab_state = state.require(SITE)
    assert lab.ssh(lab_state, lab_state.node(BROKEN_HOST), f"cat /sys/class/net/{BROKEN_PORT}/mtu").stdout.strip() == "9000"
