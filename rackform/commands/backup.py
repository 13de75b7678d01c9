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
    from rackform.day2.errors import refuse
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(site_name, root)
    if site.kubernetes is None or not site.kubernetes.control_plane:
        raise refuse(None, "kubernetes", f"site {site.name} has no Kubernetes cluster (no kubernetes.control_plane "
                                         f"in its design): no etcd to back up or restore")
    return site


def _empty(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)


def run_etcd_playbook(site_name: str, root: Path, playbook: str, envvars: dict[str, str],
                      private_key: Path | None) -> int:
    """Run etcd-backup.yml or etcd-restore.yml through the stage runner, where a cluster exists.

    Prints the live progress and the summary; returns the exit status (1 where there is no
    cluster to run it on: nothing was done, which a backup or a restore must not pass over).
    """
    from rackform.run import interrupt
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.progress import ProgressDisplay
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_day2_playbook
    from rackform.run.summary import summary_lines

    try:
        done = run_day2_playbook(site_name, root, playbook, stands_for=None, envvars=envvars,
                                 private_key=private_key, progress=ProgressDisplay(sys.stdout), say=print)
    except (SiteLocked, StageEnvironmentError) as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_FAILED
    if done.absent:
        print(f"rackform: {site_name}: {playbook} not run: {done.absent}", file=sys.stderr)
        return EXIT_FAILED
    report = done.report
    print()
    print("\n".join(summary_lines(report)))
    if report.interrupted is not None:
        print(f"rackform: {report.site}: {report.interrupted}; nothing more was started", file=sys.stderr)
        return interrupt.exit_code()
    result = done.run.result
    if result is None:
        print(f"{playbook}: {done.run.not_run}", file=sys.stderr)
        return EXIT_FAILED
    failed = sorted({failure.host for failure in done.run.failures()})
    print(f"{playbook}: {result.status} (rc {result.rc})" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_OK if report.ok else EXIT_FAILED
