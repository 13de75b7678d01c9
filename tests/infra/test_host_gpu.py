"""GPU nodes (role gpu_node): driver loaded, the block's GPU count and model,
persistence mode, NVLink and NVSwitch health, DCGM diagnostics.

A machine without nvidia-smi skips every check here with that reason (the lab's GPU
nodes are containers without GPUs): a skip is reported, never a silent pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from rackform.paths import ROLES_DIR

pytestmark = [pytest.mark.stage("kubernetes"), pytest.mark.machines("gpu")]

ROLE = "gpu_node"
REPO_DEFAULTS = ROLES_DIR / ROLE / "defaults" / "main.yml"


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    persistence: str


def parse_gpus(csv_text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,name,persistence_mode --format=csv,noheader` lines."""
    return [Gpu(*(field.strip() for field in line.split(",", 2))) for line in csv_text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def gpu_setting(machine_vars, role_defaults):
    """The role's setting as Ansible picks it: inventory, emitted role defaults, rackform's role defaults."""

    def setting(name: str) -> Any:
        if name in machine_vars:
            return machine_vars[name]
        try:
            return role_defaults(ROLE)[name]
        except (FileNotFoundError, KeyError):
            return yaml.safe_load(REPO_DEFAULTS.read_text(encoding="utf-8"))[name]

    return setting


@pytest.fixture(scope="module")
def nvidia_smi(host, gpu_setting) -> str:
    path = gpu_setting("gpu_node_nvidia_smi")
    if not host.file(path).exists:
        pytest.skip(f"GPU checks skipped: {path} not found on this machine (no NVIDIA driver)")
    return path


@pytest.fixture(scope="module")
def gpus(host, nvidia_smi) -> list[Gpu]:
    out = host.check_output(f"{nvidia_smi} --query-gpu=index,name,persistence_mode --format=csv,noheader")
    return parse_gpus(out)


def test_nvidia_driver_loaded(host, nvidia_smi, gpu_setting):
    path = gpu_setting("gpu_node_driver_version_file")
    assert host.file(path).exists, f"{path} missing: the nvidia kernel module is not loaded"


def test_gpu_count_matches_the_block(gpus, gpu_setting):
    expected = int(gpu_setting("gpu_node_expected_count"))
    if expected == 0:
        pytest.skip("no expected GPU count set for this machine (gpu_node_expected_count)")
    assert len(gpus) == expected, f"{len(gpus)} GPUs seen, the block has {expected}"


def test_gpu_model_matches_the_block(gpus, gpu_setting):
    model = gpu_setting("gpu_node_expected_model")
    if not model:
        pytest.skip("no expected GPU model set for this machine (gpu_node_expected_model)")
    assert [g.name for g in gpus if model not in g.name] == []


def test_persistence_mode_on(gpus):
    assert [g.index for g in gpus if g.persistence != "Enabled"] == []


def test_no_inactive_nvlink(host, nvidia_smi):
    status = host.run(f"{nvidia_smi} nvlink --status")
    if status.rc != 0 or not status.stdout.strip():
        pytest.skip("no NVLink on this machine")
    assert [line for line in status.stdout.splitlines() if "inactive" in line.lower()] == []


def test_nvswitch_fabric_manager_active(host, nvidia_smi, gpu_setting):
    if int(gpu_setting("gpu_node_nvswitches")) == 0:
        pytest.skip("the block has no NVSwitch")
    assert host.service(gpu_setting("gpu_node_fabric_manager_service")).is_running


def test_dcgm_diagnostics_pass(host, nvidia_smi, gpu_setting):
    dcgmi = gpu_setting("gpu_node_dcgmi")
    if not host.file(dcgmi).exists:
        pytest.skip(f"DCGM diagnostics skipped: {dcgmi} not found")
    result = host.run(f"{dcgmi} diag -r {int(gpu_setting('gpu_node_dcgm_diag_level'))}")
    assert result.rc == 0, result.stdout
