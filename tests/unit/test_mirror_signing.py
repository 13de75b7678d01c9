"""The site mirror's apt repository, signed with the site's own key, checked the way a node
checks it: a real bundle's apt/ (dpkg-deb, rackform's indexes), the site's key made and kept
in a vault of its own (rackform.mirror.site_keys), the Release signed with gpg, then `gpgv`
and apt itself (`apt-get update` with `signed-by=`, no root state touched) reading what the
mirror would serve. A tampered Packages, a tampered Release and another site's key are each
refused."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rackform.mirror import apt_repo, apt_signing, debs, site_keys
from rackform.secrets import SiteVault

pytestmark = pytest.mark.skipif(not all(shutil.which(tool) for tool in ("gpg", "gpgv", "dpkg-deb", "apt-get", "openssl")),
                                reason="needs gpg, gpgv, dpkg-deb, apt-get and openssl")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A bundle holding a flat apt repository of one package, as `rackform mirror build` writes it."""
    bundle = tmp_path_factory.mktemp("bundle")
    debs.build(debs.DebSpec("rackform-probe", "1.0-1", "probe\nA test package.",
                            {"/usr/share/rackform-probe/probe.txt": "signed\n"}), bundle / "apt")
    apt_repo.write_indexes(bundle / "apt")
    return bundle


def vault_of(tmp_path: Path, site: str = "lab") -> SiteVault:
    return SiteVault(site, tmp_path / "secrets", environ={})


def served(bundle: Path, signatures: Path, where: Path) -> Path:
    """What the site_mirror role puts in <root>/apt/: the bundle's apt/ and the site's signature."""
    shutil.copytree(bundle / "apt", where)
    for name in apt_signing.SIGNED_FILES:
        shutil.copy2(signatures / name, where / name)
    return where


def apt_update(repo: Path, keyring: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """`apt-get update` of `repo` alone, as a node's mirror_client runs it, with its own state."""
    state = tmp_path / "apt-state"
    shutil.rmtree(state, ignore_errors=True)
    for folder in ("lists/partial", "cache/archives/partial", "etc/preferences.d", "etc/apt.conf.d"):
        (state / folder).mkdir(parents=True)
    (state / "etc/sources.list").write_text(f"deb [signed-by={keyring}] file:{repo} ./\n")
    options = ["-o", f"Dir::Etc::sourcelist={state / 'etc/sources.list'}", "-o", "Dir::Etc::sourceparts=-",
               "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
               "-o", f"Dir::Etc::preferencesparts={state / 'etc/preferences.d'}", "-o", "Dir::State::status=/dev/null",
               "-o", f"Dir::Etc::trustedparts={state / 'etc/trusted.gpg.d'}",
               "-o", f"Dir::Etc::trusted={state / 'etc/trusted.gpg'}"]
    return subprocess.run(["apt-get", *options, "--error-on=any", "update"], capture_output=True, text=True)


@pytest.fixture()
def signed(bundle, tmp_path):
    vault = vault_of(tmp_path)
    signatures = site_keys.prepare_apt(vault, bundle, "1.36.3", sites_dir=tmp_path / "sites")
    return vault, signatures


def test_the_key_is_kept_in_the_sites_vault_encrypted_and_only_its_public_half_beside(signed, tmp_path):
    vault, signatures = signed
    key = site_keys.ensure_apt_key(vault)
    vault_file = vault.directory / site_keys.VAULT_FILE
    assert vault_file.read_text().startswith("$ANSIBLE_VAULT;") and vault_file.stat().st_mode & 0o777 == 0o600
    public = site_keys.apt_key_file("lab", tmp_path / "sites")
    assert public.read_text() == key.public and "PRIVATE KEY" not in public.read_text()
    on_disk = b"".join(path.read_bytes() for path in (tmp_path / "sites").rglob("*") if path.is_file())
    assert b"PRIVATE KEY" not in on_disk and key.private.encode() not in on_disk
    assert signatures == tmp_path / "sites" / "lab" / "kubernetes-1.36.3"


def test_a_second_prepare_keeps_the_key_and_the_signature(signed, bundle, tmp_path):
    vault, signatures = signed
    before = {name: (signatures / name).read_bytes() for name in apt_signing.SIGNED_FILES}
    key = site_keys.ensure_apt_key(vault)
    site_keys.prepare_apt(vault, bundle, "1.36.3", sites_dir=tmp_path / "sites")
    assert {name: (signatures / name).read_bytes() for name in apt_signing.SIGNED_FILES} == before
    assert site_keys.ensure_apt_key(vault) == key


def test_gpgv_accepts_the_signature_as_apt_runs_it(signed, bundle):
    vault, signatures = signed
    assert apt_signing.verify_release(bundle / "apt" / "Release", signatures, site_keys.ensure_apt_key(vault).public) == []


def test_apt_reads_the_signed_repository(signed, bundle, tmp_path):
    vault, signatures = signed
    repo = served(bundle, signatures, tmp_path / "served")
    done = apt_update(repo, site_keys.apt_key_file("lab", tmp_path / "sites"), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "apt-state" / "lists").glob("*_InRelease")), "apt kept the signed InRelease"


def test_apt_refuses_a_tampered_packages_index(signed, bundle, tmp_path):
    vault, signatures = signed
    repo = served(bundle, signatures, tmp_path / "served")
    packages = (repo / "Packages").read_text()
    (repo / "Packages").write_text(packages.replace("Version: 1.0-1", "Version: 9.9-9"))
    (repo / "Packages.gz").unlink()
    done = apt_update(repo, site_keys.apt_key_file("lab", tmp_path / "sites"), tmp_path)
    assert done.returncode != 0 and "Hash Sum mismatch" in done.stdout + done.stderr, done.stdout + done.stderr


def test_apt_refuses_a_tampered_release(signed, bundle, tmp_path):
    vault, signatures = signed
    repo = served(bundle, signatures, tmp_path / "served")
    signed_text = (repo / "InRelease").read_text()
    (repo / "InRelease").write_text(signed_text.replace("Label: rackform site mirror", "Label: someone else"))
    done = apt_update(repo, site_keys.apt_key_file("lab", tmp_path / "sites"), tmp_path)
    assert done.returncode != 0 and "BADSIG" in done.stdout + done.stderr, done.stdout + done.stderr
    assert apt_signing.verify_release(bundle / "apt" / "Release", signatures, site_keys.ensure_apt_key(vault).public) == []


def test_apt_refuses_a_repository_signed_by_another_sites_key(signed, bundle, tmp_path):
    _vault, signatures = signed
    other = site_keys.prepare_apt(vault_of(tmp_path, "edge"), bundle, "1.36.3", sites_dir=tmp_path / "sites")
    repo = served(bundle, other, tmp_path / "served")
    done = apt_update(repo, site_keys.apt_key_file("lab", tmp_path / "sites"), tmp_path)
    assert done.returncode != 0 and "NO_PUBKEY" in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_new_release_is_signed_again(signed, bundle, tmp_path):
    vault, _signatures = signed
    changed = tmp_path / "changed-bundle"
    shutil.copytree(bundle, changed)
    (changed / "apt" / "Release").write_text((changed / "apt" / "Release").read_text().replace("amd64 all", "amd64"))
    signatures = site_keys.prepare_apt(vault, changed, "1.36.3", sites_dir=tmp_path / "sites")
    key = site_keys.ensure_apt_key(vault)
    assert apt_signing.verify_release(changed / "apt" / "Release", signatures, key.public) == []
    assert apt_signing.verify_release(bundle / "apt" / "Release", signatures, key.public) != []


def test_rackform_mirror_sign_signs_what_a_deploy_would(bundle, tmp_path, monkeypatch, capsys):
    from rackform.cli import main

    bundles = tmp_path / "bundles"
    shutil.copytree(bundle, bundles / "kubernetes-1.36.1")  # the lab's pin
    monkeypatch.setattr(site_keys, "SITES_DIR", tmp_path / "sites")
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    root = Path(__file__).resolve().parents[2]
    assert main(["mirror", "sign", "lab", "--root", str(root), "--bundles", str(bundles)]) == 0
    vault = SiteVault("lab")
    key = site_keys.ensure_apt_key(vault)
    signatures = tmp_path / "sites" / "lab" / "kubernetes-1.36.1"
    said = capsys.readouterr().out
    assert key.fingerprint in said
    assert (f"RACKFORM_MIRROR_HOST_VAULT={vault.directory / 'mirror_host_vault.yml'} "
            f"ANSIBLE_VAULT_PASSWORD_FILE={vault.password_file}") in said
    assert (tmp_path / "sites" / "lab" / "registry-ca.crt").is_file()
    assert apt_signing.verify_release(bundles / "kubernetes-1.36.1" / "apt" / "Release", signatures, key.public) == []


def test_rackform_mirror_sign_without_a_bundle_says_to_build_it(tmp_path, capsys):
    from rackform.cli import main

    root = Path(__file__).resolve().parents[2]
    assert main(["mirror", "sign", "lab", "--root", str(root), "--bundles", str(tmp_path)]) == 1
    assert "rackform mirror build lab" in capsys.readouterr().err
