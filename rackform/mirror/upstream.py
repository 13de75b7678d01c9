"""Fill a bundle from upstream, on a machine that reaches Kubernetes' package repository and
registries: the path an air-gapped site's connected staging machine takes (docs/mirror.md).

The debs come from Kubernetes' apt repository (one flat repository per minor:
`<apt base>/core:/stable:/v1.36/deb/`); each is checked against the SHA256 its Packages
index gives. The images are copied with skopeo into OCI layouts, keeping their digests.
The Debian packages the nodes need beside them come from this machine's apt sources, as
in a build from source. `--upstream-apt` and `--upstream-registry` point both at other
places: a proxy, a company mirror, or (in rackform's tests) a stand-in on loopback.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rackform.mirror import MirrorError, apt_repo, oci, run
from rackform.mirror.manifest import Artifact, Manifest, file_digest
from rackform.mirror.source import FillReport, ReleasePins, _node_packages, _replace

Progress = Callable[[str], None]
KUBERNETES_APT = "https://pkgs.k8s.io"
"""Kubernetes' package repository; per minor: <it>/core:/stable:/v1.36/deb/."""
IMAGE_SOURCES = {
    "kube-apiserver": "registry.k8s.io/kube-apiserver",
    "kube-controller-manager": "registry.k8s.io/kube-controller-manager",
    "kube-scheduler": "registry.k8s.io/kube-scheduler",
    "kube-proxy": "registry.k8s.io/kube-proxy",
    "etcd": "registry.k8s.io/etcd",
    "coredns": "registry.k8s.io/coredns/coredns",
    "pause": "registry.k8s.io/pause",
    "kube-router": "docker.io/cloudnativelabs/kube-router",
}
"""Where each image of the bundle is published upstream (repository, without the tag)."""
DOWNLOAD_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class Upstream:
    apt_url: str
    """The flat repository of the release's minor (ends in /)."""
    registry: str | None = None
    """Replaces the registry host of every IMAGE_SOURCES entry (a proxy or a stand-in); None: upstream's."""
    plain_http: bool = False
    """The replacement registry speaks HTTP, not HTTPS (a stand-in on loopback)."""

    @classmethod
    def for_release(cls, pins: ReleasePins, apt_base: str | None = None, registry: str | None = None,
                    plain_http: bool = False) -> Upstream:
        major, minor, _patch = pins.kubernetes.split(".")
        base = (apt_base or f"{KUBERNETES_APT}/core:/stable:/v{major}.{minor}/deb").rstrip("/")
        return cls(f"{base}/", registry, plain_http)

    def image_source(self, name: str) -> str:
        repository = IMAGE_SOURCES[name]
        if self.registry:
            repository = f"{self.registry}/{repository.split('/', 1)[1]}"
        return repository


def fill(pins: ReleasePins, bundle: Path, upstream: Upstream, progress: Progress = print) -> FillReport:
    """Copy the release's debs and images from `upstream` into a new bundle at `bundle`."""
    started = time.monotonic()
    bundle.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{bundle.name}.filling-", dir=bundle.parent))
    try:
        manifest = Manifest(pins.kubernetes, "upstream")
        progress(f"fetching the Kubernetes {pins.kubernetes} packages from {upstream.apt_url}")
        manifest.artifacts += _debs(pins, upstream, work / "apt")
        manifest.artifacts += _node_packages(work / "apt")
        apt_repo.write_indexes(work / "apt")
        manifest.artifacts += _images(pins, upstream, work, progress)
        if pins.kueue is not None:
            progress(f"  Kueue {pins.kueue} (image and chart) is carried by a build from source only: not copied")
        (work / "charts").mkdir()
        manifest.write(work)
        _replace(bundle, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return FillReport(bundle, manifest, [], [], time.monotonic() - started)


def wanted_debs(pins: ReleasePins) -> dict[str, str]:
    """Package -> the upstream version string of this release (the repository's revision 1.1)."""
    release = f"{pins.kubernetes}-1.1"
    return {"kubeadm": release, "kubelet": release, "kubectl": release,
            "kubernetes-cni": f"{pins.cni_plugins.lstrip('v')}-1.1"}


def _debs(pins: ReleasePins, upstream: Upstream, apt: Path) -> list[Artifact]:
    apt.mkdir(parents=True)
    index = parse_packages(_fetch(upstream.apt_url + "Packages.gz"))
    artifacts = []
    for name, version in wanted_debs(pins).items():
        stanza = index.get((name, version))
        if stanza is None:
            offered = sorted(v for (n, v) in index if n == name)
            raise MirrorError(f"{upstream.apt_url}: no {name} {version} in its index (it offers "
                              f"{', '.join(offered[-5:]) or 'none'})")
        data = _fetch(upstream.apt_url + stanza["Filename"].removeprefix("./"))
        if hashlib.sha256(data).hexdigest() != stanza.get("SHA256"):
            raise MirrorError(f"{stanza['Filename']}: SHA256 differs from the repository's index: not copied")
        target = apt / Path(stanza["Filename"]).name
        target.write_bytes(data)
        artifacts.append(Artifact("deb", name, version, f"apt/{target.name}", file_digest(target), "upstream"))
    return artifacts


def parse_packages(compressed: bytes) -> dict[tuple[str, str], dict[str, str]]:
    """(Package, Version) -> the stanza's fields, from a Packages.gz."""
    index: dict[tuple[str, str], dict[str, str]] = {}
    for stanza in gzip.decompress(compressed).decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line.startswith(" ") and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" in fields and "Version" in fields:
            index[(fields["Package"], fields["Version"])] = fields
    return index


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as error:
        raise MirrorError(f"{url}: {getattr(error, 'reason', error)}") from None


def _images(pins: ReleasePins, upstream: Upstream, work: Path, progress: Progress) -> list[Artifact]:
    tags = {name: pins.kube_tag for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                             "kube-proxy")}
    tags.update({"etcd": pins.etcd, "coredns": pins.coredns, "pause": pins.pause, "kube-router": pins.kube_router})
    tls = ["--src-tls-verify=false"] if upstream.plain_http else []
    artifacts = []
    for name, tag in tags.items():
        source = f"{upstream.image_source(name)}:{tag}"
        path = f"images/{name}_{tag}"
        progress(f"  copying {source}")
        (work / "images").mkdir(exist_ok=True)
        run(["skopeo", "copy", "--quiet", *tls, f"docker://{source}", f"oci:{work / path}:{tag}"], timeout_s=1800)
        artifacts.append(Artifact("image", name, tag, path, oci.image_digest(work / path, tag), "upstream"))
    return artifacts
