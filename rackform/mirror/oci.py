"""OCI images built without a daemon: umoci writes an image layout, one layer per root tree.

Every timestamp is fixed (`CREATED`, and the files' modification times), so the same
binaries give the same layer and manifest digests on any machine: a rebuild whose inputs
did not change yields an image the mirror already serves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.mirror import MirrorError, run

CREATED = "2026-01-01T00:00:00Z"
CREATED_EPOCH_S = 1767225600
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True, slots=True)
class ImageSpec:
    name: str
    tag: str
    layers: Sequence[Path]
    """Root trees, lowest first; each becomes one layer."""
    entrypoint: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    labels: dict[str, str] = field(default_factory=dict)
    user: str = "0:0"
    """The config's `User` (uid:gid): 65532:65532 for a controller that runs as non-root, like distroless'."""


def build(spec: ImageSpec, layout: Path) -> str:
    """Write `spec` as the OCI image layout `layout` (tag = spec.tag); return its manifest digest."""
    if layout.exists():
        raise MirrorError(f"{layout}: exists; images are built into a fresh folder")
    image = f"{layout}:{spec.tag}"
    run(["umoci", "init", "--layout", layout])
    run(["umoci", "new", "--image", image])
    for number, tree in enumerate(spec.layers, start=1):
        _fix_times(tree)
        run(["umoci", "insert", "--rootless", "--image", image, "--history.created", CREATED,
             "--history.created_by", f"rackform mirror: {spec.name} layer {number}", tree, "/"])
    config = ["umoci", "config", "--image", image, "--created", CREATED, "--history.created", CREATED,
              "--os", "linux", "--architecture", "amd64", "--config.user", spec.user]
    for word in spec.entrypoint:
        config += ["--config.entrypoint", word]
    for variable in spec.env:
        config += ["--config.env", variable]
    for key, value in sorted(spec.labels.items()):
        config += ["--config.label", f"{key}={value}"]
    run(config)
    run(["umoci", "gc", "--layout", layout])
    return image_digest(layout, spec.tag)


def image_digest(layout: Path, tag: str) -> str:
    """The manifest digest `tag` names in the layout's index.json."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise MirrorError(f"{layout}: not an OCI image layout ({error})") from None
    for entry in index.get("manifests", []):
        if entry.get("annotations", {}).get(REF_NAME) == tag:
            return str(entry["digest"])
    raise MirrorError(f"{layout}: no image tagged {tag}")


def _fix_times(tree: Path) -> None:
    for folder, dirs, files in os.walk(tree):
        for name in (*dirs, *files):
            os.utime(Path(folder, name), (CREATED_EPOCH_S, CREATED_EPOCH_S), follow_symlinks=False)
    os.utime(tree, (CREATED_EPOCH_S, CREATED_EPOCH_S))
