"""The compatibility matrix (topologies/versions.yaml), the releases the site mirror carries,
and the preflight checks that enforce them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.checks.mirror import mirror_carries_release
from rackform.checks.platform import platform_versions
from rackform.k8s.versions import conflicts, kubernetes_minor, load_matrix
from rackform.model.source import Loc, SourceError

REPO = Path(__file__).resolve().parents[2]
PINNED = ("gpu_operator", "network_operator", "training_operator", "calico", "multus", "kube_prometheus_stack",
          "kueue")


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
    assert kubernetes_minor("1.36.3") == "1.36"


def test_the_default_is_a_current_minor_the_mirror_carries(matrix):
    assert (matrix.kubernetes_default, list(matrix.carried)) == ("1.36.3", ["1.36.3", "1.36.1"])


@pytest.mark.parametrize("release", ["1.36.3", "1.36.1"])
def test_a_carried_release_pins_what_kubeadm_of_its_minor_pins_and_the_cni(matrix, release):
    carried = matrix.carried[release]
    assert carried.image_tags() == {
        "kube-apiserver": f"v{release}", "kube-controller-manager": f"v{release}", "kube-scheduler": f"v{release}",
        "kube-proxy": f"v{release}", "etcd": "3.6.8-0", "coredns": "v1.14.2", "pause": "3.10.2",
        "kube-router": "v2.1.0", "kueue": "v0.17.0"}
    assert carried.package_versions() == {"kubeadm": release, "kubelet": release, "kubectl": release,
                                          "kubernetes-cni": "1.10.0"}
    assert {name: pinned.version for name, pinned in carried.charts.items()} == {"kueue": "0.17.0"}


def test_every_carried_fact_names_its_source(matrix):
    facts = [(f"{c.version}", c.source) for c in matrix.carried.values()]
    facts += [(f"{c.version} {p.name}", p.source) for c in matrix.carried.values()
              for p in (*c.images.values(), *c.packages.values(), *c.charts.values())]
    assert [name for name, source in facts if not source.startswith(("doc:", "estimate:", "source:"))] == []


def test_the_kubeadm_pins_of_the_default_release_come_from_kubeadm_itself(matrix):
    pins = matrix.carried[matrix.kubernetes_default].images
    assert {name: pins[name].source for name in ("etcd", "coredns", "pause")} == {
        name: f"source: kubeadm v1.36.3 cmd/kubeadm/app/constants ({constant})"
        for name, constant in (("etcd", "DefaultEtcdVersion"), ("coredns", "CoreDNSVersion"), ("pause", "PauseVersion"))}


def test_a_carried_release_without_a_source_is_bad_input(tmp_path):
    text = (REPO / "topologies/versions.yaml").read_text().replace(
        "pause: {tag: 3.10.2, source: \"source: kubeadm v1.36.3 cmd/kubeadm/app/constants (PauseVersion)\"}",
        "pause: {tag: 3.10.2}")
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies/versions.yaml").write_text(text)
    with pytest.raises(SourceError, match=r"versions\.yaml:\d+: kubernetes\.carried\.1\.36\.3\.images\.pause"):
        load_matrix(tmp_path)


def test_an_unquoted_carried_release_is_bad_input(tmp_path):
    text = (REPO / "topologies/versions.yaml").read_text().replace('    "1.36.1":', "    1.36:")
    (tmp_path / "topologies").mkdir()
    (tmp_path / "topologies/versions.yaml").write_text(text)
    with pytest.raises(SourceError, match="expected a Kubernetes release"):
        load_matrix(tmp_path)


def test_an_incompatible_pair_is_refused_with_the_matrix_line(matrix):
    chosen = matrix.chosen({"gpu_operator": "v24.9.1", "network_operator": "24.1.0"})
    found = [c for c in conflicts(matrix, "1.29.0", chosen) if "incompatible" in c.message]
    assert [(c.matrix_loc.path, c.matrix_loc.line > 0) for c in found] == [("topologies/versions.yaml", True)]


def test_an_unsupported_kubernetes_minor_is_refused(matrix):
    found = list(conflicts(matrix, "1.24.0", matrix.chosen({})))
    assert {c.component for c in found} == set(PINNED)


def test_an_unknown_release_is_refused(matrix):
    found = list(conflicts(matrix, "1.36.3", matrix.chosen({"calico": "v9.9.9"})))
    assert [c.message.split(";")[0] for c in found] == ["calico v9.9.9 is not in the matrix"]


def test_a_default_that_is_not_a_release_is_bad_input(tmp_path):
    text = (REPO / "topologies/versions.yaml").read_text().replace("default: v1.9.0", "default: v0.1")
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


def version_line(lab_files, version: str) -> Loc:
    """Where the lab's site file pins `version`."""
    lines = lab_files.read("topologies/sites/lab.yaml").splitlines()
    return Loc("topologies/sites/lab.yaml", lines.index(f'  version: "{version}"') + 1)


def test_a_kubernetes_version_the_defaults_do_not_support_is_refused_at_its_line(lab_files):
    lab_files.pin_lab_kubernetes("1.27.9")
    findings = list(platform_versions(lab_files.load()))
    assert findings and {(f.key, f.loc) for f in findings} == {("kubernetes.version", version_line(lab_files, "1.27.9"))}


def test_bad_platform_file_is_a_finding_not_a_traceback(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "network: rdma_shared", "network: infiniband")
    assert [str(f) .split(": error")[0] for f in platform_versions(lab_files.load())] == ["topologies/platform/lab.yaml:4"]


def test_the_shipped_lab_pins_a_release_its_mirror_carries(lab_files):
    assert list(mirror_carries_release(lab_files.load())) == []


def test_a_release_the_mirror_does_not_carry_is_refused_at_the_line_that_pins_it(lab_files):
    lab_files.pin_lab_kubernetes("1.36.2")
    findings = list(mirror_carries_release(lab_files.load()))
    assert [(f.key, f.loc) for f in findings] == [("kubernetes.version", version_line(lab_files, "1.36.2"))]
    assert "1.36.2 is not a release the site mirror carries; it carries 1.36.3, 1.36.1" in findings[0].message


def test_a_site_without_a_mirror_may_pin_any_release(lab_files):
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    lab_files.pin_lab_kubernetes("1.35.2")
    site = lab_files.load()
    assert site.mirror is None and list(mirror_carries_release(site)) == []
