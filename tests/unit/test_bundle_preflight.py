"""A deploy whose stages serve the site mirror is refused before anything changes when the
mirror's bundle was never built on this controller (rackform.run.bundle_preflight); where it
was, its apt repository is signed with the site's own key before the stage runs.

The playbook runs are replaced (no hosts here): what is under test is that nothing runs,
nothing is rendered and the refusal names the command that builds the bundle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rackform.run.deploy as deploy_module
from rackform import cli
from rackform.k8s.site_mirror import bundle_manifest, missing_bundle
from rackform.model.source import BadInput
from rackform.pipeline import load_and_check
from rackform.render.project import render_files
from rackform.run import applied
from rackform.run.ansible import HostStats, RunResult
from rackform.run.bundle_preflight import check_bundle, serves_mirror
from rackform.run.stages import run_stages


@pytest.fixture()
def no_bundles(tmp_path: Path, monkeypatch) -> Path:
    """A controller that never ran `rackform mirror build`: an empty bundles folder."""
    from rackform.mirror import bundle

    bundles = tmp_path / "bundles"
    bundles.mkdir()
    monkeypatch.setattr(bundle, "BUNDLES_DIR", bundles)
    return bundles


@pytest.fixture()
def runs(monkeypatch, tmp_path: Path) -> list[str]:
    """The playbooks that ran (each ok on one host); no lab up, state under the test's folder
    (where site_root and fleet_root copy the sites)."""
    calls: list[str] = []

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        calls.append(playbook)
        return RunResult(playbook, "successful", 0, {"mgmt-1": HostStats(ok=1)})

    monkeypatch.setattr(deploy_module, "run_playbook", run_playbook)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    monkeypatch.setenv(applied.STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return calls


def test_a_deploy_without_the_bundle_is_refused_before_anything_runs(site_root: Path, no_bundles, runs, capsys):
    assert cli.main(["deploy", "lab", "--root", str(site_root)]) == 2
    err = capsys.readouterr().err
    manifest = no_bundles / "kubernetes-1.36.1" / "manifest.json"
    assert (f"topologies/sites/lab.yaml:78: mirror.host: the site mirror's bundle of Kubernetes 1.36.1 was never "
            f"built on this machine ({manifest} is missing), and os.yml serves it to the nodes from here: build it "
            f"first with `rackform mirror build lab --root {site_root}`") in err
    assert "nothing was changed" in err
    assert runs == [] and not (site_root / "build").exists() and not (site_root / "state").exists()


def test_check_mode_is_refused_too(site_root: Path, no_bundles, runs):
    """The site_mirror role asserts its bundle in check mode as well."""
    with pytest.raises(BadInput, match="rackform mirror build lab"):
        run_stages("lab", site_root, check=True)
    assert runs == []


@pytest.mark.parametrize("stages", [["provision"], ["fabric"], ["kubernetes", "verify"]])
def test_stages_that_do_not_serve_the_mirror_run_without_it(site_root: Path, no_bundles, runs, stages):
    run_stages("lab", site_root, stages)
    assert runs == ["validate.yml", *(f"{stage}.yml" for stage in stages)]


def test_a_built_bundle_lets_the_os_stage_run(site_root: Path, built_bundles, runs):
    run_stages("lab", site_root, ["os"])
    assert runs == ["validate.yml", "os.yml"]


@pytest.fixture()
def bundle_with_packages(built_bundles: Path, tmp_path: Path, monkeypatch) -> Path:
    """The lab's bundle (1.36.1) with a real apt repository; the site's keys under the test's folder."""
    import shutil

    from rackform.mirror import apt_repo, debs, site_keys

    if not all(shutil.which(tool) for tool in ("gpg", "gpgv", "dpkg-deb", "openssl")):
        pytest.skip("needs gpg, gpgv, dpkg-deb and openssl")
    bundle = built_bundles / "kubernetes-1.36.1"
    debs.build(debs.DebSpec("rackform-probe", "1.0-1", "probe\nA test package.", {"/etc/probe": "probe\n"}),
               bundle / "apt")
    apt_repo.write_indexes(bundle / "apt")
    monkeypatch.setattr(site_keys, "SITES_DIR", tmp_path / "sites")
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    return bundle


def test_a_deploy_makes_the_sites_mirror_keys_before_the_os_stage_and_gives_the_run_the_hosts_vault(
        site_root: Path, bundle_with_packages: Path, runs, tmp_path: Path, monkeypatch):
    from rackform.mirror import apt_signing, site_keys
    from rackform.secrets import SiteVault

    given: dict[str, str] = {}
    real_run = deploy_module.run_playbook

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        given.update(options.get("envvars") or {})
        return real_run(project_dir, playbook, **options)

    monkeypatch.setattr(deploy_module, "run_playbook", run_playbook)
    run_stages("lab", site_root, ["os"])
    signatures = tmp_path / "sites" / "lab" / "kubernetes-1.36.1"
    vault = SiteVault("lab")
    key = site_keys.ensure_apt_key(vault)
    assert apt_signing.verify_release(bundle_with_packages / "apt" / "Release", signatures, key.public) == []
    assert (tmp_path / "sites" / "lab" / "apt-signing-key.asc").read_text() == key.public
    registry = site_keys.ensure_registry(vault, "10.10.0.11", ("mgmt-1",))
    assert (tmp_path / "sites" / "lab" / "registry-ca.crt").read_text() == registry.ca.cert
    told = (site_root / "build" / "lab" / "inventory" / "group_vars" / "all" / "mirror.yml").read_text()
    assert f"site_mirror_apt_signatures: \"{signatures}\"" in told, told
    assert runs == ["validate.yml", "os.yml"]
    # the run can read the mirror host's vault file, and nothing secret is in its environment
    assert (given["RACKFORM_MIRROR_HOST_VAULT"], given["ANSIBLE_VAULT_PASSWORD_FILE"]) == (
        str(vault.directory / "mirror_host_vault.yml"), str(vault.password_file))
    assert registry.push_password not in str(given)


def test_stages_that_do_not_use_the_mirror_make_no_mirror_keys(site_root: Path, bundle_with_packages: Path, runs,
                                                               tmp_path: Path):
    run_stages("lab", site_root, ["provision", "fabric"])
    assert not (tmp_path / "sites").exists() and not (tmp_path / "secrets" / "lab" / "mirror_vault.yml").exists()


def test_the_kubernetes_stage_gets_the_sites_ca_for_containerd(site_root: Path, bundle_with_packages: Path, runs,
                                                               tmp_path: Path):
    run_stages("lab", site_root, ["kubernetes"])
    assert (tmp_path / "sites" / "lab" / "registry-ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")


def test_a_vault_that_cannot_be_opened_stops_the_deploy_before_anything_runs(
        site_root: Path, bundle_with_packages: Path, runs, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("RACKFORM_VAULT_PASSWORD_FILE", str(tmp_path / "no-such-password"))
    assert cli.main(["deploy", "lab", "--root", str(site_root), "--stage", "os"]) == 1
    assert "the site mirror's keys cannot be made or read: no vault password file" in capsys.readouterr().err
    assert runs == []


def test_the_refusal_reads_the_bundle_as_the_role_does(lab_site, no_bundles):
    """One fact: the manifest.json the site_mirror role asserts is a file."""
    manifest = bundle_manifest("1.36.1")
    assert missing_bundle(lab_site) == manifest == no_bundles / "kubernetes-1.36.1" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text("{}")
    assert missing_bundle(lab_site) is None


def test_a_mirror_the_site_does_not_serve_needs_no_bundle_here(lab_files, no_bundles):
    """`mirror.address` alone: a machine outside the design serves it; no play of the site's does."""
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "mirror:\n  address: 10.10.0.11\n")
    site, _warnings = load_and_check("lab", lab_files.root)
    assert missing_bundle(site) is None
    check_bundle(site, lab_files.root, render_files(site), ["os.yml"])


@pytest.fixture(scope="module")
def lab_render(repo_root: Path) -> dict[str, bytes]:
    site, _warnings = load_and_check("lab", repo_root)
    return render_files(site)


@pytest.mark.parametrize(("playbook", "serves"), [
    ("os.yml", True), ("upgrade-cluster.yml", True), ("kubernetes.yml", False), ("provision.yml", False),
    ("verify.yml", False),
])
def test_which_rendered_playbooks_serve_the_mirror(lab_render, playbook: str, serves: bool):
    assert serves_mirror(lab_render[playbook]) is serves


def test_an_upgrade_without_the_targets_bundle_is_refused_before_the_pin(fleet_root: Path, runs, capsys):
    """A cluster is there (a fetched kubeconfig), the site's own bundle too, not the target's."""
    from rackform.mirror import bundle

    kubeconfig = fleet_root / "build" / "lab" / "artifacts" / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    target = bundle.bundle_path("1.36.3")
    (target / "manifest.json").unlink()
    before = (fleet_root / "topologies/sites/lab.yaml").read_text()
    assert cli.main(["upgrade", "lab", "--root", str(fleet_root), "--to", "1.36.3"]) == 2
    assert (f"mirror.host: the site mirror's bundle of Kubernetes 1.36.3 was never built on this machine "
            f"({target / 'manifest.json'} is missing), and upgrade-cluster.yml serves it to the nodes from here: "
            f"build it first with `rackform mirror build --kubernetes 1.36.3 --root {fleet_root}`"
            ) in capsys.readouterr().err
    assert runs == [] and (fleet_root / "topologies/sites/lab.yaml").read_text() == before
