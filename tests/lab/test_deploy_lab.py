"""`rackform deploy lab` against the real lab: a deploy, one that changes nothing, and a host
that loses power in the middle of a deploy (gpu-2, as the os stage starts: after provision and
fabric reached it).

Works on the session's shipped `lab` site (tests/lab/conftest.py) after test_pulumi_lab deployed
it with `pulumi up`: the CLI's first deploy then changes nothing (both front doors converge to the
same site) and is also the deploy that changes nothing. Run alone, the first deploy deploys the
freshly imaged lab and a second one shows nothing left to change. It leaves the lab converged:
its cluster is test_kubernetes_lab's. Needs root and the lab's tools (docs/lab.md).
Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_deploy_lab.py
Deploy times are printed (-s shows them).
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackform import cli
from rackform.lab import lab, nodes, state
from rackform.pipeline import STAGES as PIPELINE_STAGES
from rackform.run import applied
from rackform.run.progress import ProgressDisplay
from labenv import skip_reason

pytestmark = pytest.mark.lab

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "lab"
VICTIM = "gpu-2"
# Every Ansible stage, as a plain `rackform deploy lab` runs them (platform is Pulumi's).
STAGES = [stage.name for stage in PIPELINE_STAGES if stage.playbook]
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Deployed:
    code: int
    out: str
    err: str
    seconds: float

    @property
    def verdict(self) -> str:
        return self.out.rstrip().splitlines()[-1]

    def stage_row(self, stage: str) -> list[str]:
        """The summary table's row of a stage, split on whitespace."""
        rows = [line.split() for line in self.out.splitlines()]
        return next(row for row in rows if row and row[0] == stage and len(row) > 2 and row[2] == "s")


def rackform_deploy() -> Deployed:
    """`rackform deploy lab`, its output captured, its wall time measured and printed."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["deploy", SITE, "--root", str(REPO_ROOT)])
    deployed = Deployed(code, out.getvalue(), err.getvalue(), round(time.monotonic() - started, 1))
    print(f"\nrackform deploy {SITE}: exit {code} in {deployed.seconds} s\n{deployed.out}")
    return deployed


@pytest.fixture(scope="module")
def lab_up(shipped_lab):
    """The session's shipped lab (tests/lab/conftest.py): left up, converged, for test_kubernetes_lab."""
    return shipped_lab


@pytest.fixture(scope="module")
def pulumi_recorded(lab_up) -> dict:
    """What the stages last recorded before this module's first deploy (test_pulumi_lab's `pulumi up`)."""
    return applied.load(REPO_ROOT, SITE)


@pytest.fixture(scope="module")
def first(lab_up, pulumi_recorded) -> Deployed:
    return rackform_deploy()


@pytest.fixture(scope="module")
def second(first) -> Deployed:
    """A deploy after one that converged the site: `first` itself after `pulumi up` deployed it."""
    if first.code == 0 and "no changes were made" in first.out:
        return first
    return rackform_deploy()


@pytest.fixture(scope="module")
def power_lost(second) -> Deployed:
    """gpu-2 loses power as the os stage starts (after validate, provision and fabric reached it)."""
    started = ProgressDisplay.step_started

    def step_started(self, step, left_out):
        if step.name == "os":
            nodes.power_off(SITE, VICTIM)
        return started(self, step, left_out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ProgressDisplay, "step_started", step_started)
        return rackform_deploy()


@pytest.fixture(scope="module")
def power_back(power_lost, lab_up) -> Deployed:
    nodes.power_on(SITE, VICTIM)
    node = lab.wait_until_ready(lab_up, lab_up.node(VICTIM), READY_TIMEOUT_S)
    assert node.ssh, node.line()
    return rackform_deploy()


# ---------------------------------------------------------------- first and second deploy


def test_first_deploy_succeeds_on_every_host(first: Deployed):
    assert first.code == 0 and "rackform:" not in first.err
    assert re.fullmatch(r"lab: ok, (\d+ task\(s\) changed on 9 of 9 hosts|no changes \(9 hosts,) \(?\d+\.\d s\)",
                        first.verdict), first.verdict


@pytest.mark.parametrize("stage", STAGES)
def test_first_deploy_runs_every_stage_without_failures(first: Deployed, stage: str):
    row = first.stage_row(stage)
    assert row[6:8] == ["0", "0"]  # failed, unreachable


def test_after_pulumi_up_the_cli_records_the_same_digests(first: Deployed, pulumi_recorded: dict):
    """One pipeline, two front doors: the stages `pulumi up` recorded are the ones `rackform deploy`
    records on the same site, digest for digest (run alone, without test_pulumi_lab, nothing to compare)."""
    by_pulumi = {stage: entry.digest for stage, entry in pulumi_recorded.items() if entry.via == "pulumi"}
    if not by_pulumi:
        pytest.skip("the lab was not deployed by `pulumi up` first (test_pulumi_lab did not run)")
    by_cli = {stage: entry.digest for stage, entry in applied.load(REPO_ROOT, SITE).items() if stage in by_pulumi}
    assert by_cli == by_pulumi


def test_second_deploy_changes_nothing(second: Deployed):
    assert second.code == 0
    assert "no changes were made: every host already matched the design" in second.out
    assert second.verdict.startswith("lab: ok, no changes (9 hosts, ")


# ---------------------------------------------------------------- a host loses power


def test_a_host_that_loses_power_fails_alone(power_lost: Deployed):
    assert power_lost.code == 1
    assert power_lost.verdict == f"lab: FAILED on 1 of 9 host(s): {VICTIM} (unreachable in os); 8 host(s) ok"
    assert f"rackform: lab: 1 host(s) failed: {VICTIM}" in power_lost.err


def test_the_unreachable_host_is_named_with_its_reason(power_lost: Deployed):
    line = next(line for line in power_lost.out.splitlines() if line.startswith(f"{VICTIM}  os "))
    assert "unreachable: Failed to connect to the host via ssh" in line


@pytest.mark.parametrize("stage", ["kubernetes", "verify"])
def test_the_other_hosts_finish_the_later_stages(power_lost: Deployed, stage: str):
    row = power_lost.stage_row(stage)
    assert (row[6:8], " ".join(row[8:])) == (["0", "0"], f"left out: {VICTIM}")


def test_after_power_comes_back_the_lab_converges(power_back: Deployed):
    assert power_back.code == 0
    assert power_back.verdict.startswith("lab: ok, ")
