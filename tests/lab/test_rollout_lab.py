"""`rackform rollout` over two real lab sites: `lab` (wave canary), then `edge`.

Both sites are up at once on this machine (their own names and addresses). In order:
the first rollout deploys both; a second finds nothing to do; a host MTU changed in the
shared `roce` profile is planned as exactly the stages and file that read it and only
those run; a `lab` host powered off through its BMC stops the line after wave 1 with
edge untouched; powered on again, `--resume` finishes. Both labs come down at the end.

Needs root and the lab's tools (docs/lab.md). Run alone, on one worker:
pytest -p no:xdist -m lab tests/lab/test_rollout_lab.py -s    (-s prints the figures)
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from labenv import skip_reason
from rackform import cli
from rackform.lab import lab, state
from rackform.run import applied

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
SITES = ("lab", "edge")
VICTIM = "stor-1"
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str
    seconds: float

    def row(self, site: str) -> str:
        """The site's row of the rollout summary table."""
        lines = self.out[self.out.index("rollout summary"):].splitlines()
        return next(line for line in lines if line.split()[:1] == [site])


def rollout(root: Path, *args: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["rollout", "--root", str(root), *args])
    run = Run(code, out.getvalue(), err.getvalue(), round(time.monotonic() - started, 1))
    print(f"\nrackform rollout {' '.join(args)}: exit {code} in {run.seconds} s\n"
          f"{run.out[run.out.find('rollout summary'):]}{run.err}")
    return run


def without_mirror(site_file: Path) -> None:
    """The site's copy with no `mirror:` section: this module is about rollout's waves, gates
    and resume, not Kubernetes, so the kubernetes stage stops after containerd as on a site
    whose nodes cannot get the Kubernetes packages (a real cluster per site would cost minutes
    per rollout; test_kubernetes_lab has the real one)."""
    text = site_file.read_text()
    lean = re.sub(r"^mirror:\n(?:  .*\n)+", "", text, flags=re.MULTILINE)
    assert lean != text, f"{site_file.name} has no mirror section to leave out"
    site_file.write_text(lean)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    reason = skip_reason(single_worker="the shared `lab` and `edge` sites")
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("fleet")
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, root / folder)
    for site in SITES:
        without_mirror(root / "topologies" / "sites" / f"{site}.yaml")
    quiet = lambda line: None  # noqa: E731
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(applied.STATE_DIR_ENV, str(root / "state"))
        for site in SITES:
            lab.down(site, progress=quiet)
            status = lab.up(site, root, progress=quiet)
            assert status.up, "\n".join(status.lines())
        yield root
        for site in SITES:
            lab.down(site, progress=quiet)


@pytest.fixture(scope="module")
def first(root: Path) -> Run:
    return rollout(root)


@pytest.fixture(scope="module")
def second(first, root: Path) -> Run:
    return rollout(root)


@pytest.fixture(scope="module")
def mtu_change(second, root: Path) -> tuple[str, Run]:
    profile = root / "topologies/profiles/roce.yaml"
    profile.write_text(profile.read_text().replace("mtu: 9000", "mtu: 8800"))
    plan = io.StringIO()
    with contextlib.redirect_stdout(plan):
        assert cli.main(["plan", *SITES, "--root", str(root), "--json"]) == 0
    return plan.getvalue(), rollout(root)


@pytest.fixture(scope="module")
def stopped(mtu_change, root: Path) -> tuple[Run, dict]:
    """The MTU back to 9000 (every site has stages to run), with a lab host off: (run, edge's state before)."""
    edge_before = applied.load(root, "edge")
    profile = root / "topologies/profiles/roce.yaml"
    profile.write_text(profile.read_text().replace("mtu: 8800", "mtu: 9000"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["bmc", "power", "lab", "off", "--nodes", VICTIM, "--root", str(root)]) == 0
    return rollout(root), edge_before


@pytest.fixture(scope="module")
def resumed(stopped, root: Path) -> Run:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["bmc", "power", "lab", "on", "--nodes", VICTIM, "--root", str(root)]) == 0
    lab_state = state.load("lab")
    node = lab.wait_until_ready(lab_state, lab_state.node(VICTIM), READY_TIMEOUT_S)
    assert node.ssh, node.line()
    return rollout(root, "--resume")


def test_the_first_rollout_deploys_both_sites_in_wave_order(first: Run):
    assert first.code == 0, first.out + first.err
    assert first.out.index("rollout: wave canary: lab") < first.out.index("rollout: wave edge: edge")
    for site, stages in (("lab", "provision, fabric, os, storage, kubernetes"),  # the lab serves data sets
                         ("edge", "provision, fabric, os, kubernetes")):
        assert " ok" in first.row(site) and stages in first.row(site)


def test_the_gates_ran_and_passed(first: Run):
    for site in SITES:
        assert f"{site}: gate verify: passed" in first.out and f"{site}: gate fabric-check: passed" in first.out


def test_a_second_rollout_has_nothing_to_do_and_is_quick(first: Run, second: Run):
    assert second.code == 0 and "nothing changed" in second.out
    assert all("nothing to do" in second.row(site) for site in SITES)
    print(f"\nno-change rollout: {second.seconds} s against {first.seconds} s "
          f"({second.seconds / first.seconds:.1%} of the first)")


def test_a_shared_setting_plans_exactly_the_stages_and_file_that_read_it(mtu_change):
    plan, _run = mtu_change
    for site in json.loads(plan)["sites"]:
        changed = {stage["stage"]: [f["path"] for f in stage["files"]] for stage in site["stages"]
                   if stage["status"] == "changed"}
        assert changed == {stage: ["inventory/group_vars/servers/fabric.yml"] for stage in ("fabric", "os", "verify")}


def test_the_rollout_then_runs_only_those_stages(mtu_change):
    _plan, run = mtu_change
    assert run.code == 0, run.out + run.err
    for site in SITES:
        assert "fabric, os, verify" in run.row(site)


def test_a_host_powered_off_stops_the_line_after_wave_one(stopped, root: Path):
    run, edge_before = stopped
    assert run.code == 1
    assert "rollout stopped: lab failed in fabric" in run.err and VICTIM in run.err
    assert "not started" in run.row("edge") and "rollout: wave edge" not in run.out
    assert applied.load(root, "edge") == edge_before  # the second site untouched


def test_resume_after_power_on_finishes_the_rollout(resumed: Run):
    assert resumed.code == 0, resumed.out + resumed.err
    # lab: what did not finish on every host runs again; edge: its changed stages
    assert "fabric, os, verify" in resumed.row("lab") and " ok" in resumed.row("lab")
    assert "fabric, os, verify" in resumed.row("edge") and " ok" in resumed.row("edge")
