"""Signals to `rackform deploy` on real lab hosts (the small `labtest` site).

SIGTERM and SIGINT sent to a running `rackform deploy` cancel the running playbook, start no
later stage, print the summary naming the stage that was cut and exit 128 + the signal; a
re-run converges. (Both front doors on one site, through the real Pulumi engine:
tests/lab/test_pulumi_lab.py deploys the shipped lab with `pulumi up`, and test_deploy_lab's
`rackform deploy` then changes nothing and records the same digests.)

Needs root and the lab's tools (docs/lab.md). Run alone, on one worker:
pytest -p no:xdist -m lab tests/lab/test_one_pipeline_lab.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rackform import cli
from rackform.lab import lab
from rackform.run import applied

pytestmark = pytest.mark.lab

SITE = "labtest"
REPO = Path(__file__).resolve().parents[2]
STAGE_START_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("applied-state")


@pytest.fixture(scope="module")
def lab_up(labtest_root: Path, state_dir: Path):
    quiet = lambda line: None  # noqa: E731
    lab.down(SITE, progress=quiet)
    status = lab.up(SITE, labtest_root, progress=quiet)
    assert status.up, "\n".join(status.lines())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(applied.STATE_DIR_ENV, str(state_dir))
        yield labtest_root
    lab.down(SITE, progress=quiet)


def deploy(root: Path, *stages: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["deploy", SITE, "--root", str(root), *(["--stage", *stages] if stages else [])])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def cli_os(lab_up: Path) -> applied.AppliedStage:
    """`rackform deploy --stage os`: the stage the signals below cut, deployed once first."""
    code, out = deploy(lab_up, "os")
    assert code == 0, out
    return applied.load(lab_up, SITE)["os"]


# ---------------------------------------------------------------- signals


def interrupted_deploy(root: Path, signum: int, *, twice: bool = False) -> tuple[int, str, float]:
    """Start `rackform deploy --stage os verify`, signal it once os runs; (exit, stdout, seconds to exit)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "rackform.cli", "deploy", SITE, "--root", str(root), "--stage", "os", "verify"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    deadline = time.monotonic() + STAGE_START_TIMEOUT_S
    for line in process.stdout:
        lines.append(line)
        if line.startswith("[os 1/2]") or time.monotonic() > deadline:
            break
    time.sleep(1.0)  # inside the stage, past its first task
    sent = time.monotonic()
    process.send_signal(signum)
    if twice:
        time.sleep(0.2)
        process.send_signal(signum)
    rest, _ = process.communicate(timeout=60)
    return process.returncode, "".join(lines) + rest, time.monotonic() - sent


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_cuts_the_running_stage_and_starts_no_other(lab_up: Path, cli_os, signum):
    code, out, seconds = interrupted_deploy(lab_up, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum, out
    assert f"{SITE}: STOPPED: interrupted by {name} during os" in out
    verify_row = next(line for line in out.splitlines() if line.startswith("verify "))
    assert f"not run: interrupted by {name}" in verify_row
    assert seconds < 15, f"took {seconds:.1f} s to stop"


def test_a_second_signal_stops_at_once_without_a_summary(lab_up: Path, cli_os):
    code, out, _seconds = interrupted_deploy(lab_up, signal.SIGTERM, twice=True)
    assert code == 128 + signal.SIGTERM and "stopping now" in out and "deploy summary" not in out


def test_a_deploy_after_interruptions_converges(lab_up: Path, cli_os):
    code, out = deploy(lab_up, "os", "verify")
    assert code == 0, out
    assert json.loads((Path(os.environ[applied.STATE_DIR_ENV]) / f"{SITE}.json").read_text())["stages"]["verify"]
