"""The inventory is a real Ansible inventory: rackform's keys are checked, everything else is kept,
and what cannot be carried is an error at its file:line (rackform.model.inventory, rackform.checks.inventory)."""

from __future__ import annotations

import pytest

from rackform.checks.runner import run_checks
from rackform.model.source import BadInput

HOSTS = "inventories/lab/hosts.yml"
GPU_1 = "inventories/lab/host_vars/gpu-1.yml"
LAB_HOSTS_YML = """\
all:
  hosts:
    mgmt-1:
    mgmt-2:
    mgmt-3:
    stor-1:
    gpu-1:
    gpu-2:
    leaf-1:
    leaf-2:
    spine-1:
"""
"""The lab's hosts, one a line: gpu-1 is on line 7."""


def hosts_yml(extra: str = "", gpu_1: str = "") -> str:
    """The lab's hosts.yml with lines under gpu-1 (line 7) and after the host list (from line 12)."""
    text = LAB_HOSTS_YML.replace("    gpu-1:\n", "    gpu-1:\n" + gpu_1)
    return text + extra


def load_errors(lab_files) -> list[str]:
    with pytest.raises(BadInput) as caught:
        lab_files.load()
    return [str(error) for error in caught.value.errors]


def check_lines(lab_files, name: str) -> list[str]:
    return [str(finding) for finding in run_checks(lab_files.load()) if finding.check == name]


# ---------------------------------------------------------------- host variables


def test_any_host_variable_passes_through(lab_files):
    lab_files.write(GPU_1, lab_files.read(GPU_1) + "ansible_port: 2222\nansible_user: admin\nhttp_proxy: http://proxy:3128\n")

    site = lab_files.load()

    assert site.hosts["gpu-1"].user_vars == {"ansible_port": 2222, "ansible_user": "admin", "http_proxy": "http://proxy:3128"}
    assert check_lines(lab_files, "inventory_variables") == []


def test_inline_host_variables_in_hosts_yml_are_kept(lab_files):
    lab_files.write(HOSTS, hosts_yml(gpu_1="      ansible_port: 2222\n"))

    assert lab_files.load().hosts["gpu-1"].user_vars == {"ansible_port": 2222}


def test_a_key_under_a_host_in_hosts_yml_is_reported_at_its_line(lab_files):
    lab_files.write(HOSTS, hosts_yml(gpu_1="      bmc_adress: 10.10.1.99\n"))

    (error,) = load_errors(lab_files)

    assert error.startswith(f"{HOSTS}:8: bmc_adress: unknown key (did you mean 'bmc_address'?)")


def test_a_bad_owned_value_under_a_host_in_hosts_yml_is_reported_there(lab_files):
    lab_files.write(HOSTS, hosts_yml(gpu_1="      serial: [a, b]\n"))
    lab_files.edit_host_vars("gpu-1", "serial: LAB-GPU-1\n", "")

    (error,) = load_errors(lab_files)

    assert error.startswith(f"{HOSTS}:8: serial:")


def test_near_miss_of_a_host_key_suggests_it(lab_files):
    lab_files.edit_host_vars("gpu-1", "bmc_address:", "bmc_adress:")

    errors = load_errors(lab_files)

    assert f"{GPU_1}:3: bmc_adress: unknown key (did you mean 'bmc_address'?); rackform's host keys: " in errors[0]


def test_a_variable_set_in_hosts_yml_and_host_vars_is_an_error(lab_files):
    lab_files.write(HOSTS, hosts_yml(gpu_1="      http_proxy: a\n"))
    lab_files.write(GPU_1, lab_files.read(GPU_1) + "http_proxy: b\n")

    (error,) = load_errors(lab_files)

    assert error == f"{GPU_1}:9: http_proxy: host variable set twice (first at {HOSTS}:8); keep one"


def test_host_vars_folder_form_is_read(lab_files):
    lab_files.write("inventories/lab/host_vars/gpu-2/proxy.yml", "http_proxy: http://proxy:3128\n")

    assert lab_files.load().hosts["gpu-2"].user_vars == {"http_proxy": "http://proxy:3128"}


def test_site_setting_on_a_host_is_refused(lab_files):
    lab_files.write(GPU_1, lab_files.read(GPU_1) + "ntp_servers: [10.0.0.1]\n")

    (error,) = load_errors(lab_files)

    assert error == f"{GPU_1}:9: ntp_servers: a site-wide setting: rackform reads it from group_vars/all only"


def test_unmanaged_switch_variables_would_be_lost(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="    oob-1:\n      snmp_community: x\n"))
    lab_files.write("inventories/lab/host_vars/oob-1.yml", "management_address: 10.10.0.250\n")

    (error,) = load_errors(lab_files)

    assert error.startswith(f"{HOSTS}:13: oob-1.snmp_community: unmanaged switches stay out of the rendered inventory")


# ---------------------------------------------------------------- MAC addresses


@pytest.mark.parametrize("spelling", ['"02:0A:0A:00:00:0F"', "02-0a-0a-00-00-0f", "020a.0a00.000f", "020A0A00000F"])
def test_mac_spellings_are_accepted_and_normalised(lab_files, spelling):
    lab_files.edit_host_vars("gpu-1", 'management_mac: "02:0a:0a:00:00:0f"', f"management_mac: {spelling}")

    assert lab_files.load().hosts["gpu-1"].management_mac == "02:0a:0a:00:00:0f"


def test_fabric_port_mac_is_normalised(lab_files):
    lab_files.edit_host_vars("gpu-1", '{mac: "02:0a:14:01:00:0f"', '{mac: "02-0A-14-01-00-0F"')

    assert lab_files.load().hosts["gpu-1"].fabric_macs["fab0"] == "02:0a:14:01:00:0f"


def test_unquoted_mac_read_as_a_number_gets_a_hint_to_quote_it(lab_files):
    lab_files.edit_host_vars("gpu-1", 'management_mac: "02:0a:0a:00:00:0f"', "management_mac: 52:54:00:12:34:56")

    (error,) = load_errors(lab_files)

    assert error == (
        f'{GPU_1}:2: management_mac: unquoted MAC read by YAML as a number: quote it, e.g. "52:54:00:12:34:56" '
        "(found 41135085296)"
    )


def test_malformed_mac_lists_the_accepted_spellings(lab_files):
    lab_files.edit_host_vars("gpu-1", 'bmc_mac: "02:0a:0a:01:00:0f"', 'bmc_mac: "02:0a:0a:01:00"')

    (error,) = load_errors(lab_files)

    assert error.startswith(f"{GPU_1}:4: bmc_mac: not a MAC address (write aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff")


# ---------------------------------------------------------------- group variables and groups


def test_group_vars_file_and_folder_forms_pass_through(lab_files):
    lab_files.write("inventories/lab/group_vars/gpu.yml", 'cuda_version: "12.4"\n')
    lab_files.write("inventories/lab/group_vars/gpu/nccl.yml", "nccl_debug: INFO\nratio: 0.5\n")

    gpu = lab_files.load().user_inventory.group_vars["gpu"]

    assert gpu.values == {"cuda_version": "12.4", "nccl_debug": "INFO", "ratio": 0.5}
    assert str(gpu.locs["nccl_debug"]) == "inventories/lab/group_vars/gpu/nccl.yml:1"
    assert gpu.sources == ["inventories/lab/group_vars/gpu.yml", "inventories/lab/group_vars/gpu/nccl.yml"]


def test_all_group_keeps_site_settings_and_passes_the_rest(lab_files):
    lab_files.write("inventories/lab/group_vars/all.yml", lab_files.read("inventories/lab/group_vars/all.yml") + "http_proxy: p\n")

    site = lab_files.load()

    assert site.group_vars.domain == "lab.rackform.test"
    assert site.user_inventory.group_vars["all"].values == {
        "ansible_host_key_checking": False, "kubeadm_kube_proxy_conntrack_max_per_core": 0, "http_proxy": "p"}


def test_site_setting_typo_in_group_vars_all_suggests_the_key(lab_files):
    lab_files.edit("inventories/lab/group_vars/all.yml", "ntp_servers:", "ntp_server:")

    (error,) = load_errors(lab_files)

    assert error == "inventories/lab/group_vars/all.yml:3: ntp_server: unknown key (did you mean 'ntp_servers'?)"


def test_group_variable_set_in_two_files_is_an_error(lab_files):
    lab_files.write("inventories/lab/group_vars/gpu.yml", "a: 1\n")
    lab_files.write("inventories/lab/group_vars/gpu/more.yml", "b: 2\na: 3\n")

    (error,) = load_errors(lab_files)

    assert error == (
        "inventories/lab/group_vars/gpu/more.yml:2: a: group 'gpu' variable set twice "
        "(first at inventories/lab/group_vars/gpu.yml:1); keep one"
    )


def test_host_fact_in_group_vars_is_refused(lab_files):
    lab_files.write("inventories/lab/group_vars/gpu.yml", "x: 1\nbmc_mac: aa:bb:cc:dd:ee:ff\n")

    (error,) = load_errors(lab_files)

    assert error.startswith("inventories/lab/group_vars/gpu.yml:2: bmc_mac: a per-host fact: set it in host_vars/<host>.yml")


def test_non_variables_file_in_a_group_folder_is_refused(lab_files):
    lab_files.write("inventories/lab/group_vars/gpu/notes.txt", "hello\n")

    (error,) = load_errors(lab_files)

    assert error.startswith("inventories/lab/group_vars/gpu/notes.txt:0: not a variables file")


def test_user_groups_with_children_and_vars_are_kept(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="  children:\n    canary:\n      hosts:\n        gpu-1:\n      vars:\n        wave: 1\n      children:\n        storage:\n"))

    user = lab_files.load().user_inventory

    assert set(user.groups["canary"].hosts) == {"gpu-1"} and set(user.groups["canary"].children) == {"storage"}
    assert user.group_vars["canary"].values == {"wave": 1}
    assert str(user.group_vars["canary"].locs["wave"]) == f"{HOSTS}:17"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("  childrens:\n    canary:\n", f"{HOSTS}:12: all.childrens: unknown key (did you mean 'children'?); expected hosts, children or vars"),
        ("  children:\n    canary-1:\n", f"{HOSTS}:13: all.children.canary-1: not a valid Ansible group name"),
        ("  children:\n    all:\n", f"{HOSTS}:13: all.children.all: 'all' is Ansible's own group and cannot be declared"),
        ("  children:\n    a:\n      children:\n        b:\n          children:\n            a:\n",
         f"{HOSTS}:17: b.children.a: group cycle: 'a' is already an ancestor of 'b'"),
        ("  children:\n    canary:\n      hosts: [gpu-1]\n", f"{HOSTS}:14: all.children.canary.hosts: expected a mapping, found a LineList"),
    ],
    ids=["typo", "bad-name", "reserved", "cycle", "hosts-as-list"],
)
def test_malformed_groups_are_refused_at_their_line(lab_files, extra, expected):
    lab_files.write(HOSTS, hosts_yml(extra=extra))

    errors = load_errors(lab_files)

    assert any(error.startswith(expected) for error in errors), errors


# ---------------------------------------------------------------- checks against the design


def test_group_named_like_a_generated_one_with_other_members_is_refused(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="  children:\n    gpu:\n      hosts:\n        gpu-1:\n"))

    (line,) = check_lines(lab_files, "inventory_groups")

    assert line.startswith(
        f"{HOSTS}:13: error: gpu: rackform generates group 'gpu' from the design with hosts gpu-1, gpu-2; "
        "hosts.yml gives it gpu-1: list the same hosts or none"
    )


def test_generated_group_with_its_own_members_or_only_vars_is_accepted(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="  children:\n    gpu:\n      hosts:\n        gpu-1:\n        gpu-2:\n      vars:\n        x: 1\n"))

    assert check_lines(lab_files, "inventory_groups") == []
    assert lab_files.load().user_inventory.group_vars["gpu"].values == {"x": 1}


def test_generated_group_cannot_take_children(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="  children:\n    gpu:\n      children:\n        canary:\n"))

    (line,) = check_lines(lab_files, "inventory_groups")

    assert line.startswith(f"{HOSTS}:15: error: gpu.children: rackform generates group 'gpu' from the design")


def test_group_vars_for_a_group_that_does_not_exist_is_refused(lab_files):
    lab_files.write("inventories/lab/group_vars/gpus.yml", "x: 1\n")

    (line,) = check_lines(lab_files, "inventory_group_names")

    assert line == (
        "inventories/lab/group_vars/gpus.yml:1: error: gpus: variables for group 'gpus', which is neither generated "
        "from the design nor declared in hosts.yml (did you mean 'gpu'?) [inventory_group_names]"
    )


def test_group_vars_for_a_generated_rack_or_block_group_is_accepted(lab_files):
    lab_files.write("inventories/lab/group_vars/rack_r1.yml", "x: 1\n")
    lab_files.write("inventories/lab/group_vars/block_dgx_h100.yml", "y: 1\n")

    assert check_lines(lab_files, "inventory_group_names") == []


def test_empty_group_that_looks_like_a_typo_is_a_warning(lab_files):
    lab_files.write(HOSTS, hosts_yml(extra="  children:\n    canary:\n      children:\n        gpus:\n"))

    (line,) = check_lines(lab_files, "inventory_group_names")

    assert line == f"{HOSTS}:15: warning: gpus: empty group (did you mean 'gpu'?) [inventory_group_names]"


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        (GPU_1, None, f"{GPU_1}:9: error: gpu-1.fabric_host_mtu: rackform writes 'fabric_host_mtu' itself (from fabric.host in the site design, or a device's roce_overrides)"),
        (GPU_1, None, f"{GPU_1}:9: error: gpu-1.ansible_host: rackform writes 'ansible_host' itself (from management_address in host_vars)"),
        ("inventories/lab/group_vars/gpu.yml", "rack_name: r9\n", "inventories/lab/group_vars/gpu.yml:1: error: gpu.rack_name: rackform writes 'rack_name' itself"),
        ("inventories/lab/group_vars/all.yml", "kube_version: 1.30.0\n", "inventories/lab/group_vars/all.yml:14: error: all.kube_version: rackform writes 'kube_version' itself (from kubernetes in the site design)"),
        (GPU_1, "storage_mounts: []\n", f"{GPU_1}:9: error: gpu-1.storage_mounts: rackform writes 'storage_mounts' itself (from the site design's data_sets"),
        ("inventories/lab/group_vars/all.yml", "storage_exports: []\n", "inventories/lab/group_vars/all.yml:14: error: all.storage_exports: rackform writes 'storage_exports' itself (from the site design's data_sets"),
    ],
    ids=["host-fabric-mtu", "ansible-host", "group-rack-name", "all-kube-version", "host-storage-mounts",
         "all-storage-exports"],
)
def test_variable_rackform_writes_itself_is_refused(lab_files, path, text, expected):
    key = expected.split("rackform writes '")[1].split("'")[0]
    addition = text or f"{key}: 1500\n"
    lab_files.write(path, (lab_files.read(path) if path != "inventories/lab/group_vars/gpu.yml" else "") + addition)

    lines = check_lines(lab_files, "inventory_variables")

    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_connection_defaults_may_be_overridden(lab_files):
    lab_files.write("inventories/lab/group_vars/cumulus.yml", "ansible_connection: paramiko\n")
    lab_files.write(GPU_1, lab_files.read(GPU_1) + "ansible_become: true\n")

    assert check_lines(lab_files, "inventory_variables") == []


def test_host_vars_of_an_unlisted_host_are_refused(lab_files):
    lab_files.write("inventories/lab/host_vars/gpu-9.yml", "management_address: 10.10.0.99\n")

    (line,) = check_lines(lab_files, "unlisted_host_vars")

    assert line.startswith("inventories/lab/host_vars/gpu-9.yml:1: error: gpu-9: variables for a host that")


def test_duplicate_serials_are_refused(lab_files):
    lab_files.edit_host_vars("gpu-2", "serial: LAB-GPU-2", "serial: LAB-GPU-1")

    (line,) = check_lines(lab_files, "unique_serials")

    assert line == (
        "inventories/lab/host_vars/gpu-2.yml:5: error: gpu-2.serial: LAB-GPU-1 is already the serial of gpu-1 "
        f"({GPU_1}:5) [unique_serials]"
    )


def test_cabled_fabric_port_without_address_is_refused(lab_files):
    lab_files.edit_host_vars("gpu-1", '{mac: "02:0a:14:02:00:0f", address: 10.20.2.15/24}', '{mac: "02:0a:14:02:00:0f"}')

    (line,) = check_lines(lab_files, "cabled_fabric_ports_addressed")

    assert line.startswith(f"{GPU_1}:8: error: gpu-1.fabric_ports.fab1: cabled to leaf-2:swp5 (topologies/sites/lab.yaml:")
    assert line.endswith("but has no address; give fabric_ports.fab1.address [cabled_fabric_ports_addressed]")


def test_shipped_sites_pass_the_inventory_checks(lab_site):
    inventory_checks = {"inventory_groups", "inventory_group_names", "inventory_variables", "unlisted_host_vars",
                        "unique_serials", "cabled_fabric_ports_addressed"}
    assert [str(f) for f in run_checks(lab_site) if f.check in inventory_checks] == []
