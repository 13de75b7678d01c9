"""Refuse a run that would serve the site mirror without its bundle, before anything changes.

The os stage's first play (and upgrade-cluster.yml's) runs role site_mirror on the mirror host,
which reads the bundle of the site's Kubernetes release from this controller
(`rackform mirror build` fills it). Without it every stage before would run, changing every
host, and then every node would fail in the os stage. So the stage runner asks first: when a
playbook about to run serves the mirror and the bundle is missing (`site_mirror.missing_bundle`,
the fact the role asserts too), the run is bad input naming the command that builds it.
`rackform upgrade` asks the same of its target release before it pins it, where a cluster is
there to run upgrade-cluster.yml on.

Where the bundle is here and a playbook about to run uses the mirror (serves it, or points
nodes at it: roles site_mirror, mirror_client, containerd), `prepare_mirror` also makes or keeps
the site's own mirror keys (rackform.mirror.site_keys, kept in the site's vault): it signs the
bundle's apt repository with the site's key (again only when the Release or the key changed),
keeps the registry's CA, certificate and push credential, puts the public halves where the
roles read them, and gives the run what it needs to read the mirror host's vault file. A vault
that cannot be opened, or no gpg or openssl, stops the run before anything runs
(StageEnvironmentError), as the BMC vault does for the provision stage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import yaml

from rackform.k8s.site_mirror import bundle_dir, missing_bundle
from rackform.model.site import Site
from rackform.model.source import BadInput, SourceError
from rackform.run.environment import StageEnvironmentError

MIRROR_ROLE = "rackform.site.site_mirror"
_USES_MIRROR_KEYS = re.compile(rb"\brackform\.site\.(site_mirror|mirror_client|containerd)\b")
"""The roles that read the site's mirror keys on the controller (public halves, the host's vault)."""


def serves_mirror(playbook: bytes) -> bool:
    """Whether a rendered playbook runs role site_mirror in one of its plays' `roles:`."""
    plays = yaml.safe_load(playbook) or []
    return any(_role_name(entry) == MIRROR_ROLE
               for play in plays if isinstance(play, dict) for entry in play.get("roles") or [])


def _role_name(entry: object) -> object:
    """A play's `roles:` entry is the role's name, or a mapping naming it by `role:` (or `name:`)."""
    return entry.get("role", entry.get("name")) if isinstance(entry, dict) else entry


def check_bundle(site: Site, root: Path, files: Mapping[str, bytes], playbooks: Iterable[str]) -> None:
    """BadInput when one of `playbooks` (of the rendered `files`) serves the site mirror and this
    controller lacks the bundle it serves; nothing when the bundle is here or none of them needs it."""
    if missing_bundle(site) is None:
        return
    serving = [playbook for playbook in playbooks if playbook in files and serves_mirror(files[playbook])]
    if serving:
        refuse_missing_bundle(site, root, serving)


def uses_mirror_keys(playbook: bytes) -> bool:
    """Whether a rendered playbook runs a role that reads the site's mirror keys."""
    return _USES_MIRROR_KEYS.search(playbook) is not None


def prepare_mirror(site: Site, root: Path, files: Mapping[str, bytes], playbooks: Iterable[str],
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`check_bundle`, then, where one of `playbooks` uses the site mirror's keys, those keys
    made or kept and put where the roles read them (`prepare_site_keys`). Returns the variables
    the run adds for Ansible (empty where none of them uses the keys)."""
    playbooks = list(playbooks)
    check_bundle(site, root, files, playbooks)
    if not any(playbook in files and uses_mirror_keys(files[playbook]) for playbook in playbooks):
        return {}
    return prepare_site_keys(site, environ)


def prepare_site_keys(site: Site, environ: Mapping[str, str] | None = None, version: str | None = None
                      ) -> dict[str, str]:
    """The site's mirror keys, made or kept (rackform.mirror.site_keys): the apt repository of the
    bundle its mirror host serves (of `version`, default the site's release) signed, the
    registry's CA, certificate and push credential, their public halves in place for the roles.
    Returns the variables that let the site_mirror role read the mirror host's vault file.
    Nothing where rackform serves no mirror for the site, or where the bundle is no real one
    (no apt repository: the tests' stand-ins): the vault is not even opened. `environ` (default
    this process's) names the vault's password as for the stages (RACKFORM_VAULT_PASSWORD_FILE).
    StageEnvironmentError when the vault cannot be opened, or gpg or openssl fails."""
    from rackform.k8s.site_mirror import mirror_address
    from rackform.mirror import MirrorError
    from rackform.mirror.site_keys import prepare_apt, prepare_registry
    from rackform.secrets import SecretsError, SiteVault

    if site.mirror is None or site.mirror.host is None or site.kubernetes is None or mirror_address(site) is None:
        return {}
    version = version or site.kubernetes.version
    bundle = Path(bundle_dir(version))
    if not (bundle / "apt" / "Release").is_file():
        return {}
    try:
        vault = SiteVault(site.name, environ={**os.environ, **(environ or {})})
        prepare_apt(vault, bundle, version)
        return prepare_registry(vault, str(mirror_address(site)), (site.mirror.host,))
    except (SecretsError, MirrorError) as error:
        raise StageEnvironmentError(f"{site.name}: the site mirror's keys cannot be made or read: {error}") from None


def refuse_missing_bundle(site: Site, root: Path, serving: Sequence[str], version: str | None = None) -> None:
    """BadInput when this controller lacks the bundle of `version` (default: the site's release)
    that the playbooks `serving` serve from the site's mirror host; nothing otherwise."""
    manifest = missing_bundle(site, version)
    if manifest is None:
        return
    assert site.mirror_loc is not None and site.kubernetes is not None  # a mirror host and a release: missing_bundle
    version = version or site.kubernetes.version
    # The site's own release is what `mirror build SITE` builds; another (an upgrade's target) is named
    which = site.name if version == site.kubernetes.version else f"--kubernetes {version}"
    command = f"rackform mirror build {which}" + _root_option(root)
    raise BadInput([SourceError(
        site.origin("mirror.host", site.mirror_loc), "mirror.host",
        f"the site mirror's bundle of Kubernetes {version} was never built on this machine "
        f"({manifest} is missing), and {', '.join(serving)} serves it to the nodes from here: build it first "
        f"with `{command}`")])


def _root_option(root: Path) -> str:
    """` --root ROOT` when the command must be run with one to find the site (not run from ROOT)."""
    return "" if Path(root).resolve() == Path(os.getcwd()).resolve() else f" --root {root}"
