"""Debian packages the bundle carries: fetched from this machine's own apt sources.

Two uses:
- the node side: what the Kubernetes packages and the API's virtual IP depend on
  (conntrack, socat, keepalived ...), with their dependencies, so an air-gapped node
  installs kubeadm from the site mirror alone. Packages of priority `required` are left
  out: every Debian system has them.
- image roots: the few user-space tools an image needs beside its static binary
  (kube-proxy's nft, kube-router's iptables and ipset), unpacked with `dpkg-deb -x`.

Downloads are cached under `CACHE_DIR/debian/` by file name (Debian file names carry
name, version and architecture); apt checks each against its signed index.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from rackform.mirror import MirrorError, run
from rackform.mirror.gobuild import CACHE_DIR as GO_CACHE_DIR

CACHE_DIR = GO_CACHE_DIR.parent / "debian"
_NO_OPTIONAL_EDGES = ("--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                      "--no-enhances")


def closure(packages: Sequence[str], *, skip_required: bool) -> list[str]:
    """`packages` and everything they depend on (Depends, Pre-Depends), sorted."""
    listed = run(["apt-cache", "depends", "--recurse", *_NO_OPTIONAL_EDGES, *packages], timeout_s=300).stdout
    names = sorted({line.strip() for line in listed.splitlines()
                    if line and not line.startswith((" ", "<")) and ":" not in line})
    missing = [name for name in packages if name not in names]
    if missing:
        raise MirrorError(f"apt knows no package {', '.join(missing)}; is this machine's apt index current "
                          f"(apt-get update)?")
    if skip_required:
        required = set(_required(names))
        names = [name for name in names if name not in required or name in packages]
    return names


def _required(names: Iterable[str]) -> list[str]:
    shown = run(["apt-cache", "show", "--no-all-versions", *names], timeout_s=300).stdout
    required = []
    for stanza in shown.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        if name and re.search(r"^(Priority: required|Essential: yes)$", stanza, re.MULTILINE):
            required.append(name.group(1))
    return required


def download(packages: Sequence[str], cache_dir: Path = CACHE_DIR) -> list[Path]:
    """The .deb files of `packages` (exact names), downloaded once into the cache."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wanted = _candidate_files(packages)
    missing = [name for name, filename in wanted.items() if not (cache_dir / filename).exists()]
    if missing:
        run(["apt-get", "download", *missing], cwd=cache_dir, timeout_s=900)
    files = [cache_dir / filename for filename in wanted.values()]
    absent = [path.name for path in files if not path.exists()]
    if absent:
        raise MirrorError(f"apt-get download left out {', '.join(absent)}")
    return files


def _candidate_files(packages: Sequence[str]) -> dict[str, str]:
    """name -> the file name `apt-get download` writes for its candidate version."""
    shown = run(["apt-cache", "show", "--no-all-versions", *packages], timeout_s=300).stdout
    files = {}
    for stanza in shown.split("\n\n"):
        name = re.search(r"^Package: (\S+)", stanza, re.MULTILINE)
        version = re.search(r"^Version: (\S+)", stanza, re.MULTILINE)
        arch = re.search(r"^Architecture: (\S+)", stanza, re.MULTILINE)
        if name and version and arch:
            # apt-get download escapes the epoch's colon as %3a.
            files[name.group(1)] = f"{name.group(1)}_{version.group(1).replace(':', '%3a')}_{arch.group(1)}.deb"
    return files


def unpack(debs: Iterable[Path], root: Path) -> Path:
    """A root tree with every package's files, as dpkg would place them (no scripts run)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", deb, root])
    for drop in ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian"):
        shutil.rmtree(root / drop, ignore_errors=True)
    return root
