"""etcd snapshots of a site's cluster: where they are kept, their names, their checksums.

`rackform backup` and `rackform restore` (rackform.commands.backup, .restore) run the project's
etcd-backup.yml and etcd-restore.yml (role etcd_backup); this module holds what the controller
decides and checks itself, before and after a playbook runs:

- where snapshots are kept (`backup_place`): the site's first storage host, in the design's
  order, in STORE_DIR; a site without one keeps them on the controller in build/<site>/backups/;
- what a snapshot is called: etcd-snapshot-<UTC time>-<node>.db, its sha256 beside it in
  <name>.sha256 (sha256sum's format), so names sort by time;
- a snapshot the controller holds checked against its .sha256 (`check_snapshot`), before a
  restore changes anything.

Retention (the newest N by name) is the role's one script, files/etcd-snapshot-prune.sh, run
on the nodes, the backup host and the controller alike.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from rackform.day2.errors import refuse
from rackform.model.site import Site

BACKUP_PLAYBOOK = "etcd-backup.yml"
RESTORE_PLAYBOOK = "etcd-restore.yml"
STORAGE_ROLE = "storage"
STORE_DIR = "/var/backups/rackform/etcd"
"""On the backup host: the role's etcd_backup_store_dir default (a test keeps them equal)."""
CONTROLLER_DIR = "backups"
"""Beside the site's project, build/<site>/backups: where a site without a storage host keeps them."""
TRANSIT_DIR = ".transit"
"""Under the controller's backups folder: a snapshot on its way between hosts, removed after."""
SNAPSHOT_NAME = re.compile(r"^etcd-snapshot-\d{8}T\d{6}Z-[A-Za-z0-9][A-Za-z0-9.-]*\.db$")
CHECKSUM_SUFFIX = ".sha256"
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class BackupPlace:
    """Where a site's snapshots are kept: a host of the inventory, or this controller (host None)."""

    host: str | None
    directory: Path

    def __str__(self) -> str:
        return f"{self.host}:{self.directory}" if self.host else f"{self.directory} (on this controller)"

    def envvars(self, transit: Path) -> dict[str, str]:
        """What the playbooks read: the backup host (localhost: the controller), its folder, the transit folder."""
        return {"RACKFORM_ETCD_BACKUP_HOST": self.host or "localhost",
                "RACKFORM_ETCD_BACKUP_DIR": str(self.directory),
                "RACKFORM_ETCD_TRANSIT_DIR": str(transit.resolve())}


@dataclass(frozen=True, slots=True)
class Snapshot:
    name: str
    size_bytes: int
    sha256: str


def backup_place(site: Site, project_dir: Path) -> BackupPlace:
    """The site's first storage host (design order), else the controller's build/<site>/backups/."""
    storage = [host.name for host in site.hosts.values() if host.role == STORAGE_ROLE]
    if storage:
        return BackupPlace(storage[0], Path(STORE_DIR))
    return BackupPlace(None, (project_dir / CONTROLLER_DIR).resolve())


def transit_dir(project_dir: Path) -> Path:
    return project_dir / CONTROLLER_DIR / TRANSIT_DIR


def check_name(site: Site, name: str) -> str:
    """`name` as `--from` gives it: a snapshot's file name, no folder (BadInput otherwise)."""
    if "/" in name or not SNAPSHOT_NAME.match(name):
        raise refuse(site.kubernetes_loc, "--from",
                     f"{name!r} is no snapshot's file name: want etcd-snapshot-<UTC time>-<node>.db as "
                     f"`rackform backup {site.name}` printed it, without a folder")
    return name


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def recorded_sha256(checksum_file: Path, name: str) -> str | None:
    """The sha256 that `<name>.sha256` (sha256sum's `<hex>  <name>`) records for `name`, or None."""
    for line in checksum_file.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == name and re.fullmatch(r"[0-9a-f]{64}", parts[0]):
            return parts[0]
    return None


def check_snapshot(site: Site, directory: Path, name: str) -> Snapshot:
    """The snapshot `name` in `directory`, there and matching its .sha256; BadInput otherwise."""
    path = directory / name
    checksum_file = directory / f"{name}{CHECKSUM_SUFFIX}"
    if not path.is_file():
        raise refuse(site.kubernetes_loc, "--from", f"{path} does not exist: no such snapshot (those kept: "
                                                    f"{', '.join(kept(directory)) or 'none'})")
    if not checksum_file.is_file():
        raise refuse(site.kubernetes_loc, "--from", f"{checksum_file} does not exist: the snapshot's checksum is "
                                                    f"missing, so it cannot be trusted")
    want = recorded_sha256(checksum_file, name)
    if want is None:
        raise refuse(site.kubernetes_loc, "--from", f"{checksum_file}: no sha256 line for {name}")
    have = sha256_of(path)
    if have != want:
        raise refuse(site.kubernetes_loc, "--from", f"{path}: sha256 {have} does not match {want} in "
                                                    f"{checksum_file.name}: the snapshot is damaged")
    return Snapshot(name, path.stat().st_size, have)


def kept(directory: Path) -> list[str]:
    """The snapshots in `directory`, oldest first (names sort by time)."""
    if not directory.is_dir():
        return []
    return sorted(path.name for path in directory.iterdir() if SNAPSHOT_NAME.match(path.name) and path.is_file())


def taken(transit: Path) -> Snapshot | None:
    """The snapshot etcd-backup.yml fetched into `transit`, checked; None when there is none."""
    names = kept(transit)
    if len(names) != 1:
        return None
    name = names[0]
    checksum_file = transit / f"{name}{CHECKSUM_SUFFIX}"
    want = recorded_sha256(checksum_file, name) if checksum_file.is_file() else None
    have = sha256_of(transit / name)
    if want != have:
        return None
    return Snapshot(name, (transit / name).stat().st_size, have)
