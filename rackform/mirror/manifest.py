"""manifest.json: what a bundle holds, each artifact with its version and digest.

    {"format": 1, "kubernetes": "1.36.3", "filled_from": "source",
     "artifacts": [
       {"kind": "deb", "name": "kubeadm", "version": "1.36.3-1.1", "path": "apt/kubeadm_1.36.3-1.1_amd64.deb",
        "digest": "sha256:...", "source": "built"},
       {"kind": "image", "name": "kube-apiserver", "version": "v1.36.3", "path": "images/kube-apiserver_v1.36.3",
        "digest": "sha256:...", "source": "built"}]}

A deb's digest is the file's sha256; an image's is its OCI manifest's digest (what a registry
answers for `NAME:TAG`), so the mirror role can tell an image it already serves from a new one.
`source` is `built` (from sources/ here), `upstream` (copied from the upstream repository or
registry) or `debian` (a distribution package the Kubernetes packages depend on).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rackform.mirror import MirrorError

MANIFEST_FILE = "manifest.json"
FORMAT = 1
KINDS = ("deb", "image", "chart")


@dataclass(frozen=True, slots=True)
class Artifact:
    kind: str
    name: str
    version: str
    """A deb's Debian version, an image's tag, a chart's version."""
    path: str
    """Relative to the bundle."""
    digest: str
    source: str

    @property
    def reference(self) -> str:
        """`name:tag` for an image, `name=version` for a deb: how nodes ask for it."""
        return f"{self.name}:{self.version}" if self.kind == "image" else f"{self.name}={self.version}"


@dataclass(slots=True)
class Manifest:
    kubernetes: str
    filled_from: str
    artifacts: list[Artifact] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Artifact]:
        return [artifact for artifact in self.artifacts if artifact.kind == kind]

    def find(self, kind: str, name: str) -> Artifact | None:
        return next((a for a in self.artifacts if a.kind == kind and a.name == name), None)

    def write(self, bundle: Path) -> Path:
        self.artifacts.sort(key=_order)
        data = {"format": FORMAT, "kubernetes": self.kubernetes, "filled_from": self.filled_from,
                "artifacts": [asdict(artifact) for artifact in self.artifacts]}
        path = bundle / MANIFEST_FILE
        path.write_text(json.dumps(data, indent=1) + "\n")
        return path


def _order(artifact: Artifact) -> tuple[int, str, str]:
    return KINDS.index(artifact.kind), artifact.name, artifact.version


def read(bundle: Path) -> Manifest:
    """The bundle's manifest; MirrorError where there is none or it is not one rackform wrote."""
    path = bundle / MANIFEST_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MirrorError(f"{path}: no manifest: not a bundle (fill one with `rackform mirror build`)") from None
    except json.JSONDecodeError as error:
        raise MirrorError(f"{path}:{error.lineno}: not JSON: {error.msg}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MirrorError(f"{path}: format {data.get('format') if isinstance(data, dict) else '?'}; "
                          f"this rackform reads format {FORMAT}")
    try:
        artifacts = [Artifact(**entry) for entry in data["artifacts"]]
    except (KeyError, TypeError) as error:
        raise MirrorError(f"{path}: malformed artifact list ({error})") from None
    return Manifest(str(data["kubernetes"]), str(data.get("filled_from", "")), artifacts)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def verify(bundle: Path, manifest: Manifest) -> list[str]:
    """What does not match the manifest: a missing file, a deb whose digest differs, an image
    layout whose tag points at another manifest. Empty when the bundle is whole."""
    from rackform.mirror.oci import image_digest

    problems = []
    for artifact in manifest.artifacts:
        path = bundle / artifact.path
        if not path.exists():
            problems.append(f"{artifact.path}: missing")
            continue
        found = image_digest(path, artifact.version) if artifact.kind == "image" else file_digest(path)
        if found != artifact.digest:
            problems.append(f"{artifact.path}: digest {found}, manifest says {artifact.digest}")
    return problems
