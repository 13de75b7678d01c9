"""Deploy and verify part of a site: `run_stages` with a limit, then `verify` of those hosts."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class Converged:
    ok: bool
    lines: list[str] = field(default_factory=list)
    failed_hosts: list[str] = field(default_factory=list)


def deploy(site_name: str, root: Path, limit: str | None, *, stages: Sequence[str] | None = None,
           private_key: Path | None = None, say: Callable[[str], None] = print, verbose: bool = False) -> Converged:
    """The site's stages (all, or `stages`) limited to `limit`; the deploy summary as lines."""
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.progress import ProgressDisplay
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_stages
    from rackform.run.summary import summary_lines

    try:
        site_run = run_stages(site_name, root, stages, limit=limit, progress=ProgressDisplay(sys.stdout, verbose=verbose),
                              private_key=private_key, say=say, via="cli")
    except (StageEnvironmentError, SiteLocked) as error:
        return Converged(False, [f"rackform: {error}"])
    report = site_run.report
    return Converged(report.ok, summary_lines(report), sorted(report.failed_hosts))


def verify(site_name: str, root: Path, hosts: str, *, private_key: Path | None = None,
           say: Callable[[str], None] = print) -> Converged:
    from rackform.pipeline import load_and_check
    from rackform.run.environment import stage_environment
    from rackform.run.verify import VerifyError
    from rackform.run.verify import verify as run_verify

    site, _warnings = load_and_check(site_name, root)
    envvars = stage_environment(site, set(), private_key=private_key, say=say).envvars
    try:
        report = run_verify(site_name, root, hosts=hosts, envvars=envvars, progress=say)
    except VerifyError as error:
        return Converged(False, [f"rackform: verify: {error}"])
    return Converged(report.ok, report.lines(), sorted({failure.host for failure in report.failures}))
