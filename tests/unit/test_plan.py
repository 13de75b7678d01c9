"""`rackform plan` against the state `rackform deploy` records (rackform.run.applied).

The deploys here run every stage through the real stage runner with its playbook
runs replaced (the lab's hosts are not reachable from unit tests): what is under
test is what gets recorded and how a later render compares with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackform import cli
from rackform.run import applied
from rackform.run.ansible import HostStats, RunResult, TaskFailure
from rackform.run.plan import BLOCKED, CHANGED, NEW, PENDING, UNCHANGED, plan_site
from rackform.run.stages import run_stages

REPO = Path(__file__).resolve().parents[2]
HOSTS = ["mgmt-1", "mgmt-2", "mgmt-3", "leaf-1", "leaf-2", "spine-1"]


@pytest.fixture()
def root(fleet_root: Path) -> Path:
    return fleet_root


def runner(failing: dict[str, str] | None = None):
    """Every playbook ok on every host, but `failing` (host -> playbook where it fails)."""
    failing = failing or {}

    def run(project_dir: Path, playbook: str, **options) -> RunResult:
        bad = [host for host, where in failing.items() if where == playbook]
        hosts = {host: HostStats(ok=3, failed=int(host in bad)) for host in HOSTS}
        return RunResult(playbook, "failed" if bad else "successful", 2 if bad else 0, hosts,
                         [TaskFailure(host, "a task", "broken") for host in bad])

    return run


def deploy(root: Path, **options):
    return run_stages("edge", root, runner=runner(options.pop("failing", None)), **options)


def statuses(root: Path) -> dict[str, str]:
    return {stage.stage: stage.status for stage in plan_site("edge", root).stages}


def test_a_site_never_deployed_is_new_everywhere_the_platform_too(root: Path):
    """No kubeconfig yet, but the kubernetes stage that fetches it runs first: the platform is planned."""
    assert statuses(root) == {"provision": NEW, "fabric": NEW, "os": NEW, "kubernetes": NEW, "platform": NEW,
                              "verify": NEW}


def test_the_platform_is_blocked_when_no_stage_before_it_will_fetch_a_kubeconfig(root: Path):
    deploy(root)  # stand-in playbooks: the kubernetes stage is applied, yet no kubeconfig was fetched
    plan = plan_site("edge", root)
    platform = next(stage for stage in plan.stages if stage.stage == "platform")
    assert (platform.status, "no kubeconfig" in platform.reason) == (BLOCKED, True)


def test_after_a_deploy_nothing_is_left_to_run(root: Path):
    deploy(root)
    plan = plan_site("edge", root)
    assert plan.to_run == [] and {s.stage: s.status for s in plan.stages}["os"] == UNCHANGED


def test_the_recorded_digest_is_the_one_pulumi_diffs_on(root: Path):
    import sys
    sys.path.insert(0, str(REPO / "stacks"))
    from components.stages import stage_digests

    from rackform.pipeline import load_and_check

    deploy(root)
    site, _ = load_and_check("edge", root)
    assert applied.load(root, "edge")["fabric"].digest == stage_digests(site)["fabric"]


def test_a_shared_setting_changes_exactly_the_stages_and_files_that_read_it(root: Path):
    deploy(root)
    profile = root / "topologies/profiles/roce.yaml"
    profile.write_text(profile.read_text().replace("mtu: 9000", "mtu: 8500"))
    plan = plan_site("edge", root)
    changed = {stage.stage: [change.path for change in stage.files] for stage in plan.stages
               if stage.status == CHANGED}
    # the host MTU is read by the fabric stage (roce_host) and the os stage (fabric MTU), by no other
    assert changed == {stage: ["inventory/group_vars/servers/fabric.yml"] for stage in ("fabric", "os", "verify")}


def test_a_host_that_failed_leaves_its_stage_pending(root: Path):
    deploy(root, failing={"mgmt-2": "os.yml"})
    plan = {stage.stage: stage for stage in plan_site("edge", root).stages}
    assert plan["os"].status == PENDING and "1 host(s) failed" in plan["os"].reason
    assert plan["fabric"].status == UNCHANGED


def test_a_limited_run_leaves_its_stages_pending(root: Path):
    deploy(root, limit="mgmt-1")
    assert statuses(root)["os"] == PENDING


def test_check_mode_records_nothing(root: Path):
    deploy(root, check=True)
    assert applied.load(root, "edge") == {}


def test_plan_json_names_sites_stages_and_files(root: Path, capsys):
    deploy(root)
    path = root / "inventories/edge/host_vars/mgmt-1.yml"
    path.write_text(path.read_text().replace("10.40.0.11", "10.40.0.21"))
    assert cli.main(["plan", "edge", "--root", str(root), "--json"]) == 0
    (site,) = json.loads(capsys.readouterr().out)["sites"]
    os_stage = next(stage for stage in site["stages"] if stage["stage"] == "os")
    assert os_stage["status"] == CHANGED
    assert {"path": "inventory/host_vars/mgmt-1.yml", "change": "modified"} in os_stage["files"]


def test_plan_diff_shows_the_changed_lines(root: Path, capsys):
    deploy(root)
    path = root / "inventories/edge/host_vars/mgmt-1.yml"
    path.write_text(path.read_text().replace("10.40.0.11", "10.40.0.21"))
    assert cli.main(["plan", "edge", "--root", str(root), "--diff"]) == 0
    out = capsys.readouterr().out
    assert "+++ now/inventory/host_vars/mgmt-1.yml" in out and "10.40.0.21" in out


def test_plan_needs_sites_or_all(root: Path, capsys):
    assert cli.main(["plan", "--root", str(root)]) == 2
    assert "name at least one site, or --all" in capsys.readouterr().err


def test_plan_all_covers_every_shipped_site(root: Path, capsys):
    assert cli.main(["plan", "--all", "--root", str(root), "--json"]) == 0
    names = [site["site"] for site in json.loads(capsys.readouterr().out)["sites"]]
    assert names == sorted(path.stem for path in (root / "topologies/sites").glob("*.yaml"))


def test_a_bad_design_is_exit_2_with_its_file_and_line(root: Path, capsys):
    path = root / "topologies/sites/edge.yaml"
    path.write_text(path.read_text().replace("height_u: 42", "hieght_u: 42"))
    assert cli.main(["plan", "edge", "--root", str(root)]) == 2
    assert "topologies/sites/edge.yaml:" in capsys.readouterr().err
