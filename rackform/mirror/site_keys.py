"""A site's own mirror keys, and what the mirror's roles read of them on the controller.

The site mirror rackform serves (a `mirror.host`) signs its apt repository with a key of the
site's own, and serves its registry over TLS with a certificate from a CA of the site's own,
pushes taking a password. All are made by rackform the first time a stage needs them, and kept
with the site's other secrets (`rackform.secrets`), in vault files of their own:

    <secrets root>/<site>/mirror_vault.yml   0600, ansible-vault: rackform_mirror_secrets:
                                               apt_signing_key: {fingerprint, public, private}
                                               registry_ca: {cert, key}
                                               registry_tls: {cert, key}   (the registry's, for its address)
                                               registry_push: {user, password, htpasswd}
    <secrets root>/<site>/mirror_host_vault.yml  0600, ansible-vault: rackform_mirror_host:
                                               what the mirror host's role needs and nothing more
                                               (the registry's certificate and key, the push
                                               credential): never the CA's key or the apt key

The site_mirror role reads mirror_host_vault.yml (`include_vars`, no_log) from the path the
run gives it ($RACKFORM_MIRROR_HOST_VAULT, with ANSIBLE_VAULT_PASSWORD_FILE: `prepare_registry`
returns both).

What the roles read besides is written, nothing secret in it, under `SITES_DIR/<site>/` (a
system folder like the bundles', so the rendered project names the same paths on every
controller):

    apt-signing-key.asc                 the public key: every node's keyring for the mirror
    registry-ca.crt                     the CA's certificate: every node trusts it for the registry
    kubernetes-<release>/InRelease      that release's bundle's apt/Release, signed with it
    kubernetes-<release>/Release.gpg

A bundle is shared by every site that pins its release; each site signs it with its own key.
Signing is done again only when the bundle's Release or the key changed (`prepare_apt`), so a
second deploy serves the very same files and a node reads nothing new.
"""

from __future__ import annotations

import os
import secrets as random_secrets
from dataclasses import dataclass, field
from pathlib import Path

from rackform.mirror.apt_signing import SigningKey, generate_key, sign_release, verify_release
from rackform.mirror.registry_tls import KeyPair, htpasswd_line, make_ca, make_server_cert, server_cert_current
from rackform.secrets import ENV_ANSIBLE_VAULT_PASSWORD_FILE, SiteVault

SITES_DIR = Path(os.environ.get("RACKFORM_MIRROR_SITES", "/var/lib/rackform/mirror/sites"))
VAULT_FILE = "mirror_vault.yml"
VAULT_VARIABLE = "rackform_mirror_secrets"
HOST_VAULT_FILE = "mirror_host_vault.yml"
HOST_VAULT_VARIABLE = "rackform_mirror_host"
ENV_HOST_VAULT = "RACKFORM_MIRROR_HOST_VAULT"
"""Where the site_mirror role finds mirror_host_vault.yml (a path, never a secret)."""
APT_KEY_FILE = "apt-signing-key.asc"
REGISTRY_CA_FILE = "registry-ca.crt"
PUSH_USER = "rackform-push"
PUSH_PASSWORD_BYTES = 24
_HEADER = "# The site mirror's keys of site {site}, written by rackform.mirror.site_keys.\n"


def site_dir(site_name: str, sites_dir: Path | None = None) -> Path:
    return (sites_dir or SITES_DIR) / site_name


def apt_key_file(site_name: str, sites_dir: Path | None = None) -> Path:
    """The site's public apt key on the controller (the nodes' keyring file holds the same)."""
    return site_dir(site_name, sites_dir) / APT_KEY_FILE


def apt_signatures_dir(site_name: str, kubernetes_version: str, sites_dir: Path | None = None) -> Path:
    """InRelease and Release.gpg of the site's signature over one release's bundle."""
    return site_dir(site_name, sites_dir) / f"kubernetes-{kubernetes_version}"


def registry_ca_file(site_name: str, sites_dir: Path | None = None) -> Path:
    """The site mirror CA's certificate on the controller (nodes trust it for the registry)."""
    return site_dir(site_name, sites_dir) / REGISTRY_CA_FILE


def _secrets(vault: SiteVault) -> dict:
    return (vault.read_vault_file(VAULT_FILE) or {}).get(VAULT_VARIABLE) or {}


def _save(vault: SiteVault, secrets: dict) -> None:
    vault.write_vault_file(VAULT_FILE, {VAULT_VARIABLE: secrets}, _HEADER.format(site=vault.site_name))


def _write_public(path: Path, text: str) -> None:
    """Write `text` (0644) where it differs, renamed into place: readers see old or new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and path.read_text() == text:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    temporary.chmod(0o644)
    temporary.replace(path)


def ensure_apt_key(vault: SiteVault) -> SigningKey:
    """The site's apt signing key from its vault; made and kept there the first time."""
    with vault.locked():
        secrets = _secrets(vault)
        entry = secrets.get("apt_signing_key")
        if entry:
            return SigningKey(str(entry["fingerprint"]), str(entry["public"]), str(entry["private"]))
        key = generate_key(vault.site_name)
        secrets["apt_signing_key"] = {"fingerprint": key.fingerprint, "public": key.public, "private": key.private}
        _save(vault, secrets)
        return key


def prepare_apt(vault: SiteVault, bundle: Path, kubernetes_version: str, sites_dir: Path | None = None) -> Path | None:
    """The site's public key and its signature over `bundle`'s apt repository, in place under
    `sites_dir`/<site>/ for the roles; returns the signatures' folder. None for a bundle without
    an apt repository (nothing to sign). Signs only where the signatures there do not verify
    against the key for this Release."""
    release = bundle / "apt" / "Release"
    if not release.is_file():
        return None
    key = ensure_apt_key(vault)
    _write_public(apt_key_file(vault.site_name, sites_dir), key.public)
    signatures = apt_signatures_dir(vault.site_name, kubernetes_version, sites_dir)
    if verify_release(release, signatures, key.public):
        sign_release(release, key, signatures)
    return signatures


@dataclass(frozen=True, slots=True)
class RegistryKeys:
    """The registry's TLS and push credential; secrets never show in repr or logs."""

    ca: KeyPair
    server: KeyPair
    push_user: str
    push_password: str = field(repr=False)
    push_htpasswd: str = field(repr=False)


def ensure_registry(vault: SiteVault, address: str, names: tuple[str, ...] = ()) -> RegistryKeys:
    """The site's registry CA, the registry's certificate for `address` (and DNS `names`) and the
    push credential, from its vault; each made and kept there the first time, the certificate
    made again when it no longer names the address or is near its end."""
    with vault.locked():
        secrets = _secrets(vault)
        changed = False
        if not secrets.get("registry_ca"):
            ca = make_ca(vault.site_name)
            secrets["registry_ca"] = {"cert": ca.cert, "key": ca.key}
            changed = True
        ca = KeyPair(str(secrets["registry_ca"]["cert"]), str(secrets["registry_ca"]["key"]))
        kept = secrets.get("registry_tls")
        server = KeyPair(str(kept["cert"]), str(kept["key"])) if kept else None
        if server is None or not server_cert_current(server, ca, address, names):
            server = make_server_cert(ca, address, names)
            secrets["registry_tls"] = {"cert": server.cert, "key": server.key}
            changed = True
        if not secrets.get("registry_push"):
            password = random_secrets.token_urlsafe(PUSH_PASSWORD_BYTES)
            secrets["registry_push"] = {"user": PUSH_USER, "password": password,
                                        "htpasswd": htpasswd_line(PUSH_USER, password)}
            changed = True
        if changed:
            _save(vault, secrets)
        push = secrets["registry_push"]
        return RegistryKeys(ca, server, str(push["user"]), str(push["password"]), str(push["htpasswd"]))


def prepare_registry(vault: SiteVault, address: str, names: tuple[str, ...] = (),
                     sites_dir: Path | None = None) -> dict[str, str]:
    """The site's registry keys made or kept; the CA's certificate in place under
    `sites_dir`/<site>/ for the roles, and what the mirror host needs in mirror_host_vault.yml
    (rewritten only when it changed). Returns the variables a run gives Ansible to read it."""
    keys = ensure_registry(vault, address, names)
    _write_public(registry_ca_file(vault.site_name, sites_dir), keys.ca.cert)
    host = {HOST_VAULT_VARIABLE: {"tls_cert": keys.server.cert, "tls_key": keys.server.key,
                                  "push_user": keys.push_user, "push_password": keys.push_password,
                                  "push_htpasswd": keys.push_htpasswd}}
    with vault.locked():
        if vault.read_vault_file(HOST_VAULT_FILE) != host:
            vault.write_vault_file(HOST_VAULT_FILE, host, "# What the site mirror's host needs of site "
                                   f"{vault.site_name}'s mirror keys, written by rackform.mirror.site_keys.\n")
    return {ENV_HOST_VAULT: str(vault.directory / HOST_VAULT_FILE),
            ENV_ANSIBLE_VAULT_PASSWORD_FILE: str(vault.password_file)}
