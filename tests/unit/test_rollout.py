"""The fleet: the rollout file, checks across sites, waves, stop-the-line, resume and the lock.

Wave logic is tested with a stand-in for one site's deploy (what is under test is the
order and the stopping); `deploy_site` itself runs the real stage runner with its
playbook runs replaced and the gates replaced (no lab hosts in unit tests); the lab
suite runs the whole thing for real (tests/lab/test_rollout_lab.py).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rackform import cli
from rackform.fleet import gates, rollout as rollout_module
from rackform.fleet.cross_site import cross_site_findings
from rackform.fleet.rollout import SiteResult, run_rollout
from rackform.fleet.rollout_file import load_rollout
from rackform.model.loader import load_site
from rackform.model.source import BadInput
from rackform.run import applied
from rackform.run.ansible import HostStats, RunResult, TaskFailure
from rackform.run.sitelock import SiteLocked, lock_path, site_lock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def root(fleet_root: Path) -> Path:
    return fleet_root


def write_rollout(root: Path, text: str) -> None:
    (root / "topologies/rollout.yaml").write_text(textwrap.dedent(text))


THREE_WAVES = """\
    waves:
      - {name: canary, sites: [lab]}
      - {name: second, sites: [edge, reference], parallel: 2}
      - {name: last, sites: [campus]}
    gates: []
    """


class StandIn:
    """Records which sites ran, in which order; fails the sites named in `failing`."""

    def __init__(self, failing=(), delay_s: float = 0.0):
        self.failing, self.delay_s = set(failing), delay_s
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, site, wave, converge, out) -> SiteResult:
        with self.lock:
            self.calls.append(site)
        time.sleep(self.delay_s)
        if site in self.failing:
            return SiteResult(site, wave.name, ["os"], 0, 0.1, "failed", "os", ["gpu-2"])
        return SiteResult(site, wave.name, ["os"], 1, 0.1, "ok")


# ---------------------------------------------------------------- the rollout file


def test_the_shipped_rollout_file_loads(root: Path):
    rollout = load_rollout(root)
    assert [wave.name for wave in rollout.waves] == ["canary", "edge"] and rollout.routed == (("lab", "edge"),)


@pytest.mark.parametrize(("text", "error"), [
    ("waves:\n  - {name: a, sites: [lab, labb]}\n", "rollout.yaml:2: waves[a].sites: unknown site 'labb' (did you mean 'lab'?)"),
    ("waves:\n  - {name: a, sites: [lab]}\n  - {name: b, sites: [lab]}\n", "rollout.yaml:3: waves[b].sites: site 'lab' is already in a wave"),
    ("waves:\n  - {name: a, sites: [lab]}\ngates: [verfy]\n", "rollout.yaml:3: gates: unknown gate 'verfy' (did you mean 'verify'?)"),
    ("waves:\n  - {name: a, sites: [lab], paralel: 2}\n", "rollout.yaml:2: waves[a].paralel: unknown key (did you mean 'parallel'?)"),
    ("waves:\n  - {name: a, sites: [lab]}\nrouted:\n  - [lab, edge]\n", "rollout.yaml:4: routed: site 'edge' is in no wave"),
])
def test_a_bad_rollout_file_is_refused_at_its_line(root: Path, text: str, error: str):
    write_rollout(root, text)
    with pytest.raises(BadInput) as refused:
        load_rollout(root)
    assert any(error in str(problem) for problem in refused.value.errors), refused.value


# ---------------------------------------------------------------- across sites


def test_shipped_sites_do_not_collide():
    sites = {name: load_site(name, REPO) for name in ("lab", "edge")}
    assert cross_site_findings(sites, [("lab", "edge")]) == []


def test_routed_sites_with_overlapping_prefixes_or_addresses_are_refused(root: Path):
    path = root / "topologies/sites/edge.yaml"
    path.write_text(path.read_text().replace("10.40.1.0/24", "10.10.1.0/24"))
    host = root / "inventories/edge/host_vars/mgmt-1.yml"
    host.write_text(host.read_text().replace("10.40.1.11", "10.10.1.11"))
    sites = {name: load_site(name, root) for name in ("lab", "edge")}
    found = {(f.check, f.loc.path.split("/")[-1]) for f in cross_site_findings(sites, [("lab", "edge")])}
    assert ("routed_prefixes_distinct", "edge.yaml") in found
    assert ("routed_addresses_distinct", "mgmt-1.yml") in found


def test_sites_not_routed_to_each_other_may_reuse_addresses(root: Path):
    path = root / "topologies/sites/edge.yaml"
    path.write_text(path.read_text().replace("10.40.1.0/24", "10.10.1.0/24"))
    sites = {name: load_site(name, root) for name in ("lab", "edge")}
    assert cross_site_findings(sites, []) == []


def test_validate_all_runs_the_checks_across_sites(root: Path, capsys):
    # edge on lab's management network: valid alone, not beside lab
    for path in [root / "topologies/sites/edge.yaml", *(root / "inventories/edge").rglob("*.yml")]:
        path.write_text(path.read_text().replace("10.40.0.", "10.10.0."))
    assert cli.main(["validate", "--all", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "topologies/sites/edge.yaml:32: error: networks[mgmt].prefix: 10.10.0.0/24 overlaps 10.10.0.0/24 (lab's mgmt)" in err
    assert "inventories/edge/host_vars/mgmt-1.yml:1: error: management_address: 10.10.0.11 is also mgmt-1's" in err


# ---------------------------------------------------------------- waves


def test_waves_run_in_order(root: Path):
    write_rollout(root, THREE_WAVES)
    runner = StandIn()
    report = run_rollout(load_rollout(root), root, stream=io.StringIO(), site_runner=runner)
    assert report.ok and runner.calls[0] == "lab" and runner.calls[-1] == "campus"
    assert set(runner.calls[1:3]) == {"edge", "reference"}


def test_a_failed_site_stops_the_line(root: Path):
    write_rollout(root, THREE_WAVES)
    report = run_rollout(load_rollout(root), root, stream=io.StringIO(), site_runner=StandIn(failing={"lab"}))
    assert (report.ok, report.stopped_at) == (False, "lab")
    assert {site.site: site.result for site in report.sites} == {
        "lab": "failed", "edge": "not started", "reference": "not started", "campus": "not started"}


def test_sites_already_running_in_the_wave_finish(root: Path):
    write_rollout(root, THREE_WAVES)
    report = run_rollout(load_rollout(root), root, stream=io.StringIO(),
                         site_runner=StandIn(failing={"edge"}, delay_s=0.2))
    results = {site.site: site.result for site in report.sites}
    assert results["edge"] == "failed" and results["reference"] == "ok" and results["campus"] == "not started"


def test_resume_starts_at_the_wave_that_did_not_pass(root: Path):
    write_rollout(root, THREE_WAVES)
    run_rollout(load_rollout(root), root, stream=io.StringIO(), site_runner=StandIn(failing={"edge"}))
    runner = StandIn()
    report = run_rollout(load_rollout(root), root, resume=True, stream=io.StringIO(), site_runner=runner)
    assert report.ok and "lab" not in runner.calls and set(runner.calls) == {"edge", "reference", "campus"}


def test_without_resume_every_wave_is_planned_again(root: Path):
    write_rollout(root, THREE_WAVES)
    run_rollout(load_rollout(root), root, stream=io.StringIO(), site_runner=StandIn(failing={"edge"}))
    runner = StandIn()
    run_rollout(load_rollout(root), root, stream=io.StringIO(), site_runner=runner)
    assert runner.calls[0] == "lab"


# ---------------------------------------------------------------- a site's deploy, for real


def fake_playbooks(failing: dict[str, str] | None = None):
    failing = failing or {}

    def run(project_dir: Path, playbook: str, **options) -> RunResult:
        hosts = ["mgmt-1", "mgmt-2", "mgmt-3"]
        bad = [host for host, where in failing.items() if where == playbook]
        return RunResult(playbook, "failed" if bad else "successful", 2 if bad else 0,
                         {host: HostStats(ok=2, changed=1, failed=int(host in bad)) for host in hosts},
                         [TaskFailure(host, "a task", "broken") for host in bad])

    return run


@pytest.fixture()
def playbooks(monkeypatch):
    def install(failing=None):
        runner = fake_playbooks(failing)
        monkeypatch.setattr("rackform.run.deploy.run_playbook", runner)
        return runner

    monkeypatch.setitem(gates.GATE_CHECKS, "verify", lambda site, root, out: (True, ""))
    monkeypatch.setitem(gates.GATE_CHECKS, "fabric-check", lambda site, root, out: (True, ""))
    monkeypatch.setattr(rollout_module, "_run_gates", rollout_module._run_gates)
    return install


def test_a_second_rollout_has_nothing_to_do(root: Path, playbooks, capsys):
    write_rollout(root, "waves:\n  - {name: one, sites: [edge]}\n")
    playbooks()
    assert cli.main(["rollout", "--root", str(root)]) == 0
    first = capsys.readouterr().out
    # the platform is planned: the kubernetes stage before it fetches its kubeconfig (here a stand-in
    # runner fetches none, so when its turn comes it is not run, and said)
    assert "edge: plan: provision, fabric, os, kubernetes, platform, verify" in first
    assert cli.main(["rollout", "--root", str(root)]) == 0
    second = capsys.readouterr().out
    assert "edge: nothing to do" in second and "rollout: ok" in second and "nothing changed" in second


def test_a_failed_host_stops_the_rollout_naming_site_stage_and_host(root: Path, playbooks, capsys):
    write_rollout(root, "waves:\n  - {name: one, sites: [edge]}\n  - {name: two, sites: [lab]}\n")
    playbooks({"mgmt-2": "os.yml"})
    assert cli.main(["rollout", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "rollout stopped: edge failed in os on mgmt-2" in err
    assert "lab" not in applied.load(root, "lab") and applied.load(root, "lab") == {}


def test_resume_after_a_fix_runs_only_what_did_not_finish(root: Path, playbooks, capsys):
    write_rollout(root, "waves:\n  - {name: one, sites: [edge]}\n")
    playbooks({"mgmt-2": "os.yml"})
    cli.main(["rollout", "--root", str(root)])
    capsys.readouterr()
    playbooks()
    assert cli.main(["rollout", "--root", str(root), "--resume"]) == 0
    out = capsys.readouterr().out
    # provision and fabric had finished on every host; kubernetes ran without mgmt-2, so it is pending too
    assert "edge: plan: os, kubernetes, platform, verify" in out


def test_the_json_report_names_every_site(root: Path, playbooks, capsys):
    write_rollout(root, "waves:\n  - {name: one, sites: [edge]}\n")
    playbooks()
    assert cli.main(["rollout", "--root", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(s["site"], s["wave"], s["result"]) for s in report["sites"]] == [("edge", "one", "ok")]
    assert json.loads((root / "build/rollout-report.json").read_text()) == report


def test_dry_run_prints_the_plan_in_wave_order_and_runs_nothing(root: Path, playbooks, capsys):
    playbooks()
    assert cli.main(["rollout", "--root", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.index("wave canary") < out.index("  lab: would run") < out.index("wave edge") < out.index("  edge:")
    assert applied.load(root, "lab") == {}


# ---------------------------------------------------------------- the lock


def test_a_site_being_deployed_cannot_be_deployed_again_at_once(tmp_path: Path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import time
        from pathlib import Path
        from rackform.run.sitelock import site_lock
        with site_lock(Path({str(tmp_path)!r}), "edge"):
            print("held", flush=True)
            time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SiteLocked, match=r"site edge is being deployed by pid \d+"):
            with site_lock(tmp_path, "edge"):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_a_killed_run_is_taken_over_and_said(tmp_path: Path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import time
        from pathlib import Path
        from rackform.run.sitelock import site_lock
        with site_lock(Path({str(tmp_path)!r}), "edge"):
            print("held", flush=True)
            time.sleep(30)
        """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    said: list[str] = []
    with site_lock(tmp_path, "edge", say=said.append):
        assert lock_path(tmp_path, "edge").read_text().startswith("pid ")
    assert len(said) == 1 and "ended without releasing its lock" in said[0]
    assert not lock_path(tmp_path, "edge").exists()  # released cleanly: removed


def test_the_lock_nests_within_one_process(tmp_path: Path):
    with site_lock(tmp_path, "edge"), site_lock(tmp_path, "edge"):
        pass


def test_two_rollouts_at_once_are_refused(root: Path, capsys):
    with site_lock(root, rollout_module.ROLLOUT_LOCK):
        holder = subprocess.run([sys.executable, "-m", "rackform.cli", "rollout", "--root", str(root)],
                                capture_output=True, text=True, timeout=120)
    assert holder.returncode == 1 and "site rollout is being deployed" in holder.stderr
