"""A tenant removed from the design is kept on the cluster, listed by `plan`, and deleted only
by `deploy --prune-tenant` (rackform.run.retained); the deletion steps the platform runs then."""

from __future__ import annotations

import pytest

from rackform import cli
from rackform.run import applied
from rackform.run.plan import plan_site
from rackform.run.platform_apply import platform_steps
from rackform.run.retained import PruneRefused, check_prune, retained_tenants

REMOVE_INFERENCE = ("    - {name: inference, gpus: 4, borrow: 0, admins: [carol]}\n", "")


def applied_platform(files: dict[str, str], kept: list[str] | None = None) -> applied.AppliedStage:
    return applied.AppliedStage("d", True, "2026-11-26T00:00:00Z", "me@here", "cli", files=files,
                                retained_tenants=kept or [])


def test_a_tenant_applied_before_and_gone_from_the_render_is_retained():
    last = applied_platform({"platform/manifests/tenant-research.yaml": "a", "platform/manifests/tenant-old.yaml": "b"})
    assert retained_tenants(last, ["platform/manifests/tenant-research.yaml"]) == ["old"]


def test_a_retained_tenant_stays_retained_until_pruned():
    last = applied_platform({"platform/manifests/tenant-research.yaml": "a"}, kept=["old"])
    rendered = ["platform/manifests/tenant-research.yaml"]
    assert retained_tenants(last, rendered) == ["old"]
    assert retained_tenants(last, rendered, pruned=["old"]) == []


def test_a_tenant_back_in_the_design_is_no_longer_retained():
    last = applied_platform({}, kept=["old"])
    assert retained_tenants(last, ["platform/manifests/tenant-old.yaml"]) == []


def test_pruning_a_tenant_still_in_the_design_is_refused():
    with pytest.raises(PruneRefused, match="research: not a tenant removed from topologies/platform/lab.yaml"):
        check_prune(["research"], ["old"], "lab")


def test_prune_steps_delete_the_queue_then_the_namespace(tmp_path):
    from rackform.render.project import render_files
    from rackform.model.loader import load_site
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    for path, content in render_files(load_site("lab", repo)).items():
        if path.startswith("platform/"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(content)
    steps = platform_steps(tmp_path, "kubectl", "helm", prune_tenants=["old"])
    assert [step.task for step in steps][-2:] == ["delete tenant old's queue", "delete tenant old's namespace"]
    assert steps[-1].argv[:4] == ("kubectl", "delete", "namespace", "old")
    assert [step.task for step in platform_steps(tmp_path, "kubectl", "helm")][-1] == "kubectl apply -k after-releases"


def test_plan_lists_a_removed_tenant_and_the_command_that_deletes_it(fleet_root, capsys):
    from rackform.render.project import render_files
    from rackform.model.loader import load_site
    from rackform.pipeline import stage_fingerprints

    digest, inputs = stage_fingerprints(render_files(load_site("lab", fleet_root)))["platform"]
    applied.record(fleet_root, "lab", "platform", applied.AppliedStage(
        digest, True, "2026-11-26T00:00:00Z", "me@here", "cli", files=inputs))
    path = fleet_root / "topologies/platform/lab.yaml"
    path.write_text(path.read_text().replace(*REMOVE_INFERENCE))
    assert plan_site("lab", fleet_root).retained_tenants == ["inference"]
    assert cli.main(["plan", "lab", "--root", str(fleet_root)]) == 0
    out = capsys.readouterr().out
    assert "tenant inference: removed from the design" in out
    assert "rackform deploy lab --stage platform --prune-tenant inference" in out


def test_deploy_refuses_to_prune_a_tenant_of_the_design_before_running_anything(fleet_root, capsys):
    code = cli.main(["deploy", "lab", "--root", str(fleet_root), "--stage", "platform", "--prune-tenant", "research"])
    assert code == 2
    assert "research: not a tenant removed from" in capsys.readouterr().err
    assert not (fleet_root / "build").exists() and not (fleet_root / "state").exists()
