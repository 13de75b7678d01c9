"""The site mirror as the rest of the site sees it: where it is and what the nodes are told.

A site design's `mirror:` names the machine that serves, on the site's own network,

- an apt repository (flat, over HTTP, its Release signed with the site's own key:
  `deb [signed-by=/etc/apt/keyrings/<site>-mirror.asc] <apt url> ./`, `rackform.mirror.site_keys`),
- an OCI registry (HTTPS with a certificate from the site's own CA, pushes with a password,
  pulls anonymous; `rackform.mirror.site_keys`), images pushed flat as
  `<registry>/<name>:<tag>` (`<registry>/kube-apiserver:v1.36.3`, `<registry>/pause:3.10.2`),
- a Helm chart directory, next to the apt repository.

`mirror_group_vars` renders these facts into `inventory/group_vars/all/mirror.yml`; every
role that installs a package or pulls an image reads them there. The ports and paths are
this module's constants, the one place they are set.

`UPSTREAM_REGISTRIES` and `UPSTREAM_PACKAGE_HOSTS` are the public sources an air-gapped
site must never name: `rackform.checks.airgap` refuses a rendered project of an air-gapped
site that names one, and a site that is not air-gapped gets the registry names in
`site_mirror_upstream_registries`, for containerd to send pulls of those names to the mirror.
"""

from __future__ import annotations

import functools
import json
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from rackform.model.site import Site

APT_PORT = 8080
"""nginx on the mirror host: the apt repository and the charts."""
APT_PATH = "/apt"
CHARTS_PATH = "/charts"
REGISTRY_PORT = 5000
"""The OCI registry on the mirror host (Debian's docker-registry)."""

UPSTREAM_REGISTRIES = (
    "registry.k8s.io", "k8s.gcr.io", "gcr.io", "docker.io", "registry-1.docker.io", "ghcr.io", "quay.io", "nvcr.io",
)
"""Public image registries. An image reference without a registry host means docker.io."""
UPSTREAM_PACKAGE_HOSTS = (
    "pkgs.k8s.io", "github.com", "raw.githubusercontent.com", "get.helm.sh", "archive.ubuntu.com",
    "download.docker.com", "helm.ngc.nvidia.com",
)
"""Public package, release and chart hosts. The Debian archive's own hosts are left out: this
repository names none of the package registries its machines use (a Debian source on a node
is still refused by the lab's tests, which find no source but the mirror's)."""
UPSTREAM_HOSTS = UPSTREAM_REGISTRIES + UPSTREAM_PACKAGE_HOSTS


def mirror_address(site: Site) -> IPv4Address | None:
    """The mirror's address: `mirror.address`, else its host's management address; None when the
    site has no mirror or its host is unknown or has no address (checks report those)."""
    mirror = site.mirror
    if mirror is None:
        return None
    if mirror.address is not None:
        return mirror.address
    host = site.hosts.get(mirror.host or "")
    return host.management_address if host is not None else None


def registry(site: Site) -> str | None:
    """`<address>:<port>` of the site's registry: what every image reference starts with."""
    address = mirror_address(site)
    return f"{address}:{REGISTRY_PORT}" if address is not None else None


def charts_url(site: Site) -> str | None:
    """The site mirror's chart repository (Helm's `--repo`): the charts its bundle carries."""
    address = mirror_address(site)
    return f"http://{address}:{APT_PORT}{CHARTS_PATH}" if address is not None else None


def image(site: Site, name: str, tag: str, upstream: str | None = None) -> str:
    """`<registry>/<name>:<tag>@<digest>` on a site with a mirror, the digest the bundle's manifest
    gives the image (so a node pulls those very bytes, whatever the tag points at by then; the tag
    stays for people reading it); `<registry>/<name>:<tag>` while the bundle is not built here.
    Else `<upstream or name>:<tag>`, as published (a site without a mirror pulls from wherever its
    nodes are configured to)."""
    found = registry(site)
    if found is not None:
        return f"{found}/{name}:{pinned_tag(site, name, tag)}"
    return f"{upstream or name}:{tag}"


def pinned_tag(site: Site, name: str, tag: str) -> str:
    """`<tag>@<digest>` where the site's bundle carries image `name` at `tag`, else `tag`: what
    follows `<registry>/<name>:` in a reference (Helm charts' `image.tag` too)."""
    if site.kubernetes is None:
        return tag
    digest = bundle_image_digests(site.kubernetes.version).get((name, tag))
    return f"{tag}@{digest}" if digest else tag


def bundle_image_digests(version: str) -> dict[tuple[str, str], str]:
    """(image name, tag) -> the manifest digest of every image the bundle of `version` carries;
    empty before `rackform mirror build`. Read once per manifest file (its size and time)."""
    manifest = bundle_manifest(version)
    try:
        found = manifest.stat()
    except FileNotFoundError:
        return {}
    return _image_digests(str(manifest), found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=8)
def _image_digests(manifest: str, mtime_ns: int, size: int) -> dict[tuple[str, str], str]:
    artifacts = json.loads(Path(manifest).read_text()).get("artifacts") or []
    return {(entry["name"], entry["version"]): entry["digest"] for entry in artifacts
            if entry.get("kind") == "image" and entry.get("digest")}


def bundle_dir(version: str) -> str:
    """The controller's bundle of one carried Kubernetes release (rackform.mirror.bundle)."""
    from rackform.mirror.bundle import bundle_path

    return str(bundle_path(version))


def bundle_manifest(version: str) -> Path:
    """The bundle's manifest.json on the controller. Its being a file is what "the bundle was
    built" means (`rackform mirror build` writes it last); the site_mirror role asserts the
    same before it serves anything (roles/site_mirror/tasks/main.yml)."""
    from rackform.mirror.manifest import MANIFEST_FILE

    return Path(bundle_dir(version)) / MANIFEST_FILE


def bundle_digest(version: str) -> str:
    """The digest of the bundle's manifest.json, or `none` before `rackform mirror build`: in the
    rendered variables, so a rebuilt bundle shows up as a changed os stage in `rackform plan`."""
    from rackform.mirror.manifest import file_digest

    manifest = bundle_manifest(version)
    return file_digest(manifest) if manifest.is_file() else "none"


def missing_bundle(site: Site, version: str | None = None) -> Path | None:
    """The manifest of the bundle the site's mirror host serves (of `version`, default the site's
    release), when this controller lacks it (never built here); None when it is here or the site
    serves none: no mirror host of its own (the site_mirror play leaves every host alone) or no
    Kubernetes release to carry."""
    if site.mirror is None or site.mirror.host is None or site.kubernetes is None or mirror_address(site) is None:
        return None
    manifest = bundle_manifest(version or site.kubernetes.version)
    return None if manifest.is_file() else manifest


def site_key_files(site: Site) -> dict[str, str]:
    """Where the roles find, on the controller, what of the site's own mirror keys the nodes are
    given (rackform.mirror.site_keys, made before a stage that uses the mirror runs): the public
    apt key, the signature over the served bundle's Release and the registry CA's certificate.
    Empty for a site whose mirror rackform does not serve."""
    from rackform.mirror.site_keys import apt_key_file, apt_signatures_dir, registry_ca_file

    if site.mirror is None or site.mirror.host is None or site.kubernetes is None:
        return {}
    return {"site_mirror_apt_key_file": str(apt_key_file(site.name)),
            "site_mirror_apt_signatures": str(apt_signatures_dir(site.name, site.kubernetes.version)),
            "site_mirror_registry_ca_file": str(registry_ca_file(site.name))}


def air_gapped(site: Site) -> bool:
    return site.mirror is not None and site.mirror.air_gapped


def mirror_group_vars(site: Site) -> dict[str, Any]:
    """group_vars all/mirror.yml; empty for a site without a mirror (or whose mirror has no address yet)."""
    address = mirror_address(site)
    if site.mirror is None or address is None:
        return {}
    values: dict[str, Any] = {}
    if site.mirror.host is not None:
        values["site_mirror_host"] = site.mirror.host
    values.update({
        "site_mirror_address": str(address),
        "site_mirror_apt_url": f"http://{address}:{APT_PORT}{APT_PATH}",
        "site_mirror_charts_url": charts_url(site),
        "site_mirror_registry": f"{address}:{REGISTRY_PORT}",
        "site_mirror_air_gapped": site.mirror.air_gapped,
    })
    if site.kubernetes is not None:
        values["site_mirror_bundle"] = bundle_dir(site.kubernetes.version)
        values["site_mirror_bundle_digest"] = bundle_digest(site.kubernetes.version)
    values.update(site_key_files(site))
    if not site.mirror.air_gapped:
        values["site_mirror_upstream_registries"] = list(UPSTREAM_REGISTRIES)
    return values
