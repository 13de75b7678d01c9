"""`rackform upgrade SITE --to VERSION`: pin the new Kubernetes version and run upgrade-cluster.yml.

Refused (exit 2, nothing touched) when the matrix does not allow the step, with what else
must change, and where the playbook would run but this controller never built the target
release's mirror bundle (rackform.run.bundle_preflight: upgrade-cluster.yml serves it first). Under the site's lock (exit 1 and nothing written while a deploy, a rollout or a
`pulumi up` holds it), the version is written into the site file with a round-trip edit; where
a cluster exists (a kubeconfig: rackform.run.cluster) the emitted upgrade-cluster.yml runs
through the stage runner (`rackform.run.stages.run_day2_playbook`: validate.yml first, the
signals' cancel, the kubernetes stage recorded in state/<site>.json); where none does, that
is said and nothing runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
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
    _refuse_without_the_targets_bundle(site, args.root, args.to)
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
    written: list[bool] = []

    def pin() -> None:  # under the site's lock: a locked site is refused before anything is written
        files.write(args.root, changes)
        written.append(True)

    code = run_maintenance_playbook(args.site, args.root, "upgrade-cluster.yml", None, args.private_key, change=pin)
    if not written:
        return code
    print(f"upgrade {site.name}: kubernetes.version {site.kubernetes.version} -> {args.to}"
          + ("" if code == EXIT_OK else " (written; the playbook did not run to success)"))
    return code


def _refuse_without_the_targets_bundle(site, root: Path, target: str) -> None:
    """BadInput, before anything is written, where upgrade-cluster.yml would run (the site has a
    cluster) and its first play would find no bundle of `target` to serve from the mirror host."""
    from rackform.pipeline import build_dir
    from rackform.run import cluster
    from rackform.run.bundle_preflight import refuse_missing_bundle

    if cluster.find(build_dir(root, site.name)).absent is None:
        refuse_missing_bundle(site, root, ["upgrade-cluster.yml"], version=target)


def run_maintenance_playbook(site_name: str, root: Path, playbook: str, limit: str | None,
                             private_key: Path | None, *, change: Callable[[], None] | None = None,
                             absent_exit: int = EXIT_OK) -> int:
    """Run one of the project's maintenance playbooks through the stage runner, where a cluster exists.

    `change` (the command's edit of the site's files) is made under the site's lock first.
    Prints the live progress, the summary and what was recorded; returns the exit status.
    """
    from rackform.run import interrupt
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.progress import ProgressDisplay
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_day2_playbook
    from rackform.run.summary import summary_lines

    try:
        done = run_day2_playbook(site_name, root, playbook, limit=limit, change=change, private_key=private_key,
                                 progress=ProgressDisplay(sys.stdout), say=print)
    except (SiteLocked, StageEnvironmentError) as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_FAILED
    if done.absent:
        print(f"{playbook} not run: {done.absent}" + ("; the change is recorded and the kubernetes stage installs "
                                                      "it on the next deploy" if change is not None else ""))
        return absent_exit
    report = done.report
    print()
    print("\n".join(summary_lines(report)))
    if done.recorded is not None:
        print(f"{report.site}: kubernetes stage recorded as applied by {playbook}"
              + ("" if done.recorded.complete else " (not on every host: rackform plan shows it pending)"))
    else:
        print(f"{report.site}: kubernetes stage not recorded: {done.not_recorded}")
    if report.interrupted is not None:
        print(f"rackform: {report.site}: {report.interrupted}; nothing more was started", file=sys.stderr)
        return interrupt.exit_code()
    run = done.run
    result = run.result
    if result is None:
        print(f"{playbook}: {run.not_run}", file=sys.stderr)
        return EXIT_FAILED
    failed = sorted({failure.host for failure in run.failures()})
    print(f"{playbook}: {result.status} (rc {result.rc})" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_OK if report.ok else EXIT_FAILED
