"""The gpu_node role, run locally (connection local) against this machine, which has
no GPU: once as it is (the checks must say they were skipped), and against a fake
nvidia-smi that prints what a DGX H100 prints, healthy and broken.

Each run starts ansible-playbook (a few seconds)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HEALTHY = [f"{n}, NVIDIA H100 80GB HBM3, Enabled" for n in range(8)]


def run_role(tmp_path: Path, **role_vars) -> subprocess.CompletedProcess:
    playbook = tmp_path / "gpu.yml"
    variables = "".join(f"        {key}: {value!r}\n" for key, value in role_vars.items())
    playbook.write_text(textwrap.dedent("""\
        - name: GPU node checks
          hosts: localhost
          connection: local
          gather_facts: false
          roles:
            - role: gpu_node
              vars:
        """) + (variables or "        {}\n").replace("        ", "          ", 0))
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_LOCALHOST_WARNING": "false",
                   "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          env=environment, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)


def fake_gpu_host(tmp_path: Path, gpus: list[str], nvlink: str = "Link 0: 26.562 GB/s") -> dict[str, str]:
    """A fake nvidia-smi and driver file; the role reads them instead of the real ones."""
    smi = tmp_path / "nvidia-smi"
    listing = "\\n".join(gpus)
    smi.write_text(f'#!/bin/sh\ncase "$1" in\n  nvlink) echo "{nvlink}" ;;\n  *) printf "{listing}\\n" ;;\nesac\n')
    smi.chmod(0o755)
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05\n")
    return {"gpu_node_nvidia_smi": str(smi), "gpu_node_driver_version_file": str(driver),
            "gpu_node_dcgmi": str(tmp_path / "no-dcgmi")}


@pytest.mark.skipif(Path("/usr/bin/nvidia-smi").exists(), reason="this machine has nvidia-smi")
def test_without_gpus_the_role_says_the_checks_were_skipped(tmp_path):
    result = run_role(tmp_path, gpu_node_expected_count=8)
    assert (result.returncode, "GPU checks SKIPPED on localhost" in result.stdout) == (0, True), result.stdout


def test_without_gpus_where_required_the_role_fails(tmp_path):
    result = run_role(tmp_path, gpu_node_nvidia_smi=str(tmp_path / "absent"), gpu_node_require_gpus=True)
    assert (result.returncode, "gpu_node_require_gpus is set" in result.stdout) == (2, True), result.stdout


def test_a_healthy_dgx_h100_passes(tmp_path):
    result = run_role(tmp_path, **fake_gpu_host(tmp_path, HEALTHY), gpu_node_expected_count=8,
                      gpu_node_expected_model="H100")
    assert (result.returncode, "8 GPUs (NVIDIA H100 80GB HBM3)" in result.stdout) == (0, True), result.stdout


@pytest.mark.parametrize(("gpus", "role_vars", "message"), [
    (HEALTHY[:7], {"gpu_node_expected_count": 8}, "7 GPUs seen, the block has 8"),
    (HEALTHY, {"gpu_node_expected_model": "V100"}, "expected V100"),
    ([*HEALTHY[:7], "7, NVIDIA H100 80GB HBM3, Disabled"], {}, "persistence mode off on GPUs ['7']"),
])
def test_a_broken_gpu_node_fails_with_the_reason(tmp_path, gpus, role_vars, message):
    result = run_role(tmp_path, **fake_gpu_host(tmp_path, gpus), **role_vars)
    assert (result.returncode, message in result.stdout) == (2, True), result.stdout


def test_an_inactive_nvlink_fails(tmp_path):
    result = run_role(tmp_path, **fake_gpu_host(tmp_path, HEALTHY, nvlink="Link 3: <inactive>"))
    assert (result.returncode, "inactive NVLinks" in result.stdout) == (2, True), result.stdout


def test_missing_dcgm_is_reported_as_skipped(tmp_path):
    result = run_role(tmp_path, **fake_gpu_host(tmp_path, HEALTHY))
    assert "DCGM diagnostics SKIPPED on localhost" in result.stdout, result.stdout


@pytest.mark.slow
def test_the_role_passes_ansible_lint_production_profile(tmp_path):
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    result = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--profile", "production", "--nocolor",
                             "roles/gpu_node"], cwd=REPO, env=environment, capture_output=True, text=True,
                            timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------ acceptance benchmark


def test_the_benchmark_without_gpu_says_so_and_exits_0(tmp_path):
    no_nvidia = {**os.environ, "PATH": str(tmp_path)}  # an empty PATH: no nvidia-smi to find
    result = subprocess.run([sys.executable, str(REPO / "bench/gpu_acceptance.py"), "--block", "dgx2"],
                            env=no_nvidia, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.startswith("no GPU here")) == (0, True), result.stdout + result.stderr


@pytest.mark.parametrize(("block", "gpus", "img_s"), [
    ("dgx2", 1, 1250),     # seed: one V100
    ("dgx2", 16, 12000),   # seed: DGX-2
    ("dgx2", 8, 6000),     # pro rata
])
def test_the_benchmark_expects_the_seed_figures(block, gpus, img_s):
    sys.path.insert(0, str(REPO / "bench"))
    from gpu_acceptance import expected_img_s

    assert expected_img_s(block, gpus).img_s == img_s
