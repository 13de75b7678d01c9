"""What the commands that run one playbook against a site's running cluster share (`rackform
backup`, `restore`, `certs renew`): the site refused without a cluster, and the playbook run
through the stage runner (`rackform.run.stages.run_day2_playbook`: under the site's lock,
validate.yml first, the signals' cancel; no stage recorded) with its progress, summary and exit
status. Not a command of its own."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

EXIT_OK, EXIT_FAILED = 0, 1


def cluster_site(site_name: str, root: Path, nothing_to: str):
    """The site, loaded and checked; BadInput (exit 2) where it has no Kubernetes cluster, saying
    what there is then `nothing_to` do ("no etcd to back up or restore")."""
    from rackform.day2.errors import refuse
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(site_name, root)
    if site.kubernetes is None or not site.kubernetes.control_plane:
        raise refuse(None, "kubernetes", f"site {site.name} has no Kubernetes cluster (no kubernetes.control_plane "
                                         f"in its design): {nothing_to}")
    return site


def run_cluster_playbook(site_name: str, root: Path, playbook: str, *, private_key: Path | None,
                         envvars: dict[str, str] | None = None,
                         after_run: Callable[[object], None] | None = None) -> int:
    """Run `playbook` of the site's project, where a cluster exists; print the live progress and
    the summary; `after_run(result)` (the playbook's RunResult) prints what the command reports
    of it before the last line. Returns the exit status: 1 where it did not run (no cluster here:
    nothing was done, which must not pass as done) or a host failed."""
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
    if after_run is not None:
        after_run(result)
    failed = sorted({failure.host for failure in done.run.failures()})
    print(f"{playbook}: {result.status} (rc {result.rc})" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return EXIT_OK if report.ok else EXIT_FAILED
