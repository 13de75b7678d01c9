"""The kubernetes stage against a live lab: its own small site (`k8stest`: one HCI
control-plane host and one DGX GPU node, 10.67.x only), brought up, rendered, then
validate.yml and kubernetes.yml run with rackform.run.ansible.run_playbook.

What this machine can prove: containerd from Debian enabled and answering `ctr
version` with systemd cgroups, the nvidia runtime entry on the GPU node only, a second
run changing nothing, the kubeadm files written and valid, and the kubeadm step
stopping visibly (no Kubernetes packages can be had here) with the stop recorded as
a local fact. The lab always goes down again.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rackform.k8s.kubeadm import ClusterConfiguration, validate_documents
from rackform.lab import lab, state
from rackform.model.loader import load_site
from rackform.pipeline import build_dir
from rackform.render.project import render_project
from rackform.run.ansible import RunResult, run_playbook
from labenv import skip_reason
from sitebuilder import ROCE_FABRIC, build_site, group_vars, networks, one_rack_site

pytestmark = pytest.mark.lab

SITE = "k8stest"
CONTROL_PLANE, GPU_NODE = "cp-1", "gpu-1"
CONFIG = "/etc/containerd/config.toml"
FACT = "/etc/ansible/facts.d/rackform_kubernetes.fact"

SITE_YAML = one_rack_site(SITE, "Kubernetes stage tests - one control-plane host and one GPU node", """\
- {name: hci-1, block: hci, position_u: 1, hosts: [cp-1]}
- {name: gpu-1, block: dgx-h100, position_u: 7}
""", networks("10.67.0.0/24", "10.67.1.0/24", "10.67.128.0/17") + ROCE_FABRIC + """\
cabling: []
kubernetes:
  version: "1.31.4"
  control_plane: [cp-1]
  api_vip: 10.67.0.5
  pod_prefix: 10.67.64.0/18
  service_prefix: 10.67.32.0/20
  cni: calico
""")

HOST_VARS = """\
management_address: 10.67.0.{n}
management_mac: "02:43:00:00:00:{n:02x}"
bmc_address: 10.67.1.{n}
bmc_mac: "02:43:01:00:00:{n:02x}"
serial: K8STEST-{n}
"""


def write_site(root: Path) -> Path:
    """A repo root holding the real catalog and the `k8stest` site with its inventory."""
    host_vars = {CONTROL_PLANE: HOST_VARS.format(n=11), GPU_NODE: HOST_VARS.format(n=21)}
    return build_site(root, SITE, SITE_YAML, host_vars, group_vars(SITE, "10.67.0.1", lab_key=True))


class Runs:
    def __init__(self, project: Path, first: RunResult, second: RunResult) -> None:
        self.project, self.first, self.second = project, first, second


@pytest.fixture(scope="module")
def runs(tmp_path_factory, pytestconfig):
    """`k8stest` up, validate.yml then kubernetes.yml twice; down afterwards, always."""
    reason = skip_reason(pytestconfig)
    if reason:
        pytest.skip(reason)
    root = write_site(tmp_path_factory.mktemp("k8stest-root"))
    try:
        status = lab.up(SITE, root, progress=lambda line: None)
        assert status.up, "\n".join(status.lines())
        project = build_dir(root, SITE)
        render_project(load_site(SITE, root), project)
        validate = run_playbook(project, "validate.yml")
        assert validate.ok, validate.summary()
        first = run_playbook(project, "kubernetes.yml")
        second = run_playbook(project, "kubernetes.yml")
        yield Runs(project, first, second)
    finally:
        lab.down(SITE, progress=lambda line: None)


def on_node(host: str, command: str) -> str:
    lab_state = state.require(SITE)
    return lab.ssh(lab_state, lab_state.node(host), command).stdout


def test_kubernetes_stage_succeeds(runs):
    assert runs.first.ok, runs.first.summary()


def test_second_run_changes_nothing(runs):
    assert (runs.second.ok, runs.second.changed) == (True, 0), runs.second.summary()


@pytest.mark.parametrize("host", [CONTROL_PLANE, GPU_NODE])
def test_containerd_is_enabled_and_active(runs, host):
    assert on_node(host, "systemctl is-enabled containerd; systemctl is-active containerd").split() == [
        "enabled", "active"]


@pytest.mark.parametrize("host", [CONTROL_PLANE, GPU_NODE])
def test_ctr_version_answers(runs, host):
    assert "Server:" in on_node(host, "ctr version")


@pytest.mark.parametrize("host", [CONTROL_PLANE, GPU_NODE])
def test_runc_uses_systemd_cgroups(runs, host):
    config = tomllib.loads(on_node(host, f"cat {CONFIG}"))
    runtimes = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["runc"]["options"]["SystemdCgroup"] is True


@pytest.mark.parametrize("host, expected", [(CONTROL_PLANE, False), (GPU_NODE, True)])
def test_only_the_gpu_node_has_the_nvidia_runtime(runs, host, expected):
    config = tomllib.loads(on_node(host, f"cat {CONFIG}"))
    assert ("nvidia" in config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]) is expected


def test_kubeadm_init_file_on_the_node_is_valid_kubeadm_configuration(runs):
    documents = validate_documents(on_node(CONTROL_PLANE, "cat /etc/kubernetes/rackform/kubeadm-init.yaml"))
    cluster = next(document for document in documents if isinstance(document, ClusterConfiguration))
    assert (cluster.controlPlaneEndpoint, cluster.networking.podSubnet) == ("10.67.0.5:6443", "10.67.64.0/18")


@pytest.mark.parametrize("host", [CONTROL_PLANE, GPU_NODE])
def test_the_stop_is_recorded_as_a_local_fact(runs, host):
    fact = json.loads(on_node(host, f"cat {FACT}"))
    assert (fact["bootstrap"], "kubeadm" in fact["missing"]) == ("stopped", True)


@pytest.mark.parametrize("host", [CONTROL_PLANE, GPU_NODE])
def test_the_stop_is_reported_for_each_host(runs, host):
    messages = stop_messages(runs.first)
    assert any(message.startswith(f"STOPPED: kubeadm, kubelet, kubectl not installed on {host}")
               for message in messages), messages


def stop_messages(result: RunResult) -> list[str]:
    """The debug messages of the run's "Report that the Kubernetes bootstrap stopped" tasks."""
    assert result.run_dir is not None
    messages = []
    paths = sorted(Path(result.run_dir).rglob("job_events/*.json"))
    for path in paths:
        data = json.loads(path.read_text()).get("event_data", {})
        if data.get("task") == "Report that the Kubernetes bootstrap stopped" and "res" in data:
            messages.append(data["res"].get("msg", ""))
    return messages
