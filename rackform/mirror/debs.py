"""Debian packages made with dpkg-deb, named and versioned as Kubernetes' own package
repository names them (`kubeadm 1.36.3-1.1`), so the kubeadm role's pinned
`apt install kubeadm=1.36.3-*` works against the site mirror unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.mirror import run
from rackform.mirror.oci import CREATED_EPOCH_S

MAINTAINER = "rackform <rackform@localhost>"
ARCH = "amd64"
PACKAGE_REVISION = "1.1"
"""The revision Kubernetes' package repository gives its builds: kubeadm 1.36.3-1.1."""

# Reload systemd where it runs, so a new or changed unit file is seen by the next
# `systemctl` without a reboot (dpkg itself does not).
RELOAD_SYSTEMD = """#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
"""


@dataclass(frozen=True, slots=True)
class DebSpec:
    name: str
    version: str
    description: str
    files: Mapping[str, Path | str]
    """Path in the package -> a file to copy, or the text of the file."""
    depends: Sequence[str] = ()
    executables: frozenset[str] = frozenset()
    """Paths in the package (of `files` given as text) to mark executable."""
    postinst: str | None = None
    homepage: str | None = None
    extra_control: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{ARCH}.deb"


def build(spec: DebSpec, out_dir: Path) -> Path:
    """Write `out_dir/<name>_<version>_amd64.deb` and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"deb-{spec.name}-", dir=out_dir) as staging:
        root = Path(staging) / "root"
        for target, source in spec.files.items():
            path = root / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, Path):
                shutil.copy2(source, path)
                path.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
            else:
                path.write_text(source)
                path.chmod(0o755 if target in spec.executables else 0o644)
        control = root / "DEBIAN"
        control.mkdir(parents=True)
        (control / "control").write_text(_control(spec, _installed_size_kib(root)))
        if spec.postinst:
            (control / "postinst").write_text(spec.postinst)
            (control / "postinst").chmod(0o755)
        target = out_dir / spec.filename
        # gzip, not dpkg's default xz: several times faster on a 100 MB binary, for a
        # package that travels once over the site's own network.
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z6", "--build", root, target],
            extra_env={"SOURCE_DATE_EPOCH": str(CREATED_EPOCH_S)})
    return target


def _control(spec: DebSpec, installed_kib: int) -> str:
    fields = {
        "Package": spec.name,
        "Version": spec.version,
        "Architecture": ARCH,
        "Maintainer": MAINTAINER,
        "Installed-Size": str(installed_kib),
        "Section": "admin",
        "Priority": "optional",
    }
    if spec.depends:
        fields["Depends"] = ", ".join(spec.depends)
    if spec.homepage:
        fields["Homepage"] = spec.homepage
    fields.update(spec.extra_control)
    summary, _, body = spec.description.partition("\n")
    lines = [f"{key}: {value}" for key, value in fields.items()]
    lines.append(f"Description: {summary}")
    lines += [f" {line}" if line.strip() else " ." for line in body.strip().splitlines()]
    return "\n".join(lines) + "\n"


def _installed_size_kib(root: Path) -> int:
    total = sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
    return max(1, total // 1024)
