"""`rackform upgrade SITE --to VERSION`: pin the new Kubernetes version and run upgrade-cluster.yml.

Refused (exit 2, nothing touched) when the matrix does not allow the step, with what else
must change. The version is written into the site file with a round-trip edit; where a
cluster exists (a kubeconfig: rackform.day2.cluster) the emitted upgrade-cluster.yml runs
through the same runner as the stages; where none does, that is said and nothing runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = "Upgrade the site's Kubernetes (one minor at a time, as the version matrix allows): upgrade-cluster.yml."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--to", required=True, metavar="VERSION", help="Kubernetes version, e.g. 1.36.3")
    parser.add_argument("--dry-run", action="store_true", help="check the step and show the diff; change nothing")
    parser.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")


def run(args: argparse.Namespace) -> int:
    from rackform.day2 import files, upgrade
    from rackform.day2.add import site_file
    from rackform.day2.errors import refuse
    from rackform.day2.yamledit import YamlFile
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    upgrade.check_step(site, args.root, args.to)
    if site.kubernetes.version == args.to:
        print(f"upgrade {site.name}: already at {args.to}: nothing to do")
        return EXIT_OK
    document = YamlFile.load(args.root / site_file(site.name))
    kubernetes = document.data.get("kubernetes")
    if not hasattr(kubernetes, "insert"):
        raise refuse(site.kubernetes_loc, "kubernetes", f"{site_file(site.name)} has no kubernetes mapping to pin "
                                                        f"the version in")
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    version = DoubleQuotedScalarString(args.to)  # as the shipped files write it: never read as a number
    if "version" in kubernetes:
        kubernetes["version"] = version
    else:
        kubernetes.insert(0, "version", version)
    changes = [files.FileChange(site_file(site.name), document.original, document.text())]
    print(files.diff_text(changes), end="")
    files.check_on_copy(site.name, args.root, changes)
    if args.dry_run:
        print(f"dry run: {site.kubernetes.version} -> {args.to} is allowed; nothing was written or run")
        return EXIT_OK
    files.write(args.root, changes)
    code = run_maintenance_playbook(args.site, args.root, "upgrade-cluster.yml", None, args.private_key)
    print(f"upgrade {site.name}: kubernetes.version {site.kubernetes.version} -> {args.to}"
          + ("" if code == EXIT_OK else " (written; the playbook did not run to success)"))
    return code


def run_maintenance_playbook(site_name: str, root: Path, playbook: str, limit: str | None,
                             private_key: Path | None) -> int:
    """Render the project, then run one of its maintenance playbooks where a cluster exists."""
    from rackform.day2 import cluster
    from rackform.pipeline import build_dir, load_and_check
    from rackform.render.project import render_project
    from rackform.run.ansible import run_playbook
    from rackform.run.environment import stage_environment
    from rackform.run.sitelock import SiteLocked, site_lock

    site, _warnings = load_and_check(site_name, root)
    project = build_dir(root, site.name)
    try:
        # One run at a time per site: never beside a deploy, a rollout or a `pulumi up` of it.
        with site_lock(root, site.name, say=print):
            render_project(site, project)
            k8s = cluster.find(project)
            if k8s.absent:
                print(f"{playbook} not run: {k8s.absent.split(': nothing')[0]}; the change is recorded and the "
                      f"kubernetes stage installs it on the next deploy")
                return EXIT_OK
            envvars = stage_environment(site, {"kubernetes"}, private_key=private_key, say=print).envvars
            result = run_playbook(project, playbook, limit=limit, envvars=envvars, quiet=False)
    except SiteLocked as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_FAILED
    failed = sorted({failure.host for failure in result.failures})
    print(f"{playbook}: {result.status} (rc {result.rc})" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_OK if result.status == "successful" else EXIT_FAILED
