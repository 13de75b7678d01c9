"""The site mirror in the design (`mirror:`), what the nodes are told (group_vars all/mirror.yml),
the checks on its machine, and the air-gap check on the rendered project.

Upstream host names are taken from rackform.k8s.site_mirror, never spelled out here: the
repo names no public package source outside that one list."""

from __future__ import annotations

import pytest
import yaml

from rackform.checks.airgap import source_of, upstream_findings
from rackform.checks.mirror import mirror_host
from rackform.cli import main
from rackform.k8s.site_mirror import UPSTREAM_HOSTS, UPSTREAM_REGISTRIES, mirror_group_vars
from rackform.model.source import BadInput, Loc
from rackform.pipeline import rendered_findings
from rackform.render.project import render_files

MIRROR = "mirror:\n  host: mgmt-1\n"
UPSTREAM_REGISTRY = UPSTREAM_REGISTRIES[0]


def set_mirror(lab_files, text: str) -> None:
    lab_files.edit_site(MIRROR, f"mirror:\n{text}")


def mirror_line(lab_files, key: str) -> Loc:
    lines = lab_files.read("topologies/sites/lab.yaml").splitlines()
    return Loc("topologies/sites/lab.yaml", next(n for n, line in enumerate(lines, 1) if line.startswith(f"  {key}:")))


# ------------------------------------------------------------------ the design


@pytest.mark.parametrize("body", ["  air_gapped: true\n", "  host: mgmt-1\n  address: 10.10.0.50\n"],
                         ids=["neither", "both"])
def test_the_mirror_is_a_host_or_an_address(lab_files, body):
    set_mirror(lab_files, body)
    with pytest.raises(BadInput) as caught:
        lab_files.load()
    [error] = caught.value.errors
    assert (error.key, "host (a server of the site) or its address" in error.message) == ("mirror", True)
    assert error.loc.path == "topologies/sites/lab.yaml"


def test_air_gapped_is_the_default(lab_site):
    assert (lab_site.mirror.host, lab_site.mirror.address, lab_site.mirror.air_gapped) == ("mgmt-1", None, True)


# ------------------------------------------------------------------ what the nodes are told


def test_the_nodes_are_told_where_the_mirror_serves(lab_site):
    from rackform.mirror.bundle import bundle_path

    told = mirror_group_vars(lab_site)
    assert told.pop("site_mirror_bundle_digest") == "none", "no bundle built in the unit tests' bundles folder"
    assert told == {
        "site_mirror_host": "mgmt-1",
        "site_mirror_address": "10.10.0.11",
        "site_mirror_apt_url": "http://10.10.0.11:8080/apt",
        "site_mirror_charts_url": "http://10.10.0.11:8080/charts",
        "site_mirror_registry": "10.10.0.11:5000",
        "site_mirror_air_gapped": True,
        "site_mirror_bundle": str(bundle_path("1.36.1")),  # the lab's pin
        # rackform serves this mirror: the site's own key and its signature over that bundle
        "site_mirror_apt_key_file": "/var/lib/rackform/mirror/sites/lab/apt-signing-key.asc",
        "site_mirror_apt_signatures": "/var/lib/rackform/mirror/sites/lab/kubernetes-1.36.1",
        "site_mirror_registry_ca_file": "/var/lib/rackform/mirror/sites/lab/registry-ca.crt",
    }


def test_a_mirror_machine_outside_the_design_is_given_by_address(lab_files):
    set_mirror(lab_files, "  address: 10.10.0.50\n")
    values = mirror_group_vars(lab_files.load())
    assert "site_mirror_host" not in values
    assert (values["site_mirror_address"], values["site_mirror_registry"]) == ("10.10.0.50", "10.10.0.50:5000")
    # rackform does not serve it, so it signs nothing for it
    assert [key for key in ("site_mirror_apt_key_file", "site_mirror_apt_signatures", "site_mirror_registry_ca_file")
            if key in values] == []


def test_a_site_that_is_not_air_gapped_sends_the_public_registries_to_its_mirror(lab_files):
    set_mirror(lab_files, "  host: mgmt-1\n  air_gapped: false\n")
    values = mirror_group_vars(lab_files.load())
    assert (values["site_mirror_air_gapped"], values["site_mirror_upstream_registries"]) == (
        False, list(UPSTREAM_REGISTRIES))


def test_an_air_gapped_project_names_no_public_registry(lab_site):
    assert "site_mirror_upstream_registries" not in mirror_group_vars(lab_site)


def test_the_mirror_file_is_rendered_for_every_host(lab_site):
    files = render_files(lab_site)
    text = files["inventory/group_vars/all/mirror.yml"].decode()
    assert text.startswith("# all: the site mirror every node installs packages and images from (design: mirror)\n")
    assert yaml.safe_load(text) == mirror_group_vars(lab_site)


def test_a_site_without_a_mirror_renders_no_mirror_file(lab_files):
    lab_files.edit_site(MIRROR, "")
    assert "inventory/group_vars/all/mirror.yml" not in render_files(lab_files.load())


# ------------------------------------------------------------------ the mirror's machine


def test_the_lab_mirror_is_sound(lab_site):
    assert list(mirror_host(lab_site)) == []


@pytest.mark.parametrize("host, said", [
    ("mgmt-01", "'mgmt-01' is no server of this site (did you mean 'mgmt-1'?)"),
    ("leaf-1", "'leaf-1' is a switch of this site"),
])
def test_the_mirror_host_is_a_server_of_the_site(lab_files, host, said):
    set_mirror(lab_files, f"  host: {host}\n")
    [finding] = mirror_host(lab_files.load())
    assert (finding.key, finding.loc, said in finding.message) == ("mirror.host", mirror_line(lab_files, "host"), True)


def test_a_mirror_address_outside_every_network_is_refused(lab_files):
    set_mirror(lab_files, "  address: 192.168.50.10\n")
    [finding] = mirror_host(lab_files.load())
    assert (finding.key, finding.loc) == ("mirror.address", mirror_line(lab_files, "address"))
    assert "192.168.50.10 is outside every network of the site (mgmt 10.10.0.0/24" in finding.message


def test_a_mirror_address_on_a_network_of_the_site_is_accepted(lab_files):
    set_mirror(lab_files, "  address: 10.10.0.50\n")
    assert list(mirror_host(lab_files.load())) == []


# ------------------------------------------------------------------ the air-gap check


def scan(site, path: str, text: str):
    return upstream_findings(site, {path: text.encode()})


@pytest.mark.parametrize("host", UPSTREAM_HOSTS)
def test_every_public_source_is_refused_with_its_rendered_line(lab_site, host):
    [finding] = scan(lab_site, "inventory/group_vars/all/extra.yml", f"---\nsource: https://{host}/path\n")
    assert (finding.loc, finding.key, f"rendered line names {host}" in finding.message) == (
        Loc("inventory/group_vars/all/extra.yml", 2), "mirror.air_gapped", True)


@pytest.mark.parametrize("text", [f"mirror-of-{UPSTREAM_REGISTRY}", f"{UPSTREAM_REGISTRY}.site.internal",
                                  f"cache.{UPSTREAM_REGISTRY}"])
def test_a_longer_host_name_holding_a_public_one_is_not_refused(lab_site, text):
    assert scan(lab_site, "README.md", f"see {text} here\n") == []


def test_a_public_host_at_the_end_of_a_sentence_is_refused(lab_site):
    assert len(scan(lab_site, "README.md", f"Nodes never pull from {UPSTREAM_REGISTRY}.\n")) == 1


@pytest.mark.parametrize("line, refused", [
    ("    image: busybox:1.36", True),
    ("    - image: org/app:v1", True),
    ("  sidecar: {name: s, image: nginx}", True),
    ("    image: \"10.10.0.11:5000/kube-router:v2.1.0\"", False),
    ("    image: registry.site.internal/team/app:v1", False),
    ("    image: localhost/app:v1", False),
    ("    image: \"{{ some_role_image }}\"", False),
])
def test_an_image_without_a_registry_host_is_refused_in_yaml(lab_site, line, refused):
    assert bool(scan(lab_site, "inventory/group_vars/all/extra.yml", f"---\n{line}\n")) == refused


def test_image_lines_of_prose_are_not_judged(lab_site):
    assert scan(lab_site, "README.md", "image: nginx\n") == []


def test_a_site_that_is_not_air_gapped_is_not_scanned(lab_files):
    set_mirror(lab_files, "  host: mgmt-1\n  air_gapped: false\n")
    assert scan(lab_files.load(), "x.yml", f"image: nginx\nurl: https://{UPSTREAM_REGISTRY}/\n") == []


def test_the_source_of_a_rendered_line_is_named(lab_site):
    assert source_of(lab_site, "collections/ansible_collections/rackform/site/roles/kubeadm/defaults/main.yml") == (
        "rackform's roles/kubeadm/defaults/main.yml")
    assert source_of(lab_site, "inventory/group_vars/k8s_cluster/cni.yml") == "rackform/k8s/cni.py"
    assert source_of(lab_site, "os.yml") == "rackform's templates/playbooks/os.yml.j2"


def test_the_shipped_lab_renders_to_a_project_that_names_no_upstream_address(lab_site):
    assert rendered_findings(lab_site) == []


def test_an_upstream_address_from_the_inventory_is_refused_and_nothing_is_written(lab_files, capsys):
    lab_files.write("inventories/lab/group_vars/k8s_cluster.yml",
                    f"# an operator's extra source\nextra_registry: \"https://{UPSTREAM_REGISTRY}\"\n")
    assert main(["render", "lab", "--root", str(lab_files.root)]) == 2
    err = capsys.readouterr().err
    assert (f"inventory/group_vars/k8s_cluster/inventory.yml:4: error: mirror.air_gapped: rendered line names "
            f"{UPSTREAM_REGISTRY} (from inventories/lab/group_vars/k8s_cluster.yml:2 (extra_registry)); site lab is "
            f"air-gapped (topologies/sites/lab.yaml:") in err
    assert not (lab_files.root / "build").exists()


def test_a_rebuilt_bundle_changes_what_the_nodes_are_told(lab_site, tmp_path, monkeypatch):
    import rackform.mirror.bundle as bundle

    monkeypatch.setattr(bundle, "BUNDLES_DIR", tmp_path)
    assert mirror_group_vars(lab_site)["site_mirror_bundle_digest"] == "none"
    folder = tmp_path / f"kubernetes-{lab_site.kubernetes.version}"
    folder.mkdir()
    (folder / "manifest.json").write_text('{"format": 1}')
    first = mirror_group_vars(lab_site)["site_mirror_bundle_digest"]
    (folder / "manifest.json").write_text('{"format": 1, "changed": true}')
    assert first.startswith("sha256:") and mirror_group_vars(lab_site)["site_mirror_bundle_digest"] != first


# ------------------------------------------------------------------ images by digest

KUBE_ROUTER_DIGEST = "sha256:" + "ab" * 32
KUEUE_DIGEST = "sha256:" + "cd" * 32


@pytest.fixture()
def lab_bundle(tmp_path, monkeypatch):
    """The lab release's bundle "built" here, its manifest listing kube-router and Kueue."""
    import json

    from rackform.mirror import bundle

    folder = bundle.bundle_path("1.36.1", tmp_path)
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"format": 1, "kubernetes": "1.36.1", "artifacts": [
        {"kind": "image", "name": "kube-router", "version": "v2.1.0", "digest": KUBE_ROUTER_DIGEST},
        {"kind": "image", "name": "kueue", "version": "v0.17.0", "digest": KUEUE_DIGEST},
        {"kind": "chart", "name": "kueue", "version": "0.17.0", "digest": "sha256:" + "ef" * 32}]}))
    monkeypatch.setattr(bundle, "BUNDLES_DIR", tmp_path)
    return folder


def test_an_image_the_bundle_carries_is_named_with_its_digest(lab_site, lab_bundle):
    from rackform.k8s.site_mirror import image

    assert image(lab_site, "kube-router", "v2.1.0") == f"10.10.0.11:5000/kube-router:v2.1.0@{KUBE_ROUTER_DIGEST}"


def test_an_image_at_a_tag_the_bundle_lacks_keeps_its_tag_alone(lab_site, lab_bundle):
    from rackform.k8s.site_mirror import image

    assert image(lab_site, "kube-router", "v2.0.0") == "10.10.0.11:5000/kube-router:v2.0.0"
    assert image(lab_site, "kueue-viz", "v0.17.0") == "10.10.0.11:5000/kueue-viz:v0.17.0"


def test_before_the_bundle_is_built_images_are_named_by_tag(lab_site):
    from rackform.k8s.site_mirror import image

    assert image(lab_site, "kube-router", "v2.1.0") == "10.10.0.11:5000/kube-router:v2.1.0"


def test_the_rendered_network_and_kueue_pull_by_the_bundle_s_digests(lab_site, lab_bundle, repo_root):
    from rackform.k8s.cni import cni_group_vars
    from rackform.k8s.manifests import helm_releases
    from rackform.k8s.platform import load_platform
    from rackform.k8s.versions import load_matrix

    manifests = [m for ms in cni_group_vars(lab_site)["kube_cni_manifests"].values() for m in ms]
    (router,) = [m for m in manifests if m["kind"] == "DaemonSet"]
    images = {c["image"] for key in ("initContainers", "containers") for c in router["spec"]["template"]["spec"][key]}
    assert images == {f"10.10.0.11:5000/kube-router:v2.1.0@{KUBE_ROUTER_DIGEST}"}
    (kueue,) = helm_releases(lab_site, load_platform(lab_site), load_matrix(repo_root))
    assert kueue.values["controllerManager"]["manager"]["image"]["tag"] == f"v0.17.0@{KUEUE_DIGEST}"
