"""`rackform render` writes the platform under platform/: the files carry exactly the objects
and Helm releases the Pulumi GpuPlatform is built from, every object validates strictly for
the site's Kubernetes version, kustomize (the real kubectl, where installed) builds the
manifests folder, and the platform stage's digest covers platform/** and nothing else."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml
from platform_validation import problems

from rackform.installed_tools import find_tool, not_found
from rackform.k8s.manifests import helm_releases, platform_manifests
from rackform.k8s.platform import load_platform
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.digest import stage_digest, stage_files
from rackform.render.platform_files import platform_files, release_record

REPO = Path(__file__).resolve().parents[2]
KUBECTL = find_tool("kubectl")
"""Beside rackform (the set-up's), else on PATH: its built-in kustomize needs no cluster."""
SITES = ("lab", "reference", "campus")


@pytest.fixture(scope="module")
def lab_files_rendered() -> dict[str, bytes]:
    return render_files(load_site("lab", REPO))


@pytest.fixture(scope="module")
def full_lab_platform(tmp_path_factory, make_site_files) -> dict[str, bytes]:
    """The lab's platform with every release (the shipped lab installs Kueue only: `releases: [kueue]`)."""
    site_files = make_site_files(tmp_path_factory.mktemp("full-lab"))
    site_files.edit("topologies/platform/lab.yaml", "  releases: [kueue]\n", "")
    return platform_files(site_files.load())


def manifest_paths(files: dict[str, bytes]) -> list[str]:
    """The manifest files in kustomization order."""
    kustomization = yaml.safe_load(files["platform/manifests/kustomization.yaml"])
    return [f"platform/manifests/{name}" for name in kustomization["resources"]]


def rendered_objects(files: dict[str, bytes]) -> list[dict]:
    return [obj for path in manifest_paths(files) for obj in yaml.safe_load_all(files[path]) if obj]


def test_render_writes_the_platform_into_the_project(lab_files_rendered):
    platform = sorted(path for path in lab_files_rendered if path.startswith("platform/"))
    assert platform == sorted(platform_files(load_site("lab", REPO)))
    assert {"platform/manifests/kustomization.yaml", "platform/helm/releases.yaml",
            "platform/helm/kueue/release.yaml", "platform/helm/kueue/values.yaml",
            "platform/manifests/tenant-research.yaml",
            "platform/after-releases/kustomization.yaml", "platform/after-releases/queues.yaml"} <= set(platform)
    assert yaml.safe_load(lab_files_rendered["platform/helm/releases.yaml"])["releases"] == ["kueue"]


def test_a_full_site_renders_every_release_and_its_alert_rules(full_lab_platform):
    assert yaml.safe_load(full_lab_platform["platform/helm/releases.yaml"])["releases"] == [
        "kube-prometheus-stack", "network-operator", "gpu-operator", "training-operator", "kueue"]
    after = yaml.safe_load(full_lab_platform["platform/after-releases/kustomization.yaml"])["resources"]
    assert set(after) == {"queues.yaml", "prometheusrules.yaml"}


def test_kustomization_lists_every_manifest_file_once(lab_files_rendered):
    on_disk = sorted(p for p in lab_files_rendered if p.startswith("platform/manifests/") and
                     not p.endswith("kustomization.yaml"))
    assert sorted(manifest_paths(lab_files_rendered)) == on_disk


@pytest.mark.parametrize("site_name", SITES)
def test_rendered_objects_are_exactly_what_pulumi_creates(site_name):
    site = load_site(site_name, REPO)
    expected = platform_manifests(site, load_platform(site), load_matrix(REPO))
    assert rendered_objects(platform_files(site)) == expected


@pytest.mark.parametrize("site_name", SITES)
def test_every_rendered_object_validates_strictly_for_the_site_version(site_name):
    site = load_site(site_name, REPO)
    objects = rendered_objects(platform_files(site))
    assert objects and [p for obj in objects for p in problems(obj, site.kubernetes.version)] == []


def test_release_and_values_files_are_the_helm_release_data(lab_files_rendered):
    site = load_site("lab", REPO)
    releases = helm_releases(site, load_platform(site), load_matrix(REPO))
    index = yaml.safe_load(lab_files_rendered["platform/helm/releases.yaml"])["releases"]
    assert index == [r.name for r in releases]
    for release in releases:
        base = f"platform/helm/{release.name}"
        assert yaml.safe_load(lab_files_rendered[f"{base}/release.yaml"]) == release_record(release)
        assert yaml.safe_load(lab_files_rendered[f"{base}/values.yaml"]) == release.values


def test_a_release_file_pins_chart_repository_version_and_namespace(full_lab_platform):
    record = yaml.safe_load(full_lab_platform["platform/helm/gpu-operator/release.yaml"])
    assert {k: record[k] for k in ("name", "chart", "version", "namespace", "needs")} == {
        "name": "gpu-operator", "chart": "gpu-operator", "version": "v25.3.0", "namespace": "gpu-operator",
        "needs": ["kube-prometheus-stack", "network-operator"]}
    assert record["repository"].endswith("/nvidia")


def test_the_lab_s_kueue_release_comes_from_its_site_mirror(lab_files_rendered):
    record = yaml.safe_load(lab_files_rendered["platform/helm/kueue/release.yaml"])
    assert {k: record[k] for k in ("name", "chart", "repository", "version", "namespace", "needs")} == {
        "name": "kueue", "chart": "kueue", "repository": "http://10.10.0.11:8080/charts", "version": "0.17.0",
        "namespace": "kueue-system", "needs": []}


@pytest.mark.skipif(KUBECTL is None, reason=f"needs kubectl (its kustomize): {not_found(['kubectl'])}")
def test_kubectl_kustomize_builds_the_manifests_folder(lab_files_rendered, tmp_path):
    """The real kubectl (its built-in kustomize, no cluster needed) reads what GitOps tools read."""
    for path, content in lab_files_rendered.items():
        if path.startswith("platform/"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_bytes(content)
    built = subprocess.run([KUBECTL, "kustomize", str(tmp_path / "platform/manifests")],
                           capture_output=True, text=True, timeout=120, check=True)
    keys = sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
                  for o in yaml.safe_load_all(built.stdout) if o)
    assert keys == sorted((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
                          for o in rendered_objects(lab_files_rendered))


def test_rendering_twice_gives_the_same_bytes():
    site = load_site("lab", REPO)
    assert platform_files(site) == platform_files(site)


def test_a_site_without_kubernetes_has_no_platform():
    site = dataclasses.replace(load_site("lab", REPO), kubernetes=None)
    assert platform_files(site) == {}


# ------------------------------------------------------------------ digest


def test_the_platform_digest_covers_platform_files_only(lab_files_rendered):
    assert stage_files(lab_files_rendered, "platform") == sorted(
        p for p in lab_files_rendered if p.startswith("platform/"))


def test_a_values_change_moves_the_platform_digest_and_no_other(lab_files_rendered):
    changed = dict(lab_files_rendered)
    changed["platform/helm/kueue/values.yaml"] += b"# changed\n"
    moved = [stage for stage in ("fabric", "os", "kubernetes", "platform", "verify")
             if stage_digest(changed, stage) != stage_digest(lab_files_rendered, stage)]
    assert moved == ["platform"]


def test_an_inventory_change_leaves_the_platform_digest_alone(lab_files_rendered):
    changed = dict(lab_files_rendered)
    changed["inventory/hosts.yml"] += b"# changed\n"
    assert stage_digest(changed, "platform") == stage_digest(lab_files_rendered, "platform")
    assert stage_digest(changed, "kubernetes") != stage_digest(lab_files_rendered, "kubernetes")


@pytest.mark.parametrize("site_name", SITES)
def test_no_rendered_line_is_longer_than_ansible_lint_allows(site_name, full_lab_platform):
    """The project is linted as a whole (test_emitted_project.py, slow): yamllint's 160 characters,
    the alert rules' long expressions and runbooks included (kube-prometheus-stack: not the shipped lab)."""
    files = full_lab_platform if site_name == "lab" else platform_files(load_site(site_name, REPO))
    assert "platform/after-releases/prometheusrules.yaml" in files or site_name != "reference"
    long_lines = [f"{path}:{number}" for path, content in files.items() if path.startswith("platform/")
                  for number, line in enumerate(content.decode().splitlines(), 1) if len(line) > 160]
    assert long_lines == []
