"""A flat apt repository: the .debs in one folder with its Packages and Release indexes.

Nodes use it as `deb [signed-by=<the site's key>] http://MIRROR:8080/apt ./`. The Release file
carries the indexes' checksums (apt refuses a repository without one). It is not signed here:
a bundle is shared by every site that pins its release, and each site signs its Release with
its own key when it serves it (rackform.mirror.site_keys, docs/mirror.md).
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from rackform.mirror import run
from rackform.mirror.oci import CREATED

CHECKSUMS = (("MD5Sum", "MD5sum", "md5"), ("SHA1", "SHA1", "sha1"), ("SHA256", "SHA256", "sha256"))


LABEL = "rackform site mirror"
"""The same for every release's bundle: apt refuses a source whose Release changes its Origin,
Label, Suite or Codename (`changed its 'Label' value`), and an upgrade moves a site's mirror
from one release's bundle to the next."""


def write_indexes(repo: Path) -> list[Path]:
    """(Re)write Packages, Packages.gz and Release for every .deb in `repo`; return them."""
    stanzas = [_stanza(deb) for deb in sorted(repo.glob("*.deb"))]
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    # mtime=0: the same packages always give the same Packages.gz (and Release).
    (repo / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
    release = ["Origin: rackform", f"Label: {LABEL}", "Suite: ./", "Architectures: amd64 all",
               f"Date: {_release_date()}"]
    for release_key, _field, algorithm in CHECKSUMS:
        release.append(f"{release_key}:")
        for index in ("Packages", "Packages.gz"):
            data = (repo / index).read_bytes()
            release.append(f" {hashlib.new(algorithm, data).hexdigest()} {len(data)} {index}")
    (repo / "Release").write_text("\n".join(release) + "\n")
    return [repo / "Packages", repo / "Packages.gz", repo / "Release"]


def _stanza(deb: Path) -> str:
    control = run(["dpkg-deb", "--field", deb]).stdout.rstrip("\n")
    data = deb.read_bytes()
    lines = [control, f"Filename: ./{deb.name}", f"Size: {len(data)}"]
    lines += [f"{field}: {hashlib.new(algorithm, data).hexdigest()}" for _key, field, algorithm in CHECKSUMS]
    return "\n".join(lines) + "\n"


def _release_date() -> str:
    from datetime import datetime

    return datetime.strptime(CREATED, "%Y-%m-%dT%H:%M:%SZ").strftime("%a, %d %b %Y %H:%M:%S UTC")
