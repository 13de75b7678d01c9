"""Day-2 playbooks (`upgrade`, `scale`) run through the stage runner: the site's lock, validate.yml
first, and a record in state/<site>.json that `rackform plan` reads.

The site's hosts are not reachable from here: the run step is replaced (as in test_deploy), a
kubeconfig sits where the kubernetes stage fetches it and a stand-in kubectl is on PATH, so the
site counts as having a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rackform.run.deploy
from rackform.cli import main
from rackform.pipeline import build_dir, load_and_check, stage_fingerprints
from rackform.render.project import render_files
from rackform.run import applied, interrupt
from rackform.run.ansible import HostStats, RunResult
from rackform.run.plan import plan_site
from rackform.run.sitelock import lock_path

LAB_PIN = '  version: "1.36.1"\n'
HOSTS = ("mgmt-1", "mgmt-2", "mgmt-3", "gpu-1", "gpu-2")


@pytest.fixture(autouse=True)
def no_cancel_left_behind():
    """A cancel asked for in a test stays in this process's flag: clear it for the next test."""
    yield
    interrupt._requested.clear()  # noqa: SLF001
    interrupt._signal_name.clear()  # noqa: SLF001


@pytest.fixture()
def root(fleet_root: Path, tmp_path: Path, monkeypatch) -> Path:
    """The lab with a cluster: a fetched kubeconfig and a kubectl on PATH."""
    kubeconfig = build_dir(fleet_root, "lab") / "artifacts" / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    (tools / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    return fleet_root


@pytest.fixture()
def runs(monkeypatch) -> list[tuple[str, str | None]]:
    """The run step: records (playbook, limit) and succeeds on the lab's cluster nodes."""
    calls: list[tuple[str, str | None]] = []

    def run_playbook(project_dir: Path, playbook: str, *, limit=None, **options) -> RunResult:
        calls.append((playbook, limit))
        return RunResult(playbook, "successful", 0, {host: HostStats(ok=4, changed=1) for host in HOSTS})

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    return calls


def kubernetes_applied_now(root: Path, *, complete: bool = True) -> applied.AppliedStage:
    """Record the kubernetes stage as applied with the site's current inputs (a deploy did it)."""
    site, _ = load_and_check("lab", root)
    digest, inputs = stage_fingerprints(render_files(site))["kubernetes"]
    entry = applied.AppliedStage(digest=digest, complete=complete, applied_at="2026-01-01T00:00:00Z", by="ops@here",
                                 via="cli", hosts=5, files=inputs)
    applied.record(root, "lab", "kubernetes", entry)
    return entry


def statuses(root: Path) -> dict[str, str]:
    return {stage.stage: stage.status for stage in plan_site("lab", root).stages}


# ---------------------------------------------------------------- the lock


HOLD_THE_LOCK = textwrap.dedent("""
    import sys, time
    from rackform.run.sitelock import site_lock
    with site_lock(sys.argv[1], "lab"):
        print("held", flush=True)
        time.sleep(60)
    """)


def test_upgrade_while_another_process_holds_the_site_writes_nothing(root: Path, runs, capsys):
    before = (root / "topologies/sites/lab.yaml").read_text()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 1
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert "site lab is being deployed by" in capsys.readouterr().err
    assert (root / "topologies/sites/lab.yaml").read_text() == before
    assert runs == [] and applied.load(root, "lab") == {}


def test_the_day2_playbook_runs_holding_the_site_lock(root: Path, monkeypatch):
    """While upgrade-cluster.yml runs, a second process is refused the site (a deploy, a rollout,
    a `pulumi up`: they all take this lock)."""
    refused: list[str] = []
    probe = textwrap.dedent("""
        import sys
        from rackform.run.sitelock import SiteLocked, site_lock
        try:
            with site_lock(sys.argv[1], "lab"):
                print("taken")
        except SiteLocked as error:
            print(f"refused: {error}")
        """)

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        if playbook == "upgrade-cluster.yml":
            refused.append(subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True,
                                          timeout=60, check=True).stdout)
        return RunResult(playbook, "successful", 0, {host: HostStats(ok=1) for host in HOSTS})

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 0
    assert len(refused) == 1 and refused[0].startswith("refused: site lab is being deployed by pid")
    assert not lock_path(root, "lab").exists()  # released cleanly after the run: removed


# ---------------------------------------------------------------- what is recorded


def test_upgrade_runs_validate_then_the_playbook_and_records_the_kubernetes_stage(root: Path, runs, capsys):
    kubernetes_applied_now(root)
    assert statuses(root)["kubernetes"] == "unchanged"
    assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 0
    assert runs == [("validate.yml", None), ("upgrade-cluster.yml", None)]
    recorded = applied.load(root, "lab")["kubernetes"]
    assert (recorded.via, recorded.complete, recorded.hosts, recorded.changed) == (
        "cli upgrade-cluster.yml", True, 5, 5)
    plan = statuses(root)
    # The cluster runs the pinned version: the kubernetes stage has nothing left to do.
    assert plan["kubernetes"] == "unchanged"
    # Only the stage the playbook does the work of: the os stage's inputs changed too (the mirror's
    # bundle), but its apt lists on hosts outside the cluster are still its own work.
    assert set(applied.load(root, "lab")) == {"kubernetes"} and plan["os"] != "unchanged"
    out = capsys.readouterr().out
    assert "lab: kubernetes stage recorded as applied by upgrade-cluster.yml" in out
    assert "upgrade lab: kubernetes.version 1.36.1 -> 1.36.3" in out


def test_a_kubernetes_stage_with_changes_of_its_own_is_not_recorded_by_the_upgrade(root: Path, runs, capsys):
    stale = applied.AppliedStage(digest="sha256:an-older-design", complete=True, applied_at="2026-01-01T00:00:00Z",
                                 by="ops@here", via="cli", files={"kubernetes.yml": "0" * 16})
    applied.record(root, "lab", "kubernetes", stale)
    assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 0
    assert applied.load(root, "lab")["kubernetes"] == stale
    assert statuses(root)["kubernetes"] == "changed"
    assert ("lab: kubernetes stage not recorded: the kubernetes stage has changes of its own (rackform plan lists "
            "them): upgrade-cluster.yml does not do them; deploy the stage") in capsys.readouterr().out


def test_a_failed_upgrade_leaves_the_stage_pending(root: Path, monkeypatch):
    from rackform.run.ansible import TaskFailure

    kubernetes_applied_now(root)

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        hosts = {host: HostStats(ok=1, failed=int(host == "gpu-2")) for host in HOSTS}
        failures = [TaskFailure("gpu-2", "Upgrade this worker", "kubelet did not come back")] * (
            playbook == "upgrade-cluster.yml")
        return RunResult(playbook, "failed" if failures else "successful", 2 if failures else 0, hosts, failures)

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 1
    recorded = applied.load(root, "lab")["kubernetes"]
    assert (recorded.complete, recorded.failed_hosts) == (False, ["gpu-2"])
    assert statuses(root)["kubernetes"] == "pending"


def test_an_interrupted_upgrade_records_nothing_and_exits_as_deploy_does(root: Path, monkeypatch):
    kubernetes_applied_now(root)
    before = applied.load(root, "lab")

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        if playbook == "upgrade-cluster.yml":
            interrupt.request_cancel("SIGINT")  # what the first Ctrl-C does (rackform.run.interrupt)
            return RunResult(playbook, "canceled", 254, {"mgmt-1": HostStats(ok=2)})
        return RunResult(playbook, "successful", 0, {host: HostStats(ok=1) for host in HOSTS})

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    assert main(["upgrade", "lab", "--root", str(root), "--to", "1.36.3"]) == 130
    assert applied.load(root, "lab") == before


def test_scale_runs_limited_through_the_stage_runner_and_records_it(root: Path, runs, capsys):
    kubernetes_applied_now(root, complete=False)  # `node add` ran the stage limited to the new node
    assert main(["scale", "lab", "--root", str(root), "--nodes", "gpu-2"]) == 0
    assert runs == [("validate.yml", "gpu-2,kube_control_plane"), ("scale.yml", "gpu-2,kube_control_plane")]
    recorded = applied.load(root, "lab")["kubernetes"]
    assert (recorded.via, recorded.complete) == ("cli scale.yml", False)
    assert statuses(root)["kubernetes"] == "pending"
    assert "scale lab: gpu-2 joined" in capsys.readouterr().out
