"""The lossless RoCE fabric in the lab: deploy the fabric and os stages on `fabtest`, then
prove it. Every leaf-spine BGP session is established; every server reaches every other
server's fabric addresses from each of its ports with 9000-byte unfragmented frames
(`ping -M do -s 8972`), across the spine where the leaves differ; a second deploy
changes nothing, and the Cumulus driver agrees with what Ansible deployed. An Onyx
CLI emulator (a rackform stand-in, not Onyx) on 127.0.0.1 gets its RoCE configuration
through `rackform fabric apply`: saved, not pushed again, and left as it was when a
push fails half-way.

`fabtest` is the shipped lab site renamed, without its HCI nodes and Kubernetes, moved
to 10.65.0.0/16 (management 10.65.0.0/24, OOB 10.65.1.0/24, fabric 10.65.16.0/20 with
leaf-1's servers on 10.65.17.0/24 and leaf-2's on 10.65.18.0/24), so it never touches
another lab. Run alone: pytest -p no:xdist -m lab tests/lab/test_fabric_lab.py
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackform import cli

from rackform.fabric import apply_cli
from rackform.lab import lab, state
from rackform.lab.onyx_emulator import CliError, FaultDisconnect, OnyxEmulator
from rackform.model.loader import load_site
from rackform.pipeline import load_and_check
from rackform.render.project import render_project
from rackform.run.ansible import RunResult, run_playbook
from labenv import skip_reason
from sitebuilder import build_site, without_data_sets

pytestmark = pytest.mark.lab

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "fabtest"
SERVERS = ("stor-1", "gpu-1", "gpu-2")
SWITCHES = ("leaf-1", "leaf-2", "spine-1")
# Both ends of every leaf-spine cable: each runs a BGP unnumbered session.
BGP_SESSIONS = (("leaf-1", "swp31"), ("leaf-2", "swp31"), ("spine-1", "swp1"), ("spine-1", "swp2"))
ADDRESS_MOVES = (("10.10.0.", "10.65.0."), ("10.10.1.", "10.65.1."), ("10.20.0.0/16", "10.65.16.0/20"),
                 ("10.20.1.", "10.65.17."), ("10.20.2.", "10.65.18."), ('"02:0a:', '"02:41:'))
PLAYBOOKS = ("validate.yml", "fabric.yml", "os.yml")
ONYX_PASSWORD = "lab-only-password"
BGP_TIMEOUT_S = 90.0


# ---------------------------------------------------------------- the fabtest site


def moved(text: str) -> str:
    for old, new in ADDRESS_MOVES:
        text = text.replace(old, new)
    return text


def fabtest_design() -> str:
    """The lab's design renamed `fabtest`: 3 servers (storage, 2 GPU), 2 leaves, 1 spine."""
    text = without_data_sets((REPO_ROOT / "topologies" / "sites" / "lab.yaml").read_text())
    text = re.sub(r"\A(#.*\n)+", "# fabtest: the lab site for the fabric lab test (tests/lab/test_fabric_lab.py).\n", text)
    text = re.sub(r"^site: lab$", f"site: {SITE}", text, flags=re.M)
    text = re.sub(r"^description: .*$", "description: Fabric test - 3 servers, 2 leaves, 1 spine", text, flags=re.M)
    text = re.sub(r"^ *- \{name: hci-1.*\n", "", text, flags=re.M)
    text = re.sub(r"^ *- \{a: mgmt-\d:.*\n", "", text, flags=re.M)
    # the lab's shared fabric settings written out (onyx_design edits its MTU); no Kubernetes
    text = text.replace("extends: [roce, kubernetes]\n", (REPO_ROOT / "topologies" / "profiles" / "roce.yaml").read_text())
    return moved(text.split("\nkubernetes:")[0] + "\n")


def write_fabtest(root: Path, design: str) -> Path:
    """`design` with the lab's inventory for fabtest's machines, moved and renamed like the design."""
    inventory = REPO_ROOT / "inventories" / "lab"
    host_vars = {name: moved((inventory / "host_vars" / f"{name}.yml").read_text()).replace("LAB-", "FABTEST-")
                 for name in (*SERVERS, *SWITCHES)}
    group_vars = moved((inventory / "group_vars" / "all.yml").read_text())
    return build_site(root, SITE, design, host_vars, group_vars.replace("lab.rackform.test", "fabtest.rackform.test"))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_fabtest(tmp_path_factory.mktemp("fabtest-root"), fabtest_design())


@pytest.fixture(scope="module")
def lab_up(root):
    reason = skip_reason(single_worker="the fabtest lab")
    if reason:
        pytest.skip(reason)
    quiet = lambda line: None  # noqa: E731
    lab.down(SITE, progress=quiet)  # whatever a run that died earlier left
    try:
        status = lab.up(SITE, root, progress=quiet)
        assert status.up, "\n".join(status.lines())
        yield state.require(SITE)
    finally:
        lab.down(SITE, progress=quiet)


def on(lab_state: state.LabState, node: str, command: str, timeout_s: float = 60.0) -> str:
    return lab.ssh(lab_state, lab_state.node(node), command, timeout_s=timeout_s, check=False).stdout


# ---------------------------------------------------------------- deploy: fabric and os, twice


@dataclass(frozen=True)
class Deploy:
    results: dict[str, RunResult]

    @property
    def changed(self) -> dict[str, int]:
        return {playbook: result.changed for playbook, result in self.results.items()}


def deploy(project: Path, lab_state: state.LabState) -> Deploy:
    results = {}
    for playbook in PLAYBOOKS:
        results[playbook] = run_playbook(project, playbook,
                                         envvars={"ANSIBLE_PRIVATE_KEY_FILE": str(lab_state.ssh_key)})
        print(f"\n{results[playbook].summary()}")
    return Deploy(results)


@pytest.fixture(scope="module")
def project(root, lab_up) -> Path:
    site, _warnings = load_and_check(SITE, root)
    return render_project(site, root / "build" / SITE).out_dir


@pytest.fixture(scope="module")
def first(project, lab_up) -> Deploy:
    return deploy(project, lab_up)


@pytest.fixture(scope="module")
def second(first, project, lab_up) -> Deploy:
    return deploy(project, lab_up)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_first_deploy_runs_without_failures(first, playbook):
    result = first.results[playbook]
    assert result.ok and result.failures == [], result.summary()


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_second_deploy_changes_nothing(second, playbook):
    assert second.changed[playbook] == 0, second.results[playbook].summary()


# ---------------------------------------------------------------- routing: BGP unnumbered


def bgp_state(lab_state: state.LabState, switch: str, port: str) -> str:
    output = on(lab_state, switch, f"vtysh -c 'show bgp neighbors {port} json'")
    try:
        return json.loads(output).get(port, {}).get("bgpState", "unknown")
    except json.JSONDecodeError:
        return f"unreadable: {output.strip()[:200]}"


@pytest.fixture(scope="module")
def bgp_converged(first, lab_up) -> dict[tuple[str, str], str]:
    """Each session's state, once all are established or BGP_TIMEOUT_S has passed."""
    deadline = time.monotonic() + BGP_TIMEOUT_S
    while True:
        states = {(switch, port): bgp_state(lab_up, switch, port) for switch, port in BGP_SESSIONS}
        if all(value == "Established" for value in states.values()) or time.monotonic() > deadline:
            return states
        time.sleep(2)


@pytest.mark.parametrize("session", BGP_SESSIONS, ids=[f"{switch}:{port}" for switch, port in BGP_SESSIONS])
def test_bgp_session_on_every_leaf_spine_link_is_established(bgp_converged, session):
    assert bgp_converged[session] == "Established"


def test_spine_learns_each_leafs_server_subnet(bgp_converged, lab_up):
    routes = json.loads(on(lab_up, "spine-1", "vtysh -c 'show ip route bgp json'"))
    assert {"10.65.17.0/24", "10.65.18.0/24"} <= set(routes)


# ---------------------------------------------------------------- reachability: jumbo frames


def fabric_ports(root: Path) -> dict[str, dict[str, str]]:
    """Server -> port -> fabric address (without the prefix length), from the inventory."""
    site = load_site(SITE, root)
    return {name: {port: str(address.ip) for port, address in sorted(host.fabric_addresses.items())}
            for name, host in site.hosts.items()}


PAIRS = [(source, target) for source in SERVERS for target in SERVERS if source != target]


@pytest.fixture(scope="module")
def pings(root, bgp_converged, lab_up) -> dict[tuple[str, str], list[str]]:
    """(source, target) -> one line per ping from each source port to each target address:
    `PORT ADDRESS loss%` (a full 9000-byte IP packet, Don't Fragment)."""
    ports = fabric_ports(root)
    results: dict[tuple[str, str], list[str]] = {}
    for source, target in PAIRS:
        script = "; ".join(
            f"printf '%s %s %s\\n' {port} {address} "
            f"\"$(ping -c 2 -i 0.2 -W 2 -M do -s 8972 -I {port} {address} | grep -o '[0-9.]*% packet loss')\""
            for port in ports[source] for address in ports[target].values()
        )
        results[(source, target)] = on(lab_up, source, script).splitlines()
    return results


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{source}->{target}" for source, target in PAIRS])
def test_server_reaches_server_from_every_port_with_jumbo_frames(pings, pair):
    lines = pings[pair]
    assert len(lines) == 4 and all(line.endswith(" 0% packet loss") for line in lines), lines


def test_path_between_the_leaves_crosses_the_spine(root, bgp_converged, lab_up):
    """gpu-1's leaf-1 port to gpu-2's leaf-2 address: three routers on the way (leaf-1,
    spine-1, leaf-2), so TTL 3 dies before gpu-2 and TTL 4 arrives."""
    target = fabric_ports(root)["gpu-2"]["fab1"]
    ping = "ping -c 1 -W 2 -M do -s 8972 -I fab0 -t {ttl} " + target + " >/dev/null && echo arrived || echo lost"
    assert [on(lab_up, "gpu-1", ping.format(ttl=ttl)).strip() for ttl in (3, 4)] == ["lost", "arrived"]


# ---------------------------------------------------------------- what the roles left behind


@pytest.mark.parametrize("server", SERVERS)
def test_roce_unit_is_enabled_for_boot(first, lab_up, server):
    assert on(lab_up, server, "systemctl is-enabled rackform-roce-host.service").strip() == "enabled"


@pytest.mark.parametrize("server", SERVERS)
def test_skipped_nic_steps_are_kept_as_a_local_fact(first, lab_up, server):
    fact = json.loads(on(lab_up, server, "cat /etc/ansible/facts.d/rackform_roce.fact"))
    steps = {(step["port"], step["step"]) for step in fact["skipped_nic_steps"]}
    assert ("fab0", "trust dscp") in steps and ("fab1", "PFC mask 0,0,0,1,0,0,0,0") in steps


def play_messages(result: RunResult, task: str) -> dict[str, list[str]]:
    """Host -> the `msg` a task printed, from ansible-runner's job events."""
    messages = {}
    for path in sorted((result.run_dir / "artifacts").rglob("job_events/*.json")):
        data = json.loads(path.read_text()).get("event_data", {})
        if data.get("task") == task and "msg" in (data.get("res") or {}):
            messages[data["host"]] = data["res"]["msg"]
    return messages


def test_skipped_nic_steps_are_shown_by_the_play(first):
    shown = play_messages(first.results["fabric.yml"], "List the NIC steps skipped here, and why")
    assert sorted(shown) == sorted(SERVERS)
    assert shown["gpu-1"][0] == "SKIPPED 10 NIC step(s) on gpu-1 (lossless RoCE is NOT set on its NICs):"


@pytest.mark.parametrize("line", ["NCCL_IB_TC=106", "NCCL_IB_GID_INDEX=3"])
def test_nccl_defaults_are_where_jobs_read_them(first, lab_up, line):
    assert line in on(lab_up, "gpu-1", "cat /etc/nccl.conf").splitlines()


def test_datapath_settings_are_written_on_the_leaf(first, lab_up):
    assert "pfc.roce_ports.cos_list = [3]" in on(lab_up, "leaf-1", "cat /etc/cumulus/datapath/qos/qos_features.conf")


def test_fabric_apply_finds_nothing_to_change_after_deploy(second, root, capsys):
    code = apply_cli.main([SITE, "--root", str(root), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert [f"{switch}: runs its designed configuration; nothing to change" for switch in SWITCHES
            if f"{switch}: runs its designed configuration; nothing to change" not in out.splitlines()] == []


# ---------------------------------------------------------------- an Onyx switch (the emulator)


ONYX_ROCE_LINES = (
    "dcb priority-flow-control enable force",
    "dcb priority-flow-control priority 3 enable",
    "interface ethernet 1/5 dcb priority-flow-control mode on force",
    "interface ethernet 1/5 qos trust L3",
    "interface ethernet 1/5 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "interface ethernet 1/5 mtu 9216 force",
    "interface ethernet 1/5 pfc-wd",
)


def onyx_design(switch_mtu: int = 9216) -> str:
    """fabtest with leaf-2 running Onyx (ports Eth1/n)."""
    design = fabtest_design().replace("os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102")
    # rackform renders no BGP for Onyx (validate refuses an AS on it): a layer-2 fabric, no AS anywhere.
    design = re.sub(r", asn: \d+", "", design)
    return design.replace("leaf-2:swp", "leaf-2:Eth1/").replace("    mtu: 9216", f"    mtu: {switch_mtu}")


@pytest.fixture(scope="module")
def onyx(tmp_path_factory):
    emulator = OnyxEmulator("leaf-2", 32, tmp_path_factory.mktemp("onyx-state"), username="admin",
                            password=ONYX_PASSWORD).start()
    try:
        yield emulator
    finally:
        emulator.stop()


def onyx_apply(root: Path, emulator: OnyxEmulator) -> tuple[int, str, str]:
    # The emulator listens on 127.0.0.1: the onyx_switch role's own variables say where.
    host_vars = root / "inventories" / SITE / "host_vars" / "leaf-2.yml"
    host_vars.write_text(host_vars.read_text() + f"onyx_switch_host: 127.0.0.1\nonyx_switch_port: {emulator.port}\n"
                         f"onyx_switch_known_hosts: {emulator.scanned_known_hosts()}\n")
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RACKFORM_SWITCH_PASSWORD", ONYX_PASSWORD)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = apply_cli.main([SITE, "--root", str(root), "--switch", "leaf-2", "--user", "admin"])
    print(out.getvalue(), err.getvalue())
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def onyx_first(tmp_path_factory, onyx):
    return onyx_apply(write_fabtest(tmp_path_factory.mktemp("onyx-root"), onyx_design()), onyx)


@pytest.fixture(scope="module")
def onyx_again(onyx_first, tmp_path_factory, onyx):
    modified_ns = onyx.running_config_path.stat().st_mtime_ns
    outcome = onyx_apply(write_fabtest(tmp_path_factory.mktemp("onyx-root"), onyx_design()), onyx)
    return outcome, modified_ns


@pytest.fixture(scope="module")
def onyx_half_way(onyx_again, tmp_path_factory, onyx):
    """A new design (switch MTU 9100) whose push is refused at its third line, once."""
    before = onyx.running_config()
    switch, configure = onyx.switch, onyx.switch.configure

    def configure_once(change):
        try:
            configure(change)
        except (CliError, FaultDisconnect):
            switch.inject_config_failure(None)
            switch.configure = configure
            raise

    switch.configure = configure_once
    switch.inject_config_failure(after_lines=2)
    outcome = onyx_apply(write_fabtest(tmp_path_factory.mktemp("onyx-root"), onyx_design(9100)), onyx)
    return outcome, before


def test_onyx_switch_is_configured_by_deploy_too(onyx_again, tmp_path_factory, onyx):
    """`rackform deploy --stage fabric`: the same stage runner, so the switch `fabric apply`
    configured is found as designed (the Onyx play ran on it and changed nothing)."""
    root = write_fabtest(tmp_path_factory.mktemp("onyx-root"), onyx_design())
    host_vars = root / "inventories" / SITE / "host_vars" / "leaf-2.yml"
    host_vars.write_text(host_vars.read_text() + f"onyx_switch_host: 127.0.0.1\nonyx_switch_port: {onyx.port}\n"
                         f"onyx_switch_known_hosts: {onyx.scanned_known_hosts()}\n")
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RACKFORM_SWITCH_PASSWORD", ONYX_PASSWORD)
        patch.setenv("RACKFORM_SWITCH_USER", "admin")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["deploy", SITE, "--root", str(root), "--stage", "fabric", "--limit", "leaf-2"])
    print(out.getvalue())
    assert code == 0 and re.search(r"^fabric\s+[\d.]+ s\s+1\s+\d+\s+0\s+0\s+0", out.getvalue(), re.M), out.getvalue()


def test_onyx_push_shows_the_diff_then_saves(onyx_first):
    code, out, _ = onyx_first
    assert code == 0 and "+ interface ethernet 1/5 mtu 9216 force" in out and "configured and saved: leaf-2" in out


@pytest.mark.parametrize("line", ONYX_ROCE_LINES)
def test_onyx_running_and_saved_configs_hold_the_roce_line(onyx_first, onyx, line):
    assert f"   {line}\n" in onyx.running_config() and f"   {line}\n" in onyx.saved_config_path.read_text()


def test_onyx_rerun_pushes_nothing(onyx_again, onyx):
    (code, out, _), modified_ns = onyx_again
    assert code == 0 and "leaf-2: runs its designed configuration; nothing to change" in out.splitlines()
    assert onyx.running_config_path.stat().st_mtime_ns == modified_ns


def test_onyx_push_failing_half_way_leaves_the_previous_config(onyx_half_way, onyx):
    (code, out, err), before = onyx_half_way
    assert code == 1 and "the previous configuration is restored" in out + err
    assert onyx.running_config() == before and onyx.saved_config_path.read_text() == before
