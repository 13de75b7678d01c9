"""Helm charts in the bundle: packaged reproducibly from a Go module's chart folder, with the
`index.yaml` that makes `charts/` a classic chart repository (`helm pull --repo URL NAME`).

`helm package` stamps every file with the current time, so the archive is written here instead,
the way helm lays it out (`<name>/Chart.yaml`, `<name>/templates/...`, files only, sorted), with
every timestamp fixed at `oci.CREATED`, owner 0:0 and modes 0644: the same chart folder gives
the same bytes, so the same digest, on any machine. The chart's files are taken as the module
holds them (its `.helmignore` honoured, as `helm package` does); nothing is rewritten.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import yaml

from rackform.mirror import MirrorError
from rackform.mirror.oci import CREATED, CREATED_EPOCH_S

INDEX_FILE = "index.yaml"
HELMIGNORE = ".helmignore"


def metadata(chart_dir: Path) -> dict[str, Any]:
    """The chart's Chart.yaml; MirrorError where it is missing or names no name and version."""
    path = chart_dir / "Chart.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise MirrorError(f"{path}: not a chart's Chart.yaml ({error})") from None
    if not isinstance(data, dict) or not data.get("name") or not data.get("version"):
        raise MirrorError(f"{path}: a chart's Chart.yaml names its name and version")
    return data


def _ignored(relative: Path, is_dir: bool, patterns: list[str]) -> bool:
    """helm's .helmignore rules as charts use them: `dir/`, a glob on the name or on the path."""
    for pattern in patterns:
        if pattern.endswith("/"):
            if is_dir and fnmatch.fnmatch(relative.name, pattern.rstrip("/")):
                return True
        elif fnmatch.fnmatch(relative.name, pattern) or fnmatch.fnmatch(relative.as_posix(), pattern):
            return True
    return False


def chart_files(chart_dir: Path) -> list[Path]:
    """The chart's files, relative to its folder, sorted; what .helmignore names is left out."""
    ignore = chart_dir / HELMIGNORE
    patterns = [line.strip() for line in ignore.read_text().splitlines()
                if line.strip() and not line.strip().startswith(("#", "!"))] if ignore.is_file() else []
    found: list[Path] = []

    def walk(folder: Path) -> None:
        for entry in sorted(folder.iterdir()):
            relative = entry.relative_to(chart_dir)
            if _ignored(relative, entry.is_dir(), patterns):
                continue
            if entry.is_dir():
                walk(entry)
            elif entry.is_file():
                found.append(relative)

    walk(chart_dir)
    return sorted(found, key=Path.as_posix)


def package(chart_dir: Path, out_dir: Path) -> Path:
    """Write `<name>-<version>.tgz` of the chart into `out_dir`; return its path."""
    meta = metadata(chart_dir)
    name, version = str(meta["name"]), str(meta["version"])
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for relative in chart_files(chart_dir):
            data = (chart_dir / relative).read_bytes()
            info = tarfile.TarInfo(f"{name}/{relative.as_posix()}")
            info.size, info.mtime, info.mode = len(data), CREATED_EPOCH_S, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(data))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{version}.tgz"
    with target.open("wb") as stream, gzip.GzipFile(filename="", mode="wb", fileobj=stream,
                                                    mtime=CREATED_EPOCH_S) as compressed:
        compressed.write(raw.getvalue())
    return target


def write_index(charts_dir: Path) -> Path:
    """index.yaml over every `*.tgz` of `charts_dir`: each entry is the chart's Chart.yaml with
    its archive's sha256 and a URL relative to the repository (helm resolves it against `--repo`)."""
    entries: dict[str, list[dict[str, Any]]] = {}
    for archive in sorted(charts_dir.glob("*.tgz")):
        meta = _archived_metadata(archive)
        entry = {**meta, "created": CREATED, "digest": hashlib.sha256(archive.read_bytes()).hexdigest(),
                 "urls": [archive.name]}
        entries.setdefault(str(meta["name"]), []).append(entry)
    index = {"apiVersion": "v1", "entries": entries, "generated": CREATED}
    path = charts_dir / INDEX_FILE
    path.write_text(yaml.safe_dump(index, sort_keys=True, default_flow_style=False))
    return path


def _archived_metadata(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive, "r:gz") as opened:
        member = next((m for m in opened.getmembers() if m.name.count("/") == 1
                       and m.name.endswith("/Chart.yaml")), None)
        stream = opened.extractfile(member) if member is not None else None
        if stream is None:
            raise MirrorError(f"{archive}: no <chart>/Chart.yaml inside: not a chart archive")
        data = yaml.safe_load(stream.read())
    if not isinstance(data, dict) or not data.get("name") or not data.get("version"):
        raise MirrorError(f"{archive}: its Chart.yaml names no name and version")
    return data
