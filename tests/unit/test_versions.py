"""The compatibility matrix (topologies/versions.yaml) and the preflight check that enforces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.checks.platform import platform_versions
from rackform.k8s.versions import conflicts, kubernetes_minor, load_matrix
from rackform.model.source import Loc, SourceError

REPO = Path(__file__).resolve().parents[2]
PINNED = ("gpu_operator", "network_operator", "training_operator", "calico", "multus", "kube_prometheus_stack")


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO)


def test_the_matrix_pins_every_platform_component(matrix):
    assert sorted(matrix.components) == sorted(PINNED)


def test_every_release_names_its_source(matrix):
    unsourced = [f"{c.name} {r.version}" for c in matrix.components.values() for r in c.releases.values()
                 if not r.source.startswith(("doc", "estimate"))]
    assert unsourced == []


def test_every_incompatible_pair_names_its_source(matrix):
    assert matrix.incompatible and all(rule.source.startswith(("doc", "estimate")) for rule in matrix.incompatible)


def test_the_defaults_support_the_default_kubernetes(matrix):
    assert list(conflicts(matrix, matrix.kubernetes_default, matrix.chosen({}))) == []


def test_kubernetes_minor_drops_the_patch():
    assert kubernetes_minor("1.31.4") == "1.31"


def test_an_incompatible_pair_is_refused_with_the_matrix_line(matrix):
    chosen = matrix.chosen({"gpu_operator": "v24.9.1", "network_operator": "24.1.0"})
    found = [c for c in conflicts(matrix, "1.29.0", chosen) if "incompatible" in c.message]
    assert [(c.matrix_loc.path, c.matrix_loc.line > 0) for c in found] == [("topologies/versions.yaml", True)]


def test_an_unsupported_kubernetes_minor_is_refused(matrix):
    found = list(conflicts(matrix, "1.24.0", matrix.chosen({})))
    assert {c.component for c in found} == set(PINNED)


def test_an_unknown_release_is_refused(matrix):
    found = list(conflicts(matrix, "1.31.4", matrix.chosen({"calico": "v9.9.9"})))
    assert [c.message.split(";")[0] for c in found] == ["calico v9.9.9 is not in the matrix"]


def test_a_default_that_is_not_a_release_is_bad_input(tmp_path):
    text = (REPO / "topologies/versions.yaml").read_text().replace("default: v1.8.1", "default: v0.1")
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies/versions.yaml").write_text(text)
    with pytest.raises(SourceError, match=r"versions\.yaml:\d+: components\.training_operator\.default"):
        load_matrix(tmp_path)


# ------------------------------------------------------------------ preflight


def test_the_shipped_lab_passes_the_platform_check(lab_files):
    assert list(platform_versions(lab_files.load())) == []


def test_an_incompatible_pair_chosen_by_the_site_is_refused_at_its_line(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "versions: {}",
                    "versions:\n    gpu_operator: v24.9.1\n    network_operator: 24.1.0")
    findings = [f for f in platform_versions(lab_files.load()) if "incompatible" in f.message]
    assert [str(f.loc) for f in findings] == ["topologies/platform/lab.yaml:6"]


def test_a_kubernetes_version_the_defaults_do_not_support_is_refused_at_its_line(lab_files):
    # The lab takes its version from the matrix default; pin an old one in the site.
    lab_files.edit_site("  control_plane: [mgmt-1", '  version: "1.27.9"\n  control_plane: [mgmt-1')
    site = lab_files.load()
    findings = list(platform_versions(site))
    version_line = Loc(site.kubernetes_loc.path, site.kubernetes_loc.line + 1)
    assert findings and {(f.key, f.loc) for f in findings} == {("kubernetes.version", version_line)}


def test_bad_platform_file_is_a_finding_not_a_traceback(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "network: rdma_shared", "network: infiniband")
    assert [str(f) .split(": error")[0] for f in platform_versions(lab_files.load())] == ["topologies/platform/lab.yaml:4"]
