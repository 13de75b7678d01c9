"""Go commands built from their modules, cached by version and digest.

Each folder under sources/<component>/<version>/ is a Go module of ours that holds only a
go.mod and go.sum: its `tool` lines name upstream's own commands (k8s.io/kubernetes/cmd/kubelet,
go.etcd.io/etcd/server/v3 ...), pinned by `require` and checked by go.sum. `go build`
compiles exactly those packages; no module source is copied into the repository.

The binaries are kept in `CACHE_DIR/<component>-<version>-<key>/`, where the key hashes
everything that decides the output: go.mod, go.sum, the packages, the linker flags and the
Go toolchain's version. The same key is never built twice on a machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.mirror import MirrorError, run

CACHE_DIR = Path(os.environ.get("RACKFORM_MIRROR_CACHE", "/var/lib/rackform/mirror/cache")) / "go"
COMPLETE_MARK = ".complete"


@dataclass(frozen=True, slots=True)
class GoBuild:
    component: str
    version: str
    module_dir: Path
    packages: Mapping[str, str]
    """Import path -> the binary's name."""
    ldflags: Sequence[str] = ("-s", "-w")
    env: Mapping[str, str] = field(default_factory=lambda: {"CGO_ENABLED": "0"})


@dataclass(frozen=True, slots=True)
class Built:
    binaries: dict[str, Path]
    """Binary name -> its path in the cache."""
    cached: bool
    seconds: float


def go_version() -> str:
    return run(["go", "env", "GOVERSION"], timeout_s=60).stdout.strip()


def cache_key(build: GoBuild, toolchain: str) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        path = build.module_dir / name
        if not path.is_file():
            raise MirrorError(f"{path}: missing (every folder under sources/ is a Go module with go.mod and go.sum)")
        digest.update(path.read_bytes())
    for item in (*sorted(build.packages.items()), *build.ldflags, *sorted(build.env.items()), toolchain):
        digest.update(repr(item).encode())
    return digest.hexdigest()[:16]


def build(spec: GoBuild, progress: Callable[[str], None] = print, cache_dir: Path = CACHE_DIR) -> Built:
    """The binaries of `spec`, from the cache or built now (under a lock: one build per key)."""
    started = time.monotonic()
    entry = cache_dir / f"{spec.component}-{spec.version}-{cache_key(spec, go_version())}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{entry.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = (entry / COMPLETE_MARK).exists()
        if not cached:
            progress(f"building {spec.component} {spec.version} from its Go modules "
                     f"({', '.join(spec.packages.values())})")
            _build_into(spec, entry)
    binaries = {name: entry / name for name in spec.packages.values()}
    return Built(binaries, cached, time.monotonic() - started)


def _build_into(spec: GoBuild, entry: Path) -> None:
    building = entry.with_name(f".{entry.name}.building")
    shutil.rmtree(building, ignore_errors=True)
    shutil.rmtree(entry, ignore_errors=True)
    building.mkdir(parents=True)
    env = {**spec.env, "GOFLAGS": "-mod=readonly -trimpath"}  # on top of go's allowed GO* settings
    # One `go build` per package: `-o DIR` with several packages names each binary after
    # its import path, and some end in a major version (go.etcd.io/etcd/server/v3).
    for package, name in spec.packages.items():
        run(["go", "build", "-ldflags", " ".join(spec.ldflags), "-o", building / name, package],
            cwd=spec.module_dir, extra_env=env)
    (building / COMPLETE_MARK).write_text("")
    building.rename(entry)
