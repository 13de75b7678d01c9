"""`rackform backup SITE`: a snapshot of the cluster's etcd, copied off the control plane.

Runs the project's etcd-backup.yml through the stage runner (`rackform.run.stages.run_day2_playbook`:
under the site's lock, validate.yml first, the signals' cancel; it records no stage): the first
control-plane node whose etcd member answers healthy takes the snapshot (etcdctl from the etcd
image the node runs: nothing to download, so air-gapped sites need nothing more), the
controller fetches it with its sha256, and the backup host keeps it (rackform.day2.etcd_backup:
the site's first storage host, else build/<site>/backups/), each place the newest
etcd_backup_keep (default 7, the role etcd_backup). Prints the snapshot's name, size, sha256
and where it is kept. Refused (exit 2) for a site without Kubernetes; not run (exit 1) where
this controller has no kubeconfig of the site's cluster. docs/operations.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from rackform.commands import cluster_playbook

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = "Snapshot the cluster's etcd and keep it off the control plane (etcd-backup.yml; docs/operations.md)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")


def run(args: argparse.Namespace) -> int:
    from rackform.day2 import etcd_backup
    from rackform.pipeline import build_dir

    site = cluster_site(args.site, args.root)
    project_dir = build_dir(args.root, site.name)
    place = etcd_backup.backup_place(site, project_dir)
    transit = etcd_backup.transit_dir(project_dir)
    print(f"backup {site.name}: a snapshot of etcd from the first healthy control-plane node "
          f"({', '.join(site.kubernetes.control_plane)}), kept in {place}")
    _empty(transit)
    try:
        code = run_etcd_playbook(site.name, args.root, etcd_backup.BACKUP_PLAYBOOK, place.envvars(transit),
                                 args.private_key)
        snapshot = etcd_backup.taken(transit)
    finally:
        shutil.rmtree(transit, ignore_errors=True)
    if code != EXIT_OK:
        return code
    if snapshot is None:
        print(f"rackform: {site.name}: {etcd_backup.BACKUP_PLAYBOOK} ran, but no snapshot with a matching sha256 "
              f"came back to {transit}", file=sys.stderr)
        return EXIT_FAILED
    print(f"snapshot {snapshot.name}: {snapshot.size_bytes} bytes, sha256 {snapshot.sha256}")
    print(f"kept in {place}/{snapshot.name} (and {snapshot.name}.sha256); restore it with "
          f"`rackform restore {site.name} --from {snapshot.name}`")
    return EXIT_OK


def cluster_site(site_name: str, root: Path):
    """The site, loaded and checked; BadInput (exit 2) where it has no Kubernetes cluster."""
    return cluster_playbook.cluster_site(site_name, root, "no etcd to back up or restore")


def _empty(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)


def run_etcd_playbook(site_name: str, root: Path, playbook: str, envvars: dict[str, str],
                      private_key: Path | None) -> int:
    """Run etcd-backup.yml or etcd-restore.yml through the stage runner, where a cluster exists
    (rackform.commands.cluster_playbook); the exit status."""
    return cluster_playbook.run_cluster_playbook(site_name, root, playbook, private_key=private_key, envvars=envvars)
