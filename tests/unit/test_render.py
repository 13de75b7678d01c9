"""render: the standalone Ansible project a site emits (build/<site>/)."""

from __future__ import annotations

import re

import configparser
import copy
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml

from rackform.model.loader import load_site
from rackform.model.schema import RoceOverrides
from rackform.model.source import BadInput
from rackform.model.site import Cable, Endpoint, Port
from rackform.pipeline import STAGES
from rackform.render.digest import stage_digest
from rackform.render.groups import host_groups
from rackform.render.project import render_files, render_project
from rackform.render.project_files import forks_for
from rackform.render.writer import write_project
from collection_support import ROLES_IN_PROJECT
from rackform.collection import short_name

ROOT = Path(__file__).parents[2]
ANSIBLE_STAGES = [stage.name for stage in STAGES if stage.playbook]
LAB_SERVERS = {"mgmt-1", "mgmt-2", "mgmt-3", "stor-1", "gpu-1", "gpu-2"}
LAB_SWITCHES = {"leaf-1", "leaf-2", "spine-1"}


@pytest.fixture(scope="module")
def lab():
    return load_site("lab", ROOT)


@pytest.fixture(scope="module")
def files(lab):
    return render_files(lab)


def load(files: dict[str, bytes], path: str):
    return yaml.safe_load(files[path])


def text(files: dict[str, bytes], path: str) -> str:
    return files[path].decode()


# ---------------------------------------------------------------- determinism and writing


def test_rendering_twice_gives_identical_bytes(files):
    assert render_files(load_site("lab", ROOT)) == files


def test_paths_are_sorted(files):
    assert list(files) == sorted(files)


def test_second_write_of_the_same_site_changes_nothing(files, tmp_path):
    write_project(files, tmp_path / "lab")
    assert write_project(files, tmp_path / "lab").changed == ()


def test_first_write_adds_every_file(files, tmp_path):
    result = write_project(files, tmp_path / "lab")
    assert set(result.added) == set(files)


def test_written_files_hold_the_rendered_bytes(files, tmp_path):
    write_project(files, tmp_path / "lab")
    assert (tmp_path / "lab" / "inventory" / "hosts.yml").read_bytes() == files["inventory/hosts.yml"]


def test_write_reports_a_modified_file(files, tmp_path):
    write_project(files, tmp_path / "lab")
    changed = {**files, "README.md": b"changed\n"}
    assert write_project(changed, tmp_path / "lab").modified == ("README.md",)


def test_write_removes_stale_files(files, tmp_path):
    write_project(files, tmp_path / "lab")
    (tmp_path / "lab" / "inventory" / "host_vars" / "gone.yml").write_text("old: 1\n")
    result = write_project(files, tmp_path / "lab")
    assert result.removed == ("inventory/host_vars/gone.yml",)
    assert not (tmp_path / "lab" / "inventory" / "host_vars" / "gone.yml").exists()


def test_write_keeps_the_fact_cache(files, tmp_path):
    write_project(files, tmp_path / "lab")
    cached = tmp_path / "lab" / ".cache" / "facts" / "gpu-1"
    cached.parent.mkdir(parents=True)
    cached.write_text("{}")
    write_project({**files, "README.md": b"changed\n"}, tmp_path / "lab")
    assert cached.read_text() == "{}"


def test_write_leaves_no_temporary_folders(files, tmp_path):
    write_project(files, tmp_path / "lab")
    write_project({**files, "README.md": b"changed\n"}, tmp_path / "lab")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["lab"]


def _tree(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_concurrent_writes_leave_one_whole_project(files, tmp_path):
    other = {**files, "README.md": b"other\n"}
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda version: write_project(version, tmp_path / "lab"), [files, other] * 3))
    assert _tree(tmp_path / "lab") in (files, other)


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.yml", "inventory/../../x", ".cache/facts/x"])
def test_write_refuses_paths_outside_the_project(tmp_path, path):
    with pytest.raises(ValueError, match="refusing"):
        write_project({path: b"x"}, tmp_path / "lab")


def test_render_project_writes_and_reports(lab, tmp_path):
    render_project(lab, tmp_path / "lab")
    assert render_project(lab, tmp_path / "lab").changed == ()


# ---------------------------------------------------------------- hygiene


@pytest.mark.parametrize("machine_path", [str(ROOT), str(Path.home()), os.getcwd(), sys.prefix])
def test_no_path_of_this_machine_is_written(files, machine_path):
    assert [path for path, content in files.items() if machine_path.encode() in content] == []


def _keys(data) -> set[str]:
    if isinstance(data, dict):
        return {str(key) for key in data}.union(*(_keys(value) for value in data.values()))
    if isinstance(data, list):
        return set().union(*(_keys(value) for value in data))
    return set()


@pytest.mark.parametrize("word", ["pass", "secret", "token", "credential", "private_key"])
def test_no_inventory_variable_holds_a_secret(files, word):
    names = set().union(*(_keys(load(files, path)) for path in files if path.startswith("inventory/")))
    assert [name for name in names if word in name.lower()] == []


@pytest.mark.parametrize("marker", [b"-----BEGIN", b"$ANSIBLE_VAULT"])
def test_no_file_carries_secret_material(files, marker):
    assert [path for path, content in files.items() if marker in content] == []


# `password: "{{ ... }}"` (a template reading the vault) is how roles take a password;
# a literal value after password: or password= never is.
# A key ending in "password" that holds a mapping (an argument spec's option) is not a literal.
LITERAL_PASSWORD = re.compile(rb"password\s*[:=]\s*['\"]?(?!\{\{)(?![\w-]+:\s)[^\s'\"{}()\[\],]{3,}", re.IGNORECASE)


def test_no_file_sets_a_literal_password(files):
    literal = {
        path: LITERAL_PASSWORD.search(content).group(0)
        for path, content in files.items()
        if not path.endswith(".py") and LITERAL_PASSWORD.search(content)
    }
    assert literal == {}


def test_literal_password_pattern_catches_a_literal():
    assert LITERAL_PASSWORD.search(b"  password: ADMIN\n") and LITERAL_PASSWORD.search(b"password=hunter22 ")
    assert not LITERAL_PASSWORD.search(b'password: "{{ bmc_harden_password }}"')
    assert not LITERAL_PASSWORD.search(b"onyx_switch_password:\n  description: >-\n")


# ---------------------------------------------------------------- inventory groups


@pytest.fixture(scope="module")
def members(files):
    """group -> hosts in it (directly or through children), from hosts.yml."""
    found: dict[str, set[str]] = {}
    for host, groups in host_groups(load(files, "inventory/hosts.yml")["all"]).items():
        for group in groups:
            found.setdefault(group, set()).add(host)
    return found


@pytest.mark.parametrize(
    "group, hosts",
    [
        ("management_plane", {"mgmt-1", "mgmt-2", "mgmt-3"}),
        ("gpu", {"gpu-1", "gpu-2"}),
        ("storage", {"stor-1"}),
        ("servers", LAB_SERVERS),
        ("switches", LAB_SWITCHES),
        ("cumulus", LAB_SWITCHES),
        ("fabric_switches", LAB_SWITCHES),
        ("leaf", {"leaf-1", "leaf-2"}),
        ("spine", {"spine-1"}),
        ("kube_control_plane", {"mgmt-1", "mgmt-2", "mgmt-3"}),
        ("kube_node", {"gpu-1", "gpu-2"}),
        ("etcd", {"mgmt-1", "mgmt-2", "mgmt-3"}),
        ("k8s_cluster", {"mgmt-1", "mgmt-2", "mgmt-3", "gpu-1", "gpu-2"}),
        ("block_dgx_h100", {"gpu-1", "gpu-2"}),
        ("block_hci", {"mgmt-1", "mgmt-2", "mgmt-3"}),
        ("block_sn4700", LAB_SWITCHES),
        ("rack_r1", LAB_SERVERS | LAB_SWITCHES),
        ("all", LAB_SERVERS | LAB_SWITCHES),
    ],
)
def test_lab_groups_hold_the_right_machines(members, group, hosts):
    assert members[group] == hosts


@pytest.mark.parametrize("group", ["compute", "onyx", "management_switch", "oob_switch"])
def test_fixed_groups_exist_even_when_empty(files, group):
    assert f"\n        {group}: {{}}\n" in text(files, "inventory/hosts.yml")


def test_unmanaged_switch_stays_out_of_the_inventory(files, members):
    assert "oob-1" not in members["all"] and "inventory/host_vars/oob-1.yml" not in files


@pytest.fixture(scope="module")
def ansible_inventory(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("inventory") / "lab"
    write_project(files, out)
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(
        ["ansible-inventory", "-i", str(out / "inventory"), "--list"],
        capture_output=True,
        text=True,
        env=env,
        cwd=out,
        check=True,
    )
    return json.loads(listed.stdout)


def _ansible_members(inventory: dict, group: str) -> set[str]:
    entry = inventory.get(group, {})
    hosts = set(entry.get("hosts", ()))
    for child in entry.get("children", ()):
        hosts |= _ansible_members(inventory, child)
    return hosts


@pytest.mark.parametrize(
    "group, hosts",
    [
        ("servers", LAB_SERVERS),
        ("cumulus", LAB_SWITCHES),
        ("kube_node", {"gpu-1", "gpu-2"}),
        ("etcd", {"mgmt-1", "mgmt-2", "mgmt-3"}),
        ("block_stor_xl", {"stor-1"}),
        ("rack_r1", LAB_SERVERS | LAB_SWITCHES),
    ],
)
def test_ansible_reads_the_groups(ansible_inventory, group, hosts):
    assert _ansible_members(ansible_inventory, group) == hosts


def test_ansible_reads_the_host_variables(ansible_inventory):
    gpu = ansible_inventory["_meta"]["hostvars"]["gpu-1"]
    assert (gpu["ansible_host"], gpu["fabric_host_mtu"], gpu["site_name"]) == ("10.10.0.15", 9000, "lab")


# ---------------------------------------------------------------- variables


@pytest.mark.parametrize(
    "line",
    [
        "10.10.0.11 mgmt-1.lab.rackform.test mgmt-1",
        "10.10.0.16 gpu-2.lab.rackform.test gpu-2",
        "10.10.0.14 stor-1.lab.rackform.test stor-1",
        "10.10.0.203 spine-1.lab.rackform.test spine-1",
    ],
)
def test_etc_hosts_file_names_every_machine(files, line):
    assert line in files["files/etc_hosts"].decode().splitlines()


def test_etc_hosts_file_has_one_line_per_machine_and_no_group_variable(files):
    site_lines = [line for line in files["files/etc_hosts"].decode().splitlines() if ".lab.rackform.test" in line]
    assert len(site_lines) == len(LAB_SERVERS | LAB_SWITCHES)
    assert not any("etc_hosts" in path for path in files if path.startswith("inventory/"))


def test_lab_says_host_key_checking_is_off(files):
    cfg = files["ansible.cfg"].decode()
    assert "host_key_checking = False" in cfg and "StrictHostKeyChecking=no" in cfg
    assert "OFF" in files["known_hosts"].decode()


def test_real_site_checks_host_keys_against_rendered_known_hosts(lab, tmp_path):
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    site = copy.deepcopy(lab)
    site.user_inventory.group_vars["all"].values.pop("ansible_host_key_checking")
    site.hosts["gpu-1"].user_vars["ssh_host_keys"] = [key + " root@gpu-1"]
    files = render_files(site)
    cfg = files["ansible.cfg"].decode()
    assert "host_key_checking = True" in cfg
    assert "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=known_hosts" in cfg
    assert f"10.10.0.15,gpu-1,gpu-1.lab.rackform.test {key}" in files["known_hosts"].decode().splitlines()


def test_known_hosts_asks_keys_of_managed_machines_only(lab):
    """An unmanaged switch (no SSH of rackform's) is not a machine whose key is missing."""
    from ipaddress import IPv4Address as Address

    site = copy.deepcopy(lab)
    site.user_inventory.group_vars["all"].values.pop("ansible_host_key_checking")
    switch = next(iter(site.switches.values()))
    switch.os, switch.management_address = "unmanaged", Address("10.10.0.250")
    header = render_files(site)["known_hosts"].decode().splitlines()[2]
    missing = sum(1 for node in (*site.hosts.values(), *site.switches.values())
                  if node.management_address is not None and getattr(node, "os", None) != "unmanaged")
    assert f"No key in the inventory for {missing} machine(s)" in header and switch.name not in header
    assert "rackform ssh-keys lab --collect" in header


def test_malformed_host_key_is_a_source_error(lab):
    site = copy.deepcopy(lab)
    site.hosts["gpu-1"].user_vars["ssh_host_keys"] = ["ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ"]
    with pytest.raises(BadInput, match=r"gpu-1\.yml:\d+: ssh_host_keys: gpu-1: the ssh-ed25519 key is not valid"):
        render_files(site)


@pytest.mark.parametrize(
    "host, key, value",
    [
        ("gpu-1", "ansible_host", "10.10.0.15"),
        ("gpu-1", "bmc_address", "10.10.1.15"),
        ("gpu-1", "serial_number", "LAB-GPU-1"),
        ("gpu-1", "rack_name", "r1"),
        ("gpu-1", "rack_position_u", 7),
        ("mgmt-2", "device_name", "hci-1"),
        ("mgmt-2", "block_type", "hci"),
        ("leaf-1", "switch_asn", 65101),
        ("leaf-1", "switch_os", "cumulus"),
    ],
)
def test_host_vars_carry_inventory_and_placement(files, host, key, value):
    assert load(files, f"inventory/host_vars/{host}.yml")[key] == value


def test_fabric_port_names_its_far_end(files):
    port = load(files, "inventory/host_vars/gpu-1.yml")["fabric_ports"]["fab1"]
    assert (port["peer_switch"], port["peer_port"], port["address"]) == ("leaf-2", "swp5", "10.20.2.15/24")


@pytest.mark.parametrize(
    "switch, port, description, bgp_peer",
    [
        ("leaf-1", "swp5", "gpu-1:fab0", False),
        ("leaf-1", "swp31", "spine-1:swp1", True),
        ("spine-1", "swp2", "leaf-2:swp31", True),
    ],
)
def test_switch_ports_come_from_the_cabling_plan(files, switch, port, description, bgp_peer):
    link = load(files, f"inventory/host_vars/{switch}.yml")["switch_ports"][port]
    assert (link["description"], link["bgp_peer"]) == (description, bgp_peer)


@pytest.mark.parametrize(
    "path, key, value",
    [
        ("inventory/group_vars/all/fabric.yml", "fabric_roce_priority", 3),
        ("inventory/group_vars/all/fabric.yml", "fabric_cnp_dscp", 48),
        ("inventory/group_vars/fabric_switches/fabric.yml", "fabric_switch_mtu", 9216),
        ("inventory/group_vars/fabric_switches/fabric.yml", "fabric_switch_dscp_to_priority", {26: 3, 48: 6}),
        ("inventory/group_vars/servers/fabric.yml", "fabric_host_roce_tos", 106),
        ("inventory/group_vars/servers/fabric.yml", "fabric_host_mtu", 9000),
        ("inventory/group_vars/all/ntp.yml", "site_ntp_servers", ["10.10.0.1"]),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kube_version", "1.36.1"),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kubeadm_config_api_version", "kubeadm.k8s.io/v1beta4"),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kube_pods_subnet", "10.244.0.0/16"),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kube_service_addresses", "10.96.0.0/12"),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kube_network_plugin", "kube-router"),
        ("inventory/group_vars/k8s_cluster/kubernetes.yml", "kube_vip_address", "10.10.0.5"),
        ("inventory/group_vars/k8s_cluster/cni.yml", "calico_version", "v3.30.0"),
        ("inventory/group_vars/k8s_cluster/cni.yml", "kube_router_version", "v2.1.0"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_host", "mgmt-1"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_address", "10.10.0.11"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_apt_url", "http://10.10.0.11:8080/apt"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_charts_url", "http://10.10.0.11:8080/charts"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_registry", "10.10.0.11:5000"),
        ("inventory/group_vars/all/mirror.yml", "site_mirror_air_gapped", True),
        ("inventory/group_vars/cumulus/connection.yml", "ansible_connection", "ssh"),
    ],
)
def test_group_vars_hold_the_design_values(files, path, key, value):
    assert load(files, path)[key] == value


def test_the_mirror_host_is_told_the_controller_s_bundle_of_the_site_s_release(files):
    from rackform.mirror.bundle import bundle_path

    assert load(files, "inventory/group_vars/all/mirror.yml")["site_mirror_bundle"] == str(bundle_path("1.36.1"))


def test_roce_override_of_a_host_becomes_its_host_variable(lab):
    site = copy.deepcopy(lab)
    site.hosts["gpu-1"].device.roce_overrides = RoceOverrides(mtu=4200)
    assert load(render_files(site), "inventory/host_vars/gpu-1.yml")["fabric_host_mtu"] == 4200


def test_roce_override_of_a_switch_reaches_its_config(lab):
    site = copy.deepcopy(lab)
    site.switches["leaf-1"].device.roce_overrides = RoceOverrides(mtu=9100)
    assert "    mtu 9100\n" in text(render_files(site), "switch_configs/leaf-1.cumulus.conf")


# ---------------------------------------------------------------- ansible.cfg and playbooks


@pytest.fixture(scope="module")
def ansible_cfg(files):
    parser = configparser.ConfigParser()
    parser.read_string(text(files, "ansible.cfg"))
    return parser


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("defaults", "forks", "9"),
        ("defaults", "collections_path", "collections"),
        ("defaults", "gathering", "smart"),
        ("defaults", "fact_caching", "jsonfile"),
        ("defaults", "fact_caching_connection", ".cache/facts"),
        ("defaults", "host_key_checking", "False"),
        ("defaults", "retry_files_enabled", "False"),
        ("defaults", "callback_result_format", "yaml"),
        ("ssh_connection", "pipelining", "True"),
    ],
)
def test_ansible_cfg_is_tuned(ansible_cfg, section, key, value):
    assert ansible_cfg[section][key] == value


def test_ssh_connections_are_multiplexed(ansible_cfg):
    assert "ControlPersist" in ansible_cfg["ssh_connection"]["ssh_args"]


@pytest.mark.parametrize("machines, forks", [(1, 5), (9, 9), (50, 50), (10_000, 50)])
def test_forks_grow_with_the_site_within_bounds(machines, forks):
    assert forks_for(machines) == forks


@pytest.mark.parametrize(
    "command", ["ansible-playbook -i inventory site.yml", "ansible-playbook -i inventory validate.yml os.yml"]
)
def test_readme_tells_how_to_run_the_project_by_hand(files, command):
    assert command in text(files, "README.md")


def test_site_yml_imports_validate_then_every_stage_in_order(files):
    imports = [play["ansible.builtin.import_playbook"] for play in load(files, "site.yml")]
    assert imports == ["validate.yml"] + [stage.playbook for stage in STAGES if stage.playbook]


@pytest.mark.parametrize("playbook", ["validate.yml"] + [stage.playbook for stage in STAGES if stage.playbook])
def test_playbooks_use_only_roles_the_project_has(files, playbook):
    roles = {entry["role"] for play in load(files, playbook) for entry in play["roles"]}
    assert {role for role in roles if not role.startswith("rackform.site.")} == set()
    assert {role for role in roles if f"{ROLES_IN_PROJECT}{short_name(role)}/tasks/main.yml" not in files} == set()


def test_only_the_fabric_stage_targets_onyx_switches(files):
    targets = {stage.playbook: {play["hosts"] for play in load(files, stage.playbook)} for stage in STAGES if stage.playbook}
    assert [playbook for playbook, hosts in targets.items() if "onyx" in hosts] == ["fabric.yml"]
    assert not any({"switches", "all"} & hosts for hosts in targets.values())


ROLES = ["validate_inventory", "bmc_reachable", "base_os", "switch_baseline", "k8s_prereqs", "verify_baseline"]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("part", ["defaults/main.yml", "tasks/main.yml", "meta/main.yml"])
def test_roles_have_defaults_tasks_and_meta(files, role, part):
    assert f"{ROLES_IN_PROJECT}{role}/{part}" in files


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    defaults = load(files, f"{ROLES_IN_PROJECT}{role}/defaults/main.yml")
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []


# ---------------------------------------------------------------- switch configs


@pytest.mark.parametrize(
    "switch, line",
    [
        ("leaf-1", "router bgp 65101"),
        ("leaf-1", " neighbor swp31 interface peer-group fabric"),
        ("leaf-1", "    alias gpu-1:fab0"),
        ("leaf-1", "    mtu 9216"),
        ("spine-1", " neighbor swp1 interface peer-group fabric"),
        ("spine-1", " neighbor swp2 interface peer-group fabric"),
        ("spine-1", " bgp router-id 10.10.0.203"),
    ],
)
def test_cumulus_config_has(files, switch, line):
    assert line in text(files, f"switch_configs/{switch}.cumulus.conf").splitlines()


def test_leaf_has_no_bgp_neighbor_towards_hosts(files):
    assert " neighbor swp5 interface peer-group fabric" not in text(files, "switch_configs/leaf-1.cumulus.conf")


def test_every_managed_switch_has_a_config(files):
    assert {path for path in files if path.startswith("switch_configs/")} == {
        f"switch_configs/{name}.cumulus.conf" for name in LAB_SWITCHES
    }


@pytest.fixture(scope="module")
def oob_switch_files(lab):
    """The lab with its out-of-band switch managed (Cumulus), cabled to gpu-1's BMC port."""
    site = copy.deepcopy(lab)
    oob = site.switches["oob-1"]
    oob.os, oob.management_address = "cumulus", IPv4Address("10.10.0.250")
    oob.ports = {"swp1": Port("swp1", "fabric", 1)}
    site.cables.append(Cable(Endpoint("gpu-1", "bmc0"), Endpoint("oob-1", "swp1"), site.loc))
    return render_files(site)


def test_non_fabric_switch_is_outside_fabric_switches(oob_switch_files):
    groups = host_groups(load(oob_switch_files, "inventory/hosts.yml")["all"])["oob-1"]
    assert "oob_switch" in groups and "fabric_switches" not in groups


def test_non_fabric_switch_ports_are_described_without_fabric_mtu(oob_switch_files):
    config = text(oob_switch_files, "switch_configs/oob-1.cumulus.conf")
    assert "    alias gpu-1:bmc0" in config.splitlines() and "mtu" not in config


@pytest.fixture(scope="module")
def onyx_files(tmp_path_factory):
    """The lab with leaf-2 running Onyx (its ports renamed Eth1/n)."""
    root = tmp_path_factory.mktemp("onyx-root")
    for folder in ("topologies", "inventories"):
        shutil.copytree(ROOT / folder, root / folder)
    design = root / "topologies" / "sites" / "lab.yaml"
    source = design.read_text()
    source = source.replace("os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102")
    source = source.replace("leaf-2:swp", "leaf-2:Eth1/")
    design.write_text(source)
    return render_files(load_site("lab", root))


@pytest.mark.parametrize(
    "line",
    [
        "hostname leaf-2",
        "dcb priority-flow-control enable force",
        "dcb priority-flow-control priority 3 enable",
        "interface ethernet 1/5 description gpu-1:fab1",
        "interface ethernet 1/5 mtu 9216 force",
        "interface ethernet 1/5 dcb priority-flow-control mode on force",
        "interface ethernet 1/5 qos trust L3",
        "interface ethernet 1/5 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
        "interface ethernet 1/31 pfc-wd",
        "configuration write",
    ],
)
def test_onyx_config_has(onyx_files, line):
    assert line in text(onyx_files, "switch_configs/leaf-2.onyx.conf").splitlines()


def test_onyx_switch_is_in_the_onyx_group_only(onyx_files):
    groups = host_groups(load(onyx_files, "inventory/hosts.yml")["all"])["leaf-2"]
    assert "onyx" in groups and "cumulus" not in groups


def test_onyx_switch_is_reached_from_the_controller(onyx_files):
    """rackform's Onyx modules run on the controller and log in with netmiko: the inventory
    names that, not a connection plugin of a collection nobody installs (mellanox.onyx)."""
    connection = load(onyx_files, "inventory/group_vars/onyx/connection.yml")
    assert connection["ansible_connection"] == "ansible.builtin.local"
    assert connection["ansible_python_interpreter"] == "{{ ansible_playbook_python }}"


def test_inventory_names_no_onyx_collection(onyx_files):
    inventory = {path: content for path, content in onyx_files.items() if path.startswith("inventory/")}
    named = [path for path, content in inventory.items()
             if "mellanox.onyx" in str(content) or "network_cli" in str(content) or "ansible_network_os" in str(content)]
    assert named == []


# ---------------------------------------------------------------- stage digests


@pytest.mark.parametrize("stage", ANSIBLE_STAGES)
def test_stage_digest_is_stable(files, lab, stage):
    assert stage_digest(render_files(lab), stage) == stage_digest(files, stage)


def _change_switch_mtu(site):
    site.fabric = site.fabric.model_copy(update={"switch": site.fabric.switch.model_copy(update={"mtu": 9100})})


def _change_leaf_asn(site):
    site.switches["leaf-1"].asn = 65199


def _change_gpu_serial(site):
    site.hosts["gpu-1"].serial = "NEW-SERIAL"


def _change_storage_serial(site):
    site.hosts["stor-1"].serial = "NEW-SERIAL"


def _change_kubernetes_version(site):
    assert site.kubernetes.version != "1.36.3"
    site.kubernetes = site.kubernetes.model_copy(update={"version": "1.36.3"})


def _change_ntp_servers(site):
    site.group_vars = site.group_vars.model_copy(update={"ntp_servers": ["10.10.0.2"]})


@pytest.mark.parametrize(
    "change, stages",
    [
        (_change_switch_mtu, {"fabric"}),
        (_change_leaf_asn, {"fabric"}),
        # a stage counts the variables its roles read, not whole variable files: a serial is
        # read by the BMC roles only, the Kubernetes version by the kubernetes roles and the
        # site mirror's (os stage: it serves that release's bundle) only
        (_change_gpu_serial, {"provision"}),
        (_change_storage_serial, {"provision"}),
        (_change_kubernetes_version, {"os", "kubernetes"}),
        (_change_ntp_servers, {"provision", "os"}),
    ],
    ids=lambda value: value.__name__.removeprefix("_change_") if callable(value) else None,
)
def test_stage_digest_changes_only_for_stages_that_read_the_change(lab, files, change, stages):
    site = copy.deepcopy(lab)
    change(site)
    changed = render_files(site)
    assert {stage for stage in ANSIBLE_STAGES if stage_digest(changed, stage) != stage_digest(files, stage)} == stages


def test_a_variable_no_role_reads_changes_no_stage(files):
    path = "inventory/host_vars/gpu-1.yml"
    edited = {**files, path: files[path] + b"rack_label: aisle 3, shelf 2\n"}
    assert [stage for stage in ANSIBLE_STAGES if stage_digest(edited, stage) != stage_digest(files, stage)] == []


def test_a_variable_named_inside_a_read_value_counts(files):
    """`x: "{{ y }}"` in a file a stage reads makes y read too."""
    path = "inventory/group_vars/all/site.yml"
    with_ref = {**files, path: files[path] + b'timezone_label: "{{ helper_value }}"\nhelper_value: a\n'}
    changed = {**files, path: files[path] + b'timezone_label: "{{ helper_value }}"\nhelper_value: b\n'}
    assert stage_digest(with_ref, "os") == stage_digest(changed, "os")  # timezone_label read by no role
    os_tasks = f"{ROLES_IN_PROJECT}base_os/tasks/main.yml"
    reading = {name: {**files_, os_tasks: files_[os_tasks] + b"\n# reads timezone_label\n"}
               for name, files_ in (("a", with_ref), ("b", changed))}
    assert stage_digest(reading["a"], "os") != stage_digest(reading["b"], "os")


def test_stage_digest_follows_role_changes(files):
    edited = {**files, f"{ROLES_IN_PROJECT}base_os/tasks/main.yml": files[f"{ROLES_IN_PROJECT}base_os/tasks/main.yml"] + b"\n"}
    assert [stage for stage in ANSIBLE_STAGES if stage_digest(edited, stage) != stage_digest(files, stage)] == ["os"]


def test_stage_digest_refuses_a_stage_it_does_not_know(files):
    # platform has no playbook but its own files (tests/unit/test_platform_render.py).
    with pytest.raises(ValueError, match="nosuchstage"):
        stage_digest(files, "nosuchstage")
