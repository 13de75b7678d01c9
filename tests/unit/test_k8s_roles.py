"""The kubernetes stage's playbooks and roles as rendered into a project: which play
runs which role where, the upgrade and scale playbooks, the containerd configuration
and the visible stop where kubeadm cannot be installed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import jinja2
import pytest
import yaml

from hang_limit import SUBPROCESS_HANG_S
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.collection import short_name
from collection_support import ROLES_IN_PROJECT

ROOT = Path(__file__).resolve().parents[2]
K8S_ROLES = ("k8s_prereqs", "containerd", "kubeadm")
RUNC = 'plugins."io.containerd.grpc.v1.cri"'


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def plays(files, playbook: str) -> list[dict]:
    return yaml.safe_load(files[playbook])


def tasks(files, role: str, name: str = "main.yml") -> list[dict]:
    return yaml.safe_load(files[f"{ROLES_IN_PROJECT}{role}/tasks/{name}"])


def flat_tasks(files, role: str, name: str) -> list[dict]:
    """The tasks in the order they run, a block's own tasks then its `always` in its place."""
    flat = []
    for task in tasks(files, role, name):
        flat += [*task.get("block", []), *task.get("always", [])] if "block" in task else [task]
    return flat


def test_kubernetes_stage_refuses_first_then_prepares_every_node_checks_gpus_then_control_plane_then_workers(files):
    assert [(play["hosts"], [short_name(role["role"]) for role in play["roles"]]) for play in plays(files, "kubernetes.yml")] == [
        ("k8s_cluster", ["kubeadm"]), ("k8s_cluster", ["k8s_prereqs", "containerd"]), ("gpu", ["gpu_node"]),
        ("kube_control_plane", ["kubeadm", "etcd_backup"]), ("kube_node", ["kubeadm"]), ("kube_control_plane[0]", ["kubeadm"])]


def test_kubeadm_plays_say_which_part_of_the_role_they_run(files):
    kubernetes = plays(files, "kubernetes.yml")
    assert [play["roles"][0].get("kubeadm_node_role") for play in kubernetes[:1] + kubernetes[3:]] == [
        "preflight", "control_plane", "worker", "ready"]


@pytest.mark.parametrize(("key", "value"), [
    ("gpu_node_expected_count", 8), ("gpu_node_expected_model", "H100"), ("gpu_node_nvswitches", 4)])
def test_gpu_host_vars_come_from_its_block(files, key, value):
    assert yaml.safe_load(files["inventory/host_vars/gpu-1.yml"])[key] == value


def test_a_host_without_gpus_gets_no_gpu_vars(files):
    assert not any(key.startswith("gpu_node_") for key in yaml.safe_load(files["inventory/host_vars/mgmt-1.yml"]))


def test_gpu_checks_are_not_required_by_default_so_the_lab_skips_them_visibly(files):
    assert yaml.safe_load(files[f"{ROLES_IN_PROJECT}gpu_node/defaults/main.yml"])["gpu_node_require_gpus"] is False


@pytest.mark.parametrize("playbook", ["upgrade-cluster.yml", "scale.yml"])
def test_maintenance_playbooks_are_emitted(files, playbook):
    assert isinstance(plays(files, playbook), list)


def upgrade_play(files, hosts: str) -> dict:
    return next(play for play in plays(files, "upgrade-cluster.yml") if play["hosts"] == hosts)


def ansible_value(template: str, **values):
    """A `when:` expression (or, given `{{ }}`, a templated string) evaluated as Ansible would."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["bool"] = lambda value: value if isinstance(value, bool) else str(value).lower() in (
        "yes", "true", "1", "on")
    if "{{" in template:
        return environment.from_string(template).render(values)
    return environment.compile_expression(template)(**values)


def test_upgrade_has_the_site_mirror_serve_the_target_release_then_the_control_plane_then_workers(files):
    assert [play["hosts"] for play in plays(files, "upgrade-cluster.yml")] == ["servers", "kube_control_plane", "kube_node"]


def test_the_upgrade_s_mirror_play_is_the_os_stage_s_on_the_mirror_host_only(files):
    upgrade, os_stage = upgrade_play(files, "servers"), plays(files, "os.yml")[0]
    [leave] = upgrade["pre_tasks"]
    assert (leave["ansible.builtin.meta"], leave["when"]) == ("end_host", "inventory_hostname != site_mirror_host | default('')")
    assert [short_name(role["role"]) for role in upgrade["roles"]] == ["site_mirror"]
    assert (leave["when"], upgrade["roles"][0]["role"]) == (os_stage["pre_tasks"][0]["when"], os_stage["roles"][0]["role"])


def test_upgrade_takes_control_plane_nodes_one_at_a_time(files):
    first = upgrade_play(files, "kube_control_plane")
    assert (first["serial"], first["any_errors_fatal"]) == (1, True)


def test_upgrade_takes_workers_in_batches_and_stops_at_a_failure(files):
    workers = upgrade_play(files, "kube_node")
    assert ("kubeadm_upgrade_worker_batch" in workers["serial"], workers["max_fail_percentage"]) == (True, 0)


def test_the_node_bootstrap_and_the_upgrade_share_the_cgroup_check(files):
    for name in ("node.yml", "upgrade.yml"):
        assert tasks(files, "kubeadm", name)[0]["ansible.builtin.import_tasks"] == "cgroup.yml", name


def upgrade_node_include(files) -> dict:
    return next(task for task in tasks(files, "kubeadm", "upgrade.yml") if "ansible.builtin.include_tasks" in task)


def test_upgrade_reads_the_kubelet_s_version_before_it_decides(files):
    names = [task["name"] for task in tasks(files, "kubeadm", "upgrade.yml")]
    read = next(task for task in tasks(files, "kubeadm", "upgrade.yml") if task["name"] == "Read the kubelet's version")
    assert (read["ansible.builtin.command"]["cmd"], read["changed_when"], read["register"]) == (
        "kubelet --version", False, "kubeadm_kubelet_version")
    assert names.index("Read the kubelet's version") < names.index(upgrade_node_include(files)["name"])
    assert upgrade_node_include(files)["ansible.builtin.include_tasks"] == "upgrade_node.yml"


@pytest.mark.parametrize(("kubelet", "upgraded"), [
    ("Kubernetes v1.36.1", True), ("Kubernetes v1.36.3", False), ("Kubernetes v1.35.2", True)])
def test_only_a_node_not_at_the_target_is_upgraded(files, kubelet, upgraded):
    """A second run of the playbook leaves the nodes already at kube_version alone."""
    when = upgrade_node_include(files)["when"]
    assert ansible_value(when, kubeadm_kubelet_version={"stdout": kubelet}, kube_version="1.36.3") is upgraded


def test_upgrade_drains_workers_before_and_uncordons_after(files):
    names = [task["name"] for task in flat_tasks(files, "kubeadm", "upgrade_node.yml")]
    assert names.index("Cordon and drain this node") < names.index("Upgrade this node's kubeadm-managed configuration")
    assert names[-1] == "Uncordon this node"


def test_every_held_package_is_released_before_kubeadm_moves_and_held_again_after(files):
    steps = flat_tasks(files, "kubeadm", "upgrade_node.yml")
    names = [task["name"] for task in steps]
    unhold = next(task for task in steps if task["name"].startswith("Unhold"))
    hold = next(task for task in steps if task["name"].startswith("Hold"))
    assert (unhold["loop"], unhold["ansible.builtin.dpkg_selections"]["selection"]) == ("{{ kubeadm_packages }}", "install")
    assert (hold["loop"], hold["ansible.builtin.dpkg_selections"]["selection"]) == ("{{ kubeadm_packages }}", "hold")
    assert names.index(unhold["name"]) < names.index("Install kubeadm at the target version") < names.index(hold["name"])


PATCHES = "/etc/kubernetes/rackform/patches"


@pytest.mark.parametrize(("cgroup_v1", "command"), [
    (False, ["kubeadm", "upgrade", "apply", "--yes", "v1.36.3", "--patches", PATCHES]),
    (True, ["kubeadm", "upgrade", "apply", "--yes", "v1.36.3", "--patches", PATCHES,
            "--ignore-preflight-errors=SystemVerification"]),
])
def test_upgrade_apply_ignores_the_cgroup_v1_preflight_only_on_cgroup_v1(files, cgroup_v1, command):
    steps = {task["name"]: task for task in flat_tasks(files, "kubeadm", "upgrade_node.yml")}
    apply = steps["Upgrade the cluster from the first control-plane node"]
    cmd = ansible_value(apply["ansible.builtin.command"]["cmd"], kube_version="1.36.3", kubeadm_cgroup_v1=cgroup_v1,
                        kubeadm_patches_dir=PATCHES)
    assert cmd.split() == command
    assert apply["when"] == "kubeadm_node_role == 'control_plane' and inventory_hostname == kubeadm_init_host"
    node = steps["Upgrade this node's kubeadm-managed configuration"]
    cmd = ansible_value(node["ansible.builtin.command"]["cmd"], kubeadm_cgroup_v1=cgroup_v1, kubeadm_patches_dir=PATCHES,
                        kubeadm_node_role="control_plane")
    assert cmd.split() == ["kubeadm", "upgrade", "node", *command[5:]]
    cmd = ansible_value(node["ansible.builtin.command"]["cmd"], kubeadm_cgroup_v1=cgroup_v1, kubeadm_patches_dir=PATCHES,
                        kubeadm_node_role="worker")
    assert cmd.split() == ["kubeadm", "upgrade", "node", *command[7:]], "a worker has no API server to patch"


def test_a_control_plane_node_hands_the_vip_away_before_its_api_restarts_and_always_takes_part_again(files):
    steps = tasks(files, "kubeadm", "upgrade_node.yml")
    names = [task["name"] for task in steps]
    hand = steps[names.index("Hand the API's virtual IP to another control-plane node")]
    block = steps[names.index("Upgrade and restart this node's Kubernetes")]
    assert names.index(hand["name"]) < names.index(block["name"])
    assert hand["ansible.builtin.systemd_service"] == {"name": "keepalived", "state": "stopped"}
    (again,) = block["always"]
    assert again["ansible.builtin.systemd_service"] == {"name": "keepalived", "state": "started"}
    assert hand["when"] == again["when"] == "kubeadm_node_role == 'control_plane' and kubeadm_vip_enabled | bool"
    inner = [task["name"] for task in block["block"]]
    assert inner[-1] == "Wait for this node's API to answer again", "the VIP comes back only to a node that answers"


def test_scale_configures_no_control_plane_node(files):
    configuring = [play for play in plays(files, "scale.yml") if play.get("roles")]
    assert [play["hosts"] for play in configuring] == [
        "k8s_cluster:!kube_control_plane", "k8s_cluster:!kube_control_plane", "kube_node"]
    assert configuring[0]["roles"][0]["kubeadm_node_role"] == "preflight", "new nodes on cgroup v1 refused first"


def test_scale_only_reads_the_control_plane(files):
    first = plays(files, "scale.yml")[0]
    assert (first["hosts"], [next(iter(set(task) - {"name"})) for task in first["tasks"]]) == (
        "kube_control_plane", ["ansible.builtin.debug"])


@pytest.mark.parametrize("role", K8S_ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}{role}/defaults/main.yml"])
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []


@pytest.mark.parametrize("role", K8S_ROLES)
def test_every_task_is_named(files, role):
    unnamed = []
    for path in (p for p in files if p.startswith(f"{ROLES_IN_PROJECT}{role}/tasks/")):
        unnamed += [f"{path}: {task}" for task in yaml.safe_load(files[path]) if "name" not in task]
    assert unnamed == []


def test_containerd_packages_are_only_ensured_present(files):
    apt = [task["ansible.builtin.apt"] for task in tasks(files, "containerd") if "ansible.builtin.apt" in task]
    assert [module["state"] for module in apt] == ["present"]


def test_containerd_restarts_only_when_its_configuration_changes(files):
    config = next(task for task in tasks(files, "containerd") if "ansible.builtin.template" in task)
    handlers = yaml.safe_load(files[f"{ROLES_IN_PROJECT}containerd/handlers/main.yml"])
    assert (config["notify"], handlers[0]["ansible.builtin.systemd_service"]["state"]) == (
        "Restart containerd", "restarted")


def containerd_config(files, gpu: bool) -> dict:
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}containerd/defaults/main.yml"])
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["bool"] = bool
    text = environment.from_string(files[f"{ROLES_IN_PROJECT}containerd/templates/config.toml.j2"].decode()).render(
        {**defaults, "containerd_nvidia_runtime": gpu, "containerd_mirror_registry": "", "containerd_sandbox_image": ""})
    return tomllib.loads(text)


def runtimes(config: dict) -> dict:
    return config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]


@pytest.mark.parametrize("gpu", [False, True])
def test_containerd_runc_uses_systemd_cgroups(files, gpu):
    assert runtimes(containerd_config(files, gpu))["runc"]["options"]["SystemdCgroup"] is True


def test_gpu_nodes_get_the_nvidia_runtime(files):
    nvidia = runtimes(containerd_config(files, True))["nvidia"]
    assert (nvidia["runtime_type"], nvidia["options"]["BinaryName"], nvidia["options"]["SystemdCgroup"]) == (
        "io.containerd.runc.v2", "/usr/bin/nvidia-container-runtime", True)


def test_other_nodes_have_no_nvidia_runtime(files):
    assert set(runtimes(containerd_config(files, False))) == {"runc"}


def test_runc_stays_the_default_runtime_on_gpu_nodes(files):
    assert containerd_config(files, True)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "default_runtime_name"] == "runc"


def test_gpu_group_decides_the_nvidia_runtime(files):
    assert "'gpu' in group_names" in yaml.safe_load(files[f"{ROLES_IN_PROJECT}containerd/defaults/main.yml"])[
        "containerd_nvidia_runtime"]


def test_missing_kubeadm_stops_visibly_records_a_fact_and_ends_the_host(files):
    stop = tasks(files, "kubeadm", "stop.yml")
    modules = [next(iter(set(task) - {"name", "vars"})) for task in stop]
    assert modules == ["ansible.builtin.file", "ansible.builtin.copy", "ansible.builtin.debug", "ansible.builtin.meta"]
    assert (stop[2]["ansible.builtin.debug"]["msg"].startswith("STOPPED:"), stop[3]["ansible.builtin.meta"]) == (
        True, "end_host")


def test_the_stop_happens_only_when_kubeadm_is_missing_and_not_installable(files):
    include = next(task for task in tasks(files, "kubeadm", "binaries.yml") if "ansible.builtin.include_tasks" in task)
    assert include["when"] == "kubeadm_missing | length > 0 and not kubeadm_installable | bool"


def test_kubernetes_packages_are_pinned_to_the_design_version(files):
    install = next(task for task in tasks(files, "kubeadm", "binaries.yml")
                   if task["name"].startswith("Install the Kubernetes packages"))
    assert "kube_version" in install["ansible.builtin.apt"]["name"]


def test_control_plane_members_join_one_at_a_time(files):
    join = next(task for task in flat_tasks(files, "kubeadm", "control_plane.yml")
                if task["name"] == "Join the other control-plane nodes one at a time")
    assert join["throttle"] == 1


@pytest.mark.slow
def test_maintenance_playbooks_pass_syntax_check(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(["ansible-playbook", "--syntax-check", "upgrade-cluster.yml", "scale.yml"], cwd=project,
                            env=environment, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr
