"""The site mirror registry's keys (rackform.mirror.registry_tls, rackform.mirror.site_keys): a CA
of the site's own, the registry's certificate it signs for the mirror's address, the push
credential; kept in the site's vault, the mirror host's part in a vault file of its own, only
the CA's certificate in the clear. Checked with openssl, as a TLS client checks them."""

from __future__ import annotations

import datetime
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

from rackform.mirror import registry_tls, site_keys
from rackform.secrets import SiteVault

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

ADDRESS = "10.10.0.11"


def vault_of(tmp_path: Path) -> SiteVault:
    return SiteVault("lab", tmp_path / "secrets", environ={})


def openssl_verify(tmp_path: Path, ca: str, cert: str, *, ip: str | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "ca.pem").write_text(ca)
    (tmp_path / "cert.pem").write_text(cert)
    check_ip = ["-verify_ip", ip] if ip else []
    return subprocess.run(["openssl", "verify", "-purpose", "sslserver", *check_ip, "-CAfile", str(tmp_path / "ca.pem"),
                           str(tmp_path / "cert.pem")], capture_output=True, text=True)


def test_the_registrys_certificate_is_good_for_its_address_only(tmp_path):
    ca = registry_tls.make_ca("lab")
    server = registry_tls.make_server_cert(ca, ADDRESS, ("mgmt-1",))
    assert openssl_verify(tmp_path, ca.cert, server.cert, ip=ADDRESS).returncode == 0
    assert openssl_verify(tmp_path, ca.cert, server.cert, ip="10.10.0.12").returncode != 0
    assert openssl_verify(tmp_path, registry_tls.make_ca("edge").cert, server.cert, ip=ADDRESS).returncode != 0


def test_the_ca_signs_certificates_and_nothing_else(tmp_path):
    ca = x509.load_pem_x509_certificate(registry_tls.make_ca("lab").cert.encode())
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert (constraints.ca, constraints.path_length, usage.key_cert_sign, usage.crl_sign, usage.digital_signature) == (
        True, 0, True, True, False)


def test_a_certificate_is_made_again_for_a_new_address_or_near_its_end():
    ca = registry_tls.make_ca("lab")
    server = registry_tls.make_server_cert(ca, ADDRESS, ("mgmt-1",))
    later = datetime.datetime.now(datetime.UTC) + registry_tls.SERVER_LIFETIME - datetime.timedelta(days=10)
    assert (registry_tls.server_cert_current(server, ca, ADDRESS, ("mgmt-1",)),
            registry_tls.server_cert_current(server, ca, "10.10.0.12", ("mgmt-1",)),
            registry_tls.server_cert_current(server, ca, ADDRESS, ("mgmt-2",)),
            registry_tls.server_cert_current(server, registry_tls.make_ca("lab"), ADDRESS, ("mgmt-1",)),
            registry_tls.server_cert_current(server, ca, ADDRESS, ("mgmt-1",), now=later)) == (True, False, False, False, False)


def test_the_push_credential_is_a_sha512_crypt_openssl_reproduces():
    line = registry_tls.htpasswd_line("rackform-push", "s3cret-pw")
    user, hashed = line.split(":", 1)
    salt = hashed.split("$")[2]
    again = subprocess.run(["openssl", "passwd", "-6", "-salt", salt, "-stdin"], input="s3cret-pw\n",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert (user, hashed.startswith("$6$"), hashed == again, "s3cret-pw" in line) == ("rackform-push", True, True, False)


def test_the_keys_are_kept_and_only_the_cas_certificate_is_in_the_clear(tmp_path):
    vault = vault_of(tmp_path)
    env = site_keys.prepare_registry(vault, ADDRESS, ("mgmt-1",), sites_dir=tmp_path / "sites")
    keys = site_keys.ensure_registry(vault, ADDRESS, ("mgmt-1",))
    assert site_keys.ensure_registry(vault, ADDRESS, ("mgmt-1",)) == keys  # kept, not made again
    assert (tmp_path / "sites" / "lab" / "registry-ca.crt").read_text() == keys.ca.cert
    assert env == {"RACKFORM_MIRROR_HOST_VAULT": str(vault.directory / "mirror_host_vault.yml"),
                   "ANSIBLE_VAULT_PASSWORD_FILE": str(vault.password_file)}
    for vault_file in ("mirror_vault.yml", "mirror_host_vault.yml"):
        path = vault.directory / vault_file
        assert path.read_text().startswith("$ANSIBLE_VAULT;") and path.stat().st_mode & 0o777 == 0o600
    clear = b"".join(path.read_bytes() for path in (tmp_path / "sites").rglob("*") if path.is_file())
    assert b"PRIVATE KEY" not in clear and keys.push_password.encode() not in clear


def test_the_mirror_host_gets_its_certificate_and_the_push_credential_never_the_cas_key(tmp_path):
    vault = vault_of(tmp_path)
    site_keys.prepare_registry(vault, ADDRESS, ("mgmt-1",), sites_dir=tmp_path / "sites")
    keys = site_keys.ensure_registry(vault, ADDRESS, ("mgmt-1",))
    host = vault.read_vault_file("mirror_host_vault.yml")
    assert host == {"rackform_mirror_host": {"tls_cert": keys.server.cert, "tls_key": keys.server.key,
                                             "push_user": "rackform-push", "push_password": keys.push_password,
                                             "push_htpasswd": keys.push_htpasswd}}
    assert keys.ca.key not in str(host)


def test_a_second_prepare_rewrites_nothing_a_new_address_gets_a_new_certificate_from_the_same_ca(tmp_path):
    vault = vault_of(tmp_path)
    site_keys.prepare_registry(vault, ADDRESS, ("mgmt-1",), sites_dir=tmp_path / "sites")
    host_vault = vault.directory / "mirror_host_vault.yml"
    written = host_vault.read_bytes()
    site_keys.prepare_registry(vault, ADDRESS, ("mgmt-1",), sites_dir=tmp_path / "sites")
    assert host_vault.read_bytes() == written
    before = site_keys.ensure_registry(vault, ADDRESS, ("mgmt-1",))
    site_keys.prepare_registry(vault, "10.10.0.12", ("mgmt-1",), sites_dir=tmp_path / "sites")
    after = site_keys.ensure_registry(vault, "10.10.0.12", ("mgmt-1",))
    assert (after.ca, after.push_password) == (before.ca, before.push_password) and after.server != before.server
    assert openssl_verify(tmp_path, after.ca.cert, after.server.cert, ip="10.10.0.12").returncode == 0
    assert vault.read_vault_file("mirror_host_vault.yml")["rackform_mirror_host"]["tls_cert"] == after.server.cert


def test_the_apt_key_survives_the_registry_keys_and_the_other_way_round(tmp_path):
    vault = vault_of(tmp_path)
    registry = site_keys.ensure_registry(vault, ADDRESS)
    if shutil.which("gpg"):
        apt = site_keys.ensure_apt_key(vault)
        assert site_keys.ensure_registry(vault, ADDRESS) == registry and site_keys.ensure_apt_key(vault) == apt
