"""`rackform fabric check` against a running lab: clean after the os and fabric stages,
then drift planted by hand (a PFC priority edited on a leaf) and two cables swapped
(veth ends re-paired) are both reported.

The site is `chktest` (tests/unit/data/fabric_check/site: a leaf, a spine, two HCI hosts;
10.66.0.0/16 only), so it never touches a lab a person or another test has up. The lab is
taken down at the end, also when a test fails. Tests run in file order: the cable swap,
which leaves the lab re-cabled, is last.
Run alone: pytest -p no:xdist -m lab tests/lab/test_fabric_check_lab.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rackform.commands import fabric as fabric_command
from rackform.fabric.check import FabricReport, check_fabric
from rackform.fabric.live import OnyxLogin, Unreadable, lab_transport, read_device, read_site
from rackform.lab import LabError, lab, netns, state
from rackform.model.loader import load_site
from rackform.model.site import Site
from rackform.render.project import render_project
from rackform.run.ansible import run_playbook
from labenv import skip_reason

pytestmark = pytest.mark.lab

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE_FILES = REPO_ROOT / "tests" / "unit" / "data" / "fabric_check" / "site"
SITE = "chktest"
SETTLE_TIMEOUT_S = 180.0
HOST_LINK_1, HOST_LINK_2 = "node-1:fab0 - leaf-1:swp1", "node-2:fab0 - leaf-1:swp2"
UPLINK = "leaf-1:swp31 - spine-1:swp1"
QOS_FILE = "/etc/cumulus/datapath/qos/qos_features.conf"


def wait_for(condition: Callable[[], object], timeout_s: float, what: str):
    """Poll until `condition()` is truthy; its last value goes into the failure message."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s")
        time.sleep(1.0)


# ---------------------------------------------------------------- the lab, deployed


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("chktest-root")
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    shutil.copytree(SITE_FILES, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def site(root) -> Site:
    return load_site(SITE, root)


@pytest.fixture(scope="module")
def lab_up(root):
    reason = skip_reason(single_worker="the chktest lab")
    if reason:
        pytest.skip(reason)
    take_down()  # sweeps what a run that died earlier left
    try:
        status = lab.up(SITE, root, progress=lambda line: None)
        assert status.up, "\n".join(status.lines())
        yield state.load(SITE)
    finally:
        take_down()


def take_down() -> None:
    """`lab down`, once more if it trips: deleting a namespace removes the root-side veth ends
    a moment later, and `down` can try to delete one that has just gone (seen here once)."""
    try:
        lab.down(SITE, progress=lambda line: None)
    except LabError:
        lab.down(SITE, progress=lambda line: None)


@pytest.fixture(scope="module")
def deployed(lab_up, site, tmp_path_factory) -> state.LabState:
    """The os and fabric stages of the rendered project, run against the lab."""
    project = tmp_path_factory.mktemp("chktest-build")
    render_project(site, project)
    connection = {"ANSIBLE_PRIVATE_KEY_FILE": str(lab_up.ssh_key)}
    for playbook in ("os.yml", "fabric.yml"):
        result = run_playbook(project, playbook, envvars=connection)
        assert result.ok, result.summary()
    return lab_up


def live_report(site: Site) -> FabricReport:
    ssh = lab_transport(SITE)
    assert ssh is not None, "the chktest lab is not up"
    live = read_site(site, lambda target: read_device(target, ssh, OnyxLogin()))
    return check_fabric(site, live, f"lab {SITE}")


def lldp_settled(site: Site) -> FabricReport | None:
    """The report once no LLDP neighbour is missing (lldpd re-learns after the fabric stage)."""
    report = live_report(site)
    missing = [m for m in report.mismatches if m.setting == "lldp" and "sees no LLDP neighbour" in m.message]
    return None if missing else report


@pytest.fixture(scope="module")
def settled(deployed, site) -> FabricReport:
    for spec in deployed.nodes.values():
        lab.ssh(deployed, spec, "lldpcli update", check=False)  # send LLDP frames now
    return wait_for(lambda: lldp_settled(site), SETTLE_TIMEOUT_S, "LLDP did not see every cabled neighbour")


def rackform_fabric_check(root: Path, capsys, *options: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    fabric_command.add_arguments(parser)
    capsys.readouterr()
    code = fabric_command.run(parser.parse_args([SITE, "--root", str(root), *options]))
    return code, capsys.readouterr().out


# ---------------------------------------------------------------- clean


def test_clean_after_the_os_and_fabric_stages(settled):
    assert settled.ok, "\n".join(f"{m.link}: {m.setting}: {m.message}" for m in settled.mismatches)


def test_rackform_fabric_check_exits_0_on_the_clean_lab(settled, root, capsys):
    code, out = rackform_fabric_check(root, capsys)
    assert code == 0 and "chktest: clean: the two ends of all 3 fabric link(s) agree" in out


def test_lab_hosts_say_their_nic_settings_are_not_readable(settled):
    no_nic = [endpoints for (reason, _), endpoints in settled.unreadable.items() if reason == "no RDMA NIC"]
    assert no_nic == [["node-1:fab0", "node-2:fab0"]]


# ---------------------------------------------------------------- a PFC priority changed by hand


@pytest.fixture
def pfc_changed_on_leaf(settled):
    """leaf-1's QoS file edited by hand: PFC on priority 4 instead of 3."""
    lab_state = state.load(SITE)
    leaf = lab_state.node("leaf-1")

    def set_pfc(old: int, new: int) -> None:
        lab.ssh(lab_state, leaf, f"sed -i 's/^pfc.roce_ports.cos_list = \\[{old}\\]$/"
                                 f"pfc.roce_ports.cos_list = [{new}]/' {QOS_FILE}")

    set_pfc(3, 4)
    assert "= [4]" in lab.ssh(lab_state, leaf, f"grep '^pfc.roce_ports.cos_list' {QOS_FILE}").stdout
    yield
    set_pfc(4, 3)


def test_pfc_priority_edited_on_a_leaf_is_reported_on_its_links(pfc_changed_on_leaf, site):
    report = live_report(site)
    pfc = {m.link: m.live for m in report.mismatches if m.setting == "pfc_priorities"}
    no_nic = Unreadable("no RDMA NIC")
    assert pfc == {
        HOST_LINK_1: {"node-1:fab0": no_nic, "leaf-1:swp1": (4,)},
        HOST_LINK_2: {"node-2:fab0": no_nic, "leaf-1:swp2": (4,)},
        UPLINK: {"leaf-1:swp31": (4,), "spine-1:swp1": (3,)},
    }


def test_rackform_fabric_check_exits_1_on_the_edited_pfc(pfc_changed_on_leaf, root, capsys):
    code, out = rackform_fabric_check(root, capsys)
    assert code == 1 and "  PFC priorities (live): leaf-1:swp1 runs [4], the design says [3]" in out


# ---------------------------------------------------------------- two cables swapped (last: it re-cables the lab)


def recable(lab_state: state.LabState, pairs: dict[tuple[str, str], tuple[str, str]]) -> None:
    """Re-pair veth ends: each (node, port) key is joined to the (node, port) value,
    keeping every port's name, MAC and MTU from the lab's plan."""
    ends = {}
    for link in lab_state.links:
        ends[(link.a_node, link.a_port)] = (link.a_mac, link.a_mtu)
        ends[(link.b_node, link.b_port)] = (link.b_mac, link.b_mtu)
    for node, port in pairs:
        netns.delete_link(port, lab_state.node(node).netns)  # its peer goes with it
    for (a_node, a_port), (b_node, b_port) in pairs.items():
        (a_mac, a_mtu), (b_mac, b_mtu) = ends[(a_node, a_port)], ends[(b_node, b_port)]
        netns.add_veth(a_port, lab_state.node(a_node).netns, a_mac, a_mtu,
                       b_port, lab_state.node(b_node).netns, b_mac, b_mtu)
    # As when a cable is pulled: lldpd forgets the old neighbour at once (a veth re-made under
    # the same name would otherwise keep it until its TTL, 120 s, runs out).
    for node in sorted({node for pair in pairs.items() for node, _ in pair}):
        lab.ssh(lab_state, lab_state.node(node), "systemctl restart lldpd", check=False)


@pytest.fixture
def cables_swapped(settled):
    lab_state = state.load(SITE)
    recable(lab_state, {("node-1", "fab0"): ("leaf-1", "swp2"), ("node-2", "fab0"): ("leaf-1", "swp1")})
    yield
    recable(lab_state, {("node-1", "fab0"): ("leaf-1", "swp1"), ("node-2", "fab0"): ("leaf-1", "swp2")})


def lldp_after_swap(site: Site) -> dict | None:
    """LLDP mismatches once both host links have one and every port sees one neighbour again."""
    report = live_report(site)
    lldp = {m.link: m for m in report.mismatches if m.setting == "lldp"}
    settled_now = {HOST_LINK_1, HOST_LINK_2} <= lldp.keys() and all(
        value not in ("none", "") and ", " not in str(value) for m in lldp.values() for value in m.live.values())
    return {link: m.live for link, m in lldp.items()} if settled_now else None


def test_two_swapped_cables_are_reported_by_the_lldp_check(cables_swapped, site):
    seen = wait_for(lambda: lldp_after_swap(site), SETTLE_TIMEOUT_S,
                    "LLDP did not report the swapped cables on both links")
    assert seen == {
        HOST_LINK_1: {"node-1:fab0": "leaf-1:swp2", "leaf-1:swp1": "node-2:fab0"},
        HOST_LINK_2: {"node-2:fab0": "leaf-1:swp1", "leaf-1:swp2": "node-1:fab0"},
    }
