"""`rackform restore SITE --from SNAPSHOT`: the cluster's etcd brought back to a snapshot.

SNAPSHOT is a file name `rackform backup` printed, kept where backups are kept
(rackform.day2.etcd_backup.backup_place). Refused (exit 2, nothing changed) for a site without
Kubernetes, a name that is no snapshot's, and, where the controller keeps the snapshots, one
that is missing or does not match its .sha256; where a storage host keeps them, the playbook's
first play refuses the same there, before any control-plane node is touched. Not run (exit 1)
without a kubeconfig of the site's cluster.

Then etcd-restore.yml, through the stage runner (under the site's lock, validate.yml first),
on every control-plane node: the API server and etcd stopped (their static pod manifests
moved aside), /var/lib/etcd/member moved aside (kept), the snapshot restored with etcdutl into a fresh
data dir with the node's member name and peer URL and the whole --initial-cluster; etcd started
everywhere, then the API servers; done when etcd has one healthy member per control-plane node
and the API answers through the cluster's endpoint. Everything written to the cluster after the
snapshot is lost: that is what a restore is. docs/operations.md.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from rackform.commands.backup import EXIT_OK, cluster_site, run_etcd_playbook

HELP = ("Restore the cluster's etcd from a snapshot of `rackform backup` on every control-plane node "
        "(etcd-restore.yml; docs/operations.md).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--from", dest="snapshot", required=True, metavar="SNAPSHOT",
                        help="the snapshot's file name, as `rackform backup` printed it")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")


def run(args: argparse.Namespace) -> int:
    from rackform.day2 import etcd_backup
    from rackform.pipeline import build_dir

    site = cluster_site(args.site, args.root)
    name = etcd_backup.check_name(site, args.snapshot)
    project_dir = build_dir(args.root, site.name)
    place = etcd_backup.backup_place(site, project_dir)
    if place.host is None:
        snapshot = etcd_backup.check_snapshot(site, place.directory, name)
        print(f"restore {site.name}: {name} ({snapshot.size_bytes} bytes, sha256 {snapshot.sha256}) from {place}")
    else:
        print(f"restore {site.name}: {name} from {place} (checked against its sha256 there first)")
    nodes = ", ".join(site.kubernetes.control_plane)
    print(f"on {nodes}: stop the API servers and etcd, move /var/lib/etcd/member aside, restore every member from "
          f"{name}, start etcd, then the API servers; wait for every member healthy and the API ready. "
          f"What the cluster stored after the snapshot is lost.")
    transit = etcd_backup.transit_dir(project_dir)
    shutil.rmtree(transit, ignore_errors=True)
    transit.mkdir(parents=True, mode=0o700)
    try:
        code = run_etcd_playbook(site.name, args.root, etcd_backup.RESTORE_PLAYBOOK,
                                 {**place.envvars(transit), "RACKFORM_ETCD_SNAPSHOT": name}, args.private_key)
    finally:
        shutil.rmtree(transit, ignore_errors=True)
    if code == EXIT_OK:
        print(f"restore {site.name}: etcd is at {name} on {nodes}; the old member folders are kept under "
              f"/var/lib/rackform/etcd-restore/ on each node")
    return code
