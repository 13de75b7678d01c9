"""A site's own mirror keys, and what the mirror's roles read of them on the controller.

The site mirror rackform serves (a `mirror.host`) signs its apt repository with a key of the
site's own. The key is made by rackform the first time a stage serves the mirror, and kept
with the site's other secrets (`rackform.secrets`), in a vault file of its own:

    <secrets root>/<site>/mirror_vault.yml   0600, ansible-vault: rackform_mirror_secrets:
                                               apt_signing_key: {fingerprint, public, private}

What the roles read is written, nothing secret in it, under `SITES_DIR/<site>/` (a system
folder like the bundles', so the rendered project names the same paths on every controller):

    apt-signing-key.asc                 the public key: every node's keyring for the mirror
    kubernetes-<release>/InRelease      that release's bundle's apt/Release, signed with it
    kubernetes-<release>/Release.gpg

A bundle is shared by every site that pins its release; each site signs it with its own key.
Signing is done again only when the bundle's Release or the key changed (`prepare_apt`), so a
second deploy serves the very same files and a node reads nothing new.
"""

from __future__ import annotations

import os
from pathlib import Path

from rackform.mirror.apt_signing import SigningKey, generate_key, sign_release, verify_release
from rackform.secrets import SiteVault

SITES_DIR = Path(os.environ.get("RACKFORM_MIRROR_SITES", "/var/lib/rackform/mirror/sites"))
VAULT_FILE = "mirror_vault.yml"
VAULT_VARIABLE = "rackform_mirror_secrets"
APT_KEY_FILE = "apt-signing-key.asc"


def site_dir(site_name: str, sites_dir: Path | None = None) -> Path:
    return (sites_dir or SITES_DIR) / site_name


def apt_key_file(site_name: str, sites_dir: Path | None = None) -> Path:
    """The site's public apt key on the controller (the nodes' keyring file holds the same)."""
    return site_dir(site_name, sites_dir) / APT_KEY_FILE


def apt_signatures_dir(site_name: str, kubernetes_version: str, sites_dir: Path | None = None) -> Path:
    """InRelease and Release.gpg of the site's signature over one release's bundle."""
    return site_dir(site_name, sites_dir) / f"kubernetes-{kubernetes_version}"


def _secrets(vault: SiteVault) -> dict:
    return (vault.read_vault_file(VAULT_FILE) or {}).get(VAULT_VARIABLE) or {}


def ensure_apt_key(vault: SiteVault) -> SigningKey:
    """The site's apt signing key from its vault; made and kept there the first time."""
    with vault.locked():
        secrets = _secrets(vault)
        entry = secrets.get("apt_signing_key")
        if entry:
            return SigningKey(str(entry["fingerprint"]), str(entry["public"]), str(entry["private"]))
        key = generate_key(vault.site_name)
        secrets["apt_signing_key"] = {"fingerprint": key.fingerprint, "public": key.public, "private": key.private}
        vault.write_vault_file(VAULT_FILE, {VAULT_VARIABLE: secrets},
                               f"# The site mirror's keys of site {vault.site_name}, written by rackform.mirror.site_keys.\n")
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
    public_file = apt_key_file(vault.site_name, sites_dir)
    public_file.parent.mkdir(parents=True, exist_ok=True)
    if not public_file.is_file() or public_file.read_text() != key.public:
        temporary = public_file.with_name(f".{public_file.name}.{os.getpid()}.tmp")
        temporary.write_text(key.public)
        temporary.chmod(0o644)
        temporary.replace(public_file)
    signatures = apt_signatures_dir(vault.site_name, kubernetes_version, sites_dir)
    if verify_release(release, signatures, key.public):
        sign_release(release, key, signatures)
    return signatures
