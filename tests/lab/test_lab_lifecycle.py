"""The lab's whole life: up, every node answers, the fabric carries jumbo frames, the
power API works, a second up changes nothing, and down leaves nothing behind.

One module-scoped lab (`labtest`: node-1, node-2, leaf-1) serves every test; the
`torn_down` tests at the end take it down and look for leftovers.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from rackform.lab import lab, nodes, state

# One lab for the whole module: under xdist it must stay on one worker (--dist loadfile;
# xdist 3.8's loadgroup did not keep this module's tests together).
pytestmark = pytest.mark.lab

SITE = "labtest"
HOSTS = ("node-1", "node-2")
NODES = (*HOSTS, "leaf-1")
CABLES = {"node-1": ("fab0", "swp1"), "node-2": ("fab0", "swp2")}


@pytest.fixture(scope="module")
def lab_up(labtest_root: Path):
    lab.down(SITE, progress=lambda line: None)  # a run that died earlier may have left some
    status = lab.up(SITE, labtest_root, progress=print)
    yield status
    lab.down(SITE, progress=print)


@pytest.fixture(scope="module")
def lab_state(lab_up) -> state.LabState:
    return state.require(SITE)


def on(lab_state: state.LabState, node: str, command: str, check: bool = True) -> str:
    return lab.ssh(lab_state, lab_state.node(node), command, check=check).stdout.strip()


def test_up_reports_every_node_ready(lab_up):
    assert {node.name: node.ready for node in lab_up.nodes} == {name: True for name in NODES}


@pytest.mark.parametrize("node", NODES)
def test_node_answers_ssh_with_its_own_hostname(lab_state, node):
    assert on(lab_state, node, "hostname") == node


def test_every_node_has_its_own_machine_id(lab_state):
    machine_ids = {on(lab_state, node, "cat /etc/machine-id") for node in NODES}
    assert len(machine_ids) == len(NODES) and "" not in machine_ids


@pytest.mark.parametrize("node", NODES)
def test_systemd_is_running_without_failed_units(lab_state, node):
    # --wait: on a loaded machine a node may still be finishing its boot jobs
    state = on(lab_state, node, "timeout 90 systemctl is-system-running --wait", check=False)
    failed = on(lab_state, node, "systemctl --failed --no-legend --plain", check=False)
    assert (state, failed) == ("running", "")


@pytest.mark.parametrize(("node", "port", "mtu"), [("node-1", "fab0", 9000), ("node-2", "fab0", 9000),
                                                  ("leaf-1", "swp1", 9216), ("leaf-1", "swp2", 9216)])
def test_fabric_port_has_the_fabric_mtu(lab_state, node, port, mtu):
    assert on(lab_state, node, f"cat /sys/class/net/{port}/mtu") == str(mtu)


@pytest.mark.parametrize("host", HOSTS)
def test_host_reaches_its_leaf_port_with_jumbo_frames(lab_state, host):
    host_port, leaf_port = CABLES[host]
    leaf_addresses = json.loads(on(lab_state, "leaf-1", f"ip -j -6 addr show dev {leaf_port} scope link"))
    link_local = leaf_addresses[0]["addr_info"][0]["local"]
    # 8952 bytes of payload + 48 of IPv6/ICMPv6 headers = a full 9000-byte frame, unfragmented.
    reply = on(lab_state, host, f"ping -6 -c 1 -W 5 -M do -s 8952 {link_local}%{host_port}")
    assert " 0% packet loss" in reply


def test_leaf_runs_frr_like_a_cumulus_switch(lab_state):
    assert on(lab_state, "leaf-1", "vtysh -c 'show version' | head -1").startswith("FRRouting")


def test_leaf_sees_host_over_lldp_on_the_cabled_port(lab_state):
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        on(lab_state, "node-1", "lldpcli update", check=False)
        neighbours = on(lab_state, "leaf-1", "lldpcli -f keyvalue show neighbors ports swp1", check=False)
        if "node-1" in neighbours:
            break
        time.sleep(1)
    assert "node-1" in neighbours and "fab0" in neighbours


def test_second_up_changes_nothing(lab_up, labtest_root):
    assert lab.up(SITE, labtest_root, progress=lambda line: None).changed is False


def test_status_shows_every_node_running_and_reachable(lab_up):
    assert all(node.running and node.ssh for node in lab.status(SITE).nodes)


def test_soft_power_off_stops_the_node(lab_state):
    nodes.power_off(SITE, "node-2", soft=True)
    assert nodes.is_running(SITE, "node-2") is False


def test_power_on_boots_the_node_again(lab_state):
    nodes.power_on(SITE, "node-2")
    ready = lab.wait_until_ready(lab_state, lab_state.node("node-2"), timeout_s=60)
    assert ready.system_state == "running"


@pytest.fixture(scope="module")
def reimaged(lab_state) -> str:
    """Leave a file on node-2, reimage it, wait for it; returns its machine-id from before."""
    machine_id = on(lab_state, "node-2", "cat /etc/machine-id")
    on(lab_state, "node-2", "touch /root/left-by-test")
    nodes.reimage(SITE, "node-2")
    lab.wait_until_ready(lab_state, lab_state.node("node-2"), timeout_s=60)
    return machine_id


def test_reimage_wipes_the_disk(lab_state, reimaged):
    assert on(lab_state, "node-2", "test -e /root/left-by-test && echo present || echo absent") == "absent"


def test_reimage_keeps_the_machine_id(lab_state, reimaged):
    assert on(lab_state, "node-2", "cat /etc/machine-id") == reimaged


def test_reimage_keeps_the_host_key(lab_state, reimaged):
    # lab.ssh checks the host key against the lab's known_hosts (StrictHostKeyChecking=yes).
    assert lab.ssh(lab_state, lab_state.node("node-2"), "true", check=False).returncode == 0


def test_hard_power_off_stops_the_node(lab_state):
    nodes.power_off(SITE, "node-2", soft=False)
    assert nodes.is_running(SITE, "node-2") is False


# --- down: nothing left behind -----------------------------------------------------------------

@pytest.fixture(scope="module")
def torn_down(lab_state) -> state.LabState:
    lab.down(SITE, progress=print)
    return lab_state


def _links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {link["ifname"] for link in json.loads(out)}


def test_down_removes_namespaces(torn_down):
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"rf.{SITE}." not in listing


def test_down_removes_mounts(torn_down):
    assert torn_down.lab_dir not in Path("/proc/mounts").read_text()


def test_down_removes_bridges_and_veths(torn_down):
    ours = {bridge.name for bridge in torn_down.bridges.values()}
    ours |= {spec.mgmt_root_ifname for spec in torn_down.nodes.values()}
    assert ours & _links() == set()


def test_down_stops_every_process(torn_down):
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert [line for line in ps.splitlines() if f"-M {SITE}-" in line] == []


def test_down_removes_cgroups(torn_down):
    assert [folder for folder in nodes.site_cgroup_dirs(SITE) if folder.exists()] == []


def test_down_removes_nspawn_runtime_files(torn_down):
    propagate = Path("/run/systemd/nspawn/propagate")
    assert sorted(propagate.glob(f"{SITE}-*")) == []


def test_down_removes_state(torn_down):
    assert state.load(SITE) is None


def test_down_removes_node_disks(torn_down):
    assert [p for p in Path(torn_down.lab_dir).glob("*/upper")] == []


def test_second_down_finds_nothing(torn_down):
    assert lab.down(SITE, progress=lambda line: None) is False
