"""The `Playbook` provider running the `platform` stage, called directly (Pulumi's mocks never
call providers): the one apply `rackform deploy --stage platform` runs, recorded the same way.

kubectl and helm are STAND-INS (scripts first on PATH that record their arguments and fail
when told to), as in test_platform_apply.py: nothing here reaches a Kubernetes API server.
The render, the stage runner, the applied-state record and the digests are real.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.stages import stage_digests  # noqa: E402
from providers.playbook import PlaybookProvider, StageFailed  # noqa: E402

import rackform.run.deploy  # noqa: E402
import rackform.run.stage_process  # noqa: E402
from rackform.pipeline import load_and_check  # noqa: E402
from rackform.run import applied  # noqa: E402
from rackform.run.ansible import HostStats, RunResult  # noqa: E402
from rackform.run.stages import run_stages  # noqa: E402

# Told what to do by a file beside the kubeconfig: only $KUBECONFIG and the allowed names of the
# test's environment reach kubectl and helm (rackform.process_environment).
STAND_IN = f"""#!{sys.executable}
import json, os, sys
settings = json.load(open(os.path.join(os.path.dirname(os.environ["KUBECONFIG"]), "stand-in.json")))
with open(settings["record"], "a") as record:
    record.write(json.dumps({{"tool": os.path.basename(sys.argv[0]), "argv": sys.argv[1:]}}) + "\\n")
fail = settings.get("fail")
if fail and fail in sys.argv:
    sys.stderr.write("Error: UPGRADE FAILED: context deadline exceeded\\n")
    sys.exit(3)
"""


class Tools:
    def __init__(self, root: Path, kubeconfig: Path):
        self.record = root / "record.jsonl"
        self.settings = kubeconfig.parent / "stand-in.json"
        self.set()

    def set(self, **settings: str) -> None:
        """How the stand-ins behave: fail= (a release)."""
        self.settings.write_text(json.dumps({"record": str(self.record), **settings}))

    def calls(self) -> list[tuple[str, list[str]]]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return [(call["tool"], call["argv"][:2]) for call in map(json.loads, lines)]


@pytest.fixture()
def tools(site_root: Path, monkeypatch, tools_beside_rackform) -> Tools:
    """Stand-in kubectl and helm on PATH (nothing beside rackform: not the venv's real helm), a
    fetched kubeconfig, validate.yml replaced (no hosts here)."""
    tools_beside_rackform()
    bin_dir = site_root / "bin"
    bin_dir.mkdir()
    for tool in ("kubectl", "helm"):
        (bin_dir / tool).write_text(STAND_IN)
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv(applied.STATE_DIR_ENV, str(site_root / "state"))
    kubeconfig = site_root / "build" / "lab" / "artifacts" / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        assert playbook == "validate.yml", f"the platform stage ran a playbook: {playbook}"
        return RunResult(playbook=playbook, status="successful", rc=0, hosts={"mgmt-1": HostStats(ok=1)})

    def in_this_process(site, root, stage, *, envvars, left_out, via, cancel_requested):
        """The stage run here, where the stand-ins above reach it (the provider's own fresh process
        is tested with a real run in tests/unit/test_pulumi_cancel.py)."""
        return run_stages(site, root, [stage], envvars=envvars, left_out=left_out, via=via)

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    monkeypatch.setattr(rackform.run.stage_process, "run_stage_in_fresh_process", in_this_process)
    return Tools(site_root, kubeconfig)


def platform_props(root: Path) -> dict:
    site, _ = load_and_check("lab", root)
    return {"site": "lab", "stage": "platform", "root": str(root), "digest": stage_digests(site)["platform"]}


def test_check_accepts_the_platform_stage():
    props = {"site": "lab", "stage": "platform", "root": "/srv/rackform", "digest": "sha256:aaa"}
    assert PlaybookProvider().check({}, props).failures == []


def test_check_still_refuses_a_stage_the_runner_does_not_run():
    props = {"site": "lab", "stage": "deploy", "root": "/srv/rackform", "digest": "sha256:aaa"}
    assert [f.property for f in PlaybookProvider().check({}, props).failures] == ["stage"]


def test_create_applies_the_rendered_platform_with_kubectl_and_helm(site_root: Path, tools: Tools):
    created = PlaybookProvider().create(platform_props(site_root))
    assert created.id == "lab/platform"
    # (helm list: the release is not there yet, so it is installed)
    assert tools.calls() == [("kubectl", ["apply", "--server-side"]), ("helm", ["list", "--namespace"]),
                             ("helm", ["upgrade", "kueue"]), ("kubectl", ["apply", "--server-side"])]


def test_create_records_the_platform_stage_as_deploy_does(site_root: Path, tools: Tools):
    """What makes `rackform plan` see the platform applied after a `pulumi up`."""
    props = platform_props(site_root)
    created = PlaybookProvider().create(props)
    recorded = applied.load(site_root, "lab")["platform"]
    assert (recorded.digest, recorded.via, recorded.complete) == (props["digest"], "pulumi", True)
    assert created.outs["digest"] == props["digest"]
    assert PlaybookProvider().diff(created.id, created.outs, props).changes is False


def test_the_cli_records_the_same_digest(site_root: Path, tools: Tools):
    props = platform_props(site_root)
    run_stages("lab", site_root, ["platform"])
    assert applied.load(site_root, "lab")["platform"].digest == props["digest"]


def test_a_failed_helm_release_fails_the_resource(site_root: Path, tools: Tools):
    """The platform acts on the cluster, not on hosts: a failed command is the stage not run to
    its end, never a host left out with a warning."""
    tools.set(fail="kueue")
    with pytest.raises(StageFailed) as failed:
        PlaybookProvider().create(platform_props(site_root))
    assert "stage 'platform' of site 'lab' failed" in str(failed.value)
    assert "helm upgrade --install kueue" in str(failed.value)
    assert applied.load(site_root, "lab")["platform"].complete is False


def test_without_a_kubeconfig_the_resource_fails_saying_why(site_root: Path, tools: Tools):
    (site_root / "build" / "lab" / "artifacts" / "kubeconfig").unlink()
    with pytest.raises(StageFailed, match="not run: no kubeconfig for site lab"):
        PlaybookProvider().create(platform_props(site_root))
    assert tools.calls() == []
