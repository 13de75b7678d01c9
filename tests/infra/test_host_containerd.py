"""Stage kubernetes (role containerd) on the cluster nodes: containerd enabled,
running and answering, runc with systemd cgroups, and the nvidia runtime entry on GPU
nodes only."""

from __future__ import annotations

import tomllib

import pytest

pytestmark = [pytest.mark.stage("kubernetes"), pytest.mark.machines("k8s_cluster")]

ROLE = "containerd"


@pytest.fixture
def runtimes(host, role_setting) -> dict:
    path = role_setting(ROLE, "containerd_config_file")
    config = host.file(path)
    assert config.exists, f"{path} is missing"
    cri = tomllib.loads(config.content_string).get("plugins", {}).get("io.containerd.grpc.v1.cri", {})
    return cri.get("containerd", {}).get("runtimes", {})


def test_containerd_enabled_and_running(host):
    service = host.service("containerd")
    assert (service.is_enabled, service.is_running) == (True, True), "containerd is not enabled and running"


def test_ctr_answers(host):
    result = host.run("ctr version")
    assert result.rc == 0 and "Server:" in result.stdout, f"ctr version: {result.stderr.strip() or result.stdout}"


def test_runc_uses_systemd_cgroups(runtimes, role_setting):
    want = role_setting(ROLE, "containerd_systemd_cgroup")
    got = runtimes.get("runc", {}).get("options", {}).get("SystemdCgroup")
    assert got is want, f"runc SystemdCgroup: {got}, want {want}"


@pytest.mark.machines("gpu")
def test_gpu_node_has_the_nvidia_runtime(runtimes, role_setting):
    binary = role_setting(ROLE, "containerd_nvidia_runtime_binary")
    got = runtimes.get("nvidia", {}).get("options", {}).get("BinaryName")
    assert got == binary, f"nvidia runtime BinaryName: {got}, want {binary}"
