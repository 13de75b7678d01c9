"""`rackform scale SITE --nodes HOSTS`: join nodes (after `node add`) to the cluster with scale.yml.

scale.yml runs limited to the new nodes and the control plane (for its facts and the join
token only), through the stage runner (`rackform.run.stages.run_day2_playbook`: under the
site's lock, validate.yml first, the kubernetes stage recorded in state/<site>.json). Where
the site has no cluster (no kubeconfig: rackform.run.cluster) that is said and exit 1:
there is nothing to join.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = "Join new nodes to the site's Kubernetes cluster (scale.yml), after `rackform node add`."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--nodes", required=True, metavar="HOSTS", help="comma-separated new node names")
    parser.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    parser.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")


def run(args: argparse.Namespace) -> int:
    from rackform.commands.upgrade import run_maintenance_playbook
    from rackform.run import cluster
    from rackform.day2.errors import refuse
    from rackform.pipeline import build_dir, load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    if site.kubernetes is None:
        raise refuse(site.loc, "kubernetes", "the site has no Kubernetes section: nothing to scale")
    nodes = [name.strip() for name in args.nodes.split(",") if name.strip()]
    unknown = [name for name in nodes if name not in site.hosts]
    if unknown:
        raise refuse(site.loc, "--nodes", f"unknown host(s) {', '.join(unknown)}; the site's hosts are: "
                                          f"{', '.join(sorted(site.hosts))}")
    members = [name for name in nodes if name in (site.kubernetes.control_plane or [])]
    if members:
        raise refuse(site.kubernetes_loc, "--nodes", f"{', '.join(members)} are control-plane nodes: scale.yml "
                                                     f"joins workers")
    limit = ",".join([*nodes, "kube_control_plane"])
    print(f"scale {site.name}: scale.yml --limit {limit}")
    if args.dry_run:
        print("dry run: nothing was run")
        return EXIT_OK
    k8s = cluster.find(build_dir(args.root, site.name))
    if k8s.absent:
        print(f"scale {site.name}: not run: {k8s.absent.split(': nothing')[0]}; there is no cluster to join")
        return EXIT_FAILED
    code = run_maintenance_playbook(args.site, args.root, "scale.yml", limit, args.private_key, absent_exit=EXIT_FAILED)
    print(f"scale {site.name}: {', '.join(nodes)} " + ("joined" if code == EXIT_OK else "not joined"))
    return code
