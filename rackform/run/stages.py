"""Run stages of one site: the one function both front doors call.

`rackform deploy` calls `run_stages` with every stage (or those chosen); the Pulumi
`Playbook` provider calls it with one stage from `create`/`update`. Either way:

1. load and check the design (`rackform.pipeline.load_and_check`), and refuse a run whose
   stages serve the site mirror while its bundle was never built here; where it is here,
   make or keep the site's mirror keys the stages use: the bundle's apt repository signed with
   the site's key, the registry's TLS and push credential (`rackform.run.bundle_preflight`);
2. under the site's lock (`rackform.run.sitelock`: one deploying process per site),
   render the project to build/<site>/ (unchanged files stay untouched);
3. the stage environment (`rackform.run.environment`: SSH key, BMC vault);
4. validate.yml, then the stages in pipeline order (`rackform.run.deploy.deploy`):
   a host that fails is left out of later stages, within the site's
   max_fail_percentage; the platform stage applies build/<site>/platform/ with
   kubectl and helm where the site has a kubeconfig, and says why not otherwise;
5. each stage that ran for real is recorded with the digest of its inputs
   (`rackform.run.applied`), the digest Pulumi diffs on.

The result is a `SiteRun`: the deploy report (per stage, per host) and what was recorded.

Day-2 playbooks (`upgrade-cluster.yml`, `scale.yml`: `rackform upgrade`, `scale`, `node
replace`) run through `run_day2_playbook`, the same way: under the site's lock (never beside
a deploy, a rollout or a `pulumi up` of the site), validate.yml first, the cancel of
rackform.run.interrupt, and a record in state/<site>.json: the kubernetes stage, which the
playbook does the work of, at the inputs it ran with (see `run_day2_playbook`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.checks.findings import Finding
from rackform.pipeline import NOT_APPLICABLE, STAGES, build_dir, load_and_check, stage_fingerprints
from rackform.render.writer import WriteResult
from rackform.run import applied, retained
from rackform.run.ansible import RunResult, TaskFailure
from rackform.run.bundle_preflight import prepare_mirror
from rackform.run.deploy import VALIDATE_PLAYBOOK, DeployReport, Progress, Runner, Step, StepRun, deploy, plan_steps
from rackform.run.environment import require_collections, stage_environment
from rackform.run.sitelock import site_lock

PLATFORM_STAGE = "platform"
KUBERNETES_STAGE = "kubernetes"
INCOMPLETE_PREFIX = "incomplete:"
"""Marks a digest whose run left hosts out: the stage stays pending (Pulumi diffs on it too)."""


@dataclass(slots=True)
class SiteRun:
    site: str
    report: DeployReport
    rendered: WriteResult
    project_dir: Path
    warnings: list[Finding] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)
    """Stage -> digest of the inputs it ran with (for the stages that ran)."""
    recorded: dict[str, applied.AppliedStage] = field(default_factory=dict)
    """What was written to the applied state (nothing in check mode)."""

    @property
    def ok(self) -> bool:
        return self.report.ok


def run_stages(
    site_name: str,
    root: Path,
    stages: Sequence[str] | None = None,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    progress: Progress | None = None,
    private_key: Path | None = None,
    envvars: Mapping[str, str] | None = None,
    left_out: Collection[str] = (),
    via: str = "cli",
    runner: Runner | None = None,
    say: Callable[[str], None] | None = None,
    prune_tenants: Collection[str] = (),
) -> SiteRun:
    """Render, then run validate.yml and `stages` (all by default) of the site; see the module doc.

    Raises BadInput / DesignRejected for a design with errors (nothing rendered or run), BadInput too
    when a stage to run serves the site mirror and its bundle was never built here
    (rackform.run.bundle_preflight: nothing rendered or run),
    StageEnvironmentError when the Ansible collections the roles use are not installed, or the vault
    cannot be kept safely (or the site mirror's keys it keeps
    cannot be made or read), SiteLocked when another
    process deploys the site, PruneRefused when `prune_tenants` names a tenant that is not
    one removed from the design and still on the cluster (rackform.run.retained).
    """
    root = Path(root)
    site, warnings = load_and_check(site_name, root)
    from rackform.render.project import render_files
    from rackform.render.writer import write_project

    files = render_files(site)
    require_collections()  # before prepare_mirror, which may make the site's mirror keys
    mirror_env = prepare_mirror(site, root, files, [stage.playbook for stage in STAGES
                                                    if stage.playbook and (stages is None or stage.name in stages)],
                                envvars)
    project_dir = build_dir(root, site.name)
    if prune_tenants:
        if stages is not None and PLATFORM_STAGE not in stages:
            raise retained.PruneRefused("--prune-tenant deletes tenants in the platform stage: run it too "
                                        "(--stage platform); nothing was run")
        last = applied.load(root, site.name).get(PLATFORM_STAGE)
        retained.check_prune(prune_tenants, retained.retained_tenants(last, files), site.name)
    with site_lock(root, site.name, say=say):
        rendered = write_project(files, project_dir)
        if say is not None:
            say(_render_line(site.name, project_dir, rendered))
        steps = plan_steps(stages, check=check, unavailable=unavailable_stages(stages, project_dir, check=check,
                                                                                  files=files))
        wanted = {step.name for step in steps if step.not_run is None}
        env = stage_environment(site, wanted, private_key=private_key, given={**mirror_env, **(envvars or {})},
                                say=say)
        report = deploy(
            site.name, project_dir, steps, limit=limit, check=check, progress=progress, envvars=env.envvars,
            runner=runner, stage_runners=_stage_runners(project_dir, env.envvars, wanted, prune_tenants), diff=diff,
            left_out=left_out,
        )
        ran = {run.step.name for run in report.runs if run.result is not None}
        fingerprints = {name: found for name, found in stage_fingerprints(files).items() if name in ran}
        digests = {name: digest for name, (digest, _inputs) in fingerprints.items()}
        inputs = {name: files_read for name, (_digest, files_read) in fingerprints.items()}
        recorded = {} if check else _record(root, site.name, report, digests, inputs,
                                            limit=limit, via=via, left_out=left_out, pruned=prune_tenants)
    return SiteRun(site.name, report, rendered, project_dir, warnings, digests, recorded)


def _render_line(site: str, project_dir: Path, rendered: WriteResult) -> str:
    return (f"{site}: rendered {project_dir} ({len(rendered.added)} added, {len(rendered.modified)} changed, "
            f"{len(rendered.removed)} removed)")


def unavailable_stages(stages: Sequence[str] | None, project_dir: Path, *, check: bool = False,
                       files: Mapping[str, bytes] | None = None) -> dict[str, str]:
    """Stage -> why it cannot run from here: a stage the site gives nothing to do (its playbook
    is not in the rendered `files`, or else not in `project_dir`: rackform.pipeline.NOT_APPLICABLE),
    and the platform without a cluster.

    A run that bootstraps the cluster first (the kubernetes stage, for real) fetches the
    kubeconfig the platform needs: its absence now is no reason; every other one is.
    """
    reasons = {stage.name: f"not run: {NOT_APPLICABLE[stage.name]}" for stage in STAGES
               if stage.name in NOT_APPLICABLE and (stages is None or stage.name in stages)
               and not (stage.playbook in files if files is not None else (project_dir / stage.playbook).exists())}
    if stages is not None and PLATFORM_STAGE not in stages:
        return reasons
    bootstraps = not check and (stages is None or KUBERNETES_STAGE in stages)
    reason = platform_unavailable(project_dir, kubeconfig_to_come=bootstraps)
    return {**reasons, PLATFORM_STAGE: f"not run: {reason}"} if reason else reasons


def platform_unavailable(project_dir: Path, *, kubeconfig_to_come: bool = False) -> str | None:
    """Why the platform cannot be applied from here, or None when it can."""
    from rackform.run import platform_apply

    try:
        platform_apply.check_ready(project_dir, kubeconfig_to_come=kubeconfig_to_come)
    except platform_apply.PlatformUnavailable as why:
        return why.reason
    return None


def _stage_runners(project_dir: Path, envvars: Mapping[str, str], wanted: set[str],
                   prune_tenants: Collection[str] = ()) -> dict[str, Callable[..., RunResult]]:
    if PLATFORM_STAGE not in wanted:
        return {}
    from rackform.run import platform_apply

    def apply(*, check: bool, event_handler=None) -> RunResult:
        environ = {**os.environ, **envvars}
        try:
            return platform_apply.apply_platform(project_dir, platform_apply.platform_kubeconfig(project_dir, environ),
                                                 check=check, environ=environ, prune_tenants=prune_tenants)
        except platform_apply.PlatformUnavailable as why:  # e.g. a release with no chart repository
            return RunResult(playbook="platform", status="failed", rc=1, hosts={},
                             failures=[TaskFailure(platform_apply.CLUSTER, "platform", why.reason)])

    def unavailable() -> str | None:
        """Why the platform cannot run now that the stages before it ran (a bootstrap that
        stopped fetches no kubeconfig): the summary says so instead of a failure."""
        reason = platform_unavailable(project_dir)
        return f"not run: {reason}" if reason else None

    apply.unavailable = unavailable  # type: ignore[attr-defined]
    return {PLATFORM_STAGE: apply}


def _record(root: Path, site: str, report: DeployReport, digests: Mapping[str, str],
            inputs: Mapping[str, dict[str, str]], *, limit: str | None, via: str,
            left_out: Collection[str], pruned: Collection[str] = ()) -> dict[str, applied.AppliedStage]:
    """Record every stage that ran to its end (not cut, not broken) with what it did; the platform
    stage also carries the tenants it keeps though the design dropped them (less those pruned)."""
    recorded = {}
    before = applied.load(root, site).get(PLATFORM_STAGE)
    for run in report.runs:
        if run.step.name not in digests or not _finished(run):
            continue
        failed = sorted({failure.host for failure in run.failures()} | set(run.left_out))
        entry = applied.AppliedStage(
            digest=digests[run.step.name], complete=limit is None and not failed and not left_out,
            applied_at=applied.now(), by=applied.who(), via=via, hosts=len(run.result.hosts),
            changed=run.result.changed, failed_hosts=failed, files=dict(inputs.get(run.step.name, {})),
            retained_tenants=(retained.retained_tenants(before, inputs.get(run.step.name, {}), pruned)
                              if run.step.name == PLATFORM_STAGE else []),
        )
        applied.record(root, site, run.step.name, entry)
        recorded[run.step.name] = entry
    return recorded


def _finished(run: StepRun) -> bool:
    return run.result is not None and run.result.status != "canceled" and not run.broken


def applied_digest(entry: applied.AppliedStage) -> str:
    """The digest as Pulumi stores it: marked when the run left hosts out, so the stage stays pending."""
    return entry.digest if entry.complete else INCOMPLETE_PREFIX + entry.digest


@dataclass(slots=True)
class Day2Run:
    """What `run_day2_playbook` did: nothing (`absent` says why), or the run and what it recorded."""

    site: str
    playbook: str
    report: DeployReport | None
    absent: str | None = None
    """Why the playbook did not run: the site has no cluster to run it on."""
    recorded: applied.AppliedStage | None = None
    not_recorded: str | None = None
    """Why the stage the playbook stands for was left as state/<site>.json had it (None when recorded)."""

    @property
    def run(self) -> StepRun | None:
        return self.report.runs[-1] if self.report is not None else None


def run_day2_playbook(
    site_name: str,
    root: Path,
    playbook: str,
    *,
    limit: str | None = None,
    change: Callable[[], None] | None = None,
    stands_for: str | None = KUBERNETES_STAGE,
    progress: Progress | None = None,
    private_key: Path | None = None,
    envvars: Mapping[str, str] | None = None,
    via: str = "cli",
    runner: Runner | None = None,
    say: Callable[[str], None] | None = None,
) -> Day2Run:
    """Run a day-2 playbook of the site's project (upgrade-cluster.yml, scale.yml) as a stage runs.

    Under the site's lock: `change` (the edit the command makes to the site's files, e.g. the
    upgrade's new kubernetes.version), the render, then, where the site has a cluster (a
    kubeconfig: rackform.run.cluster), validate.yml and the playbook, cancelled by a signal
    like any stage. Without a cluster nothing runs and `absent` says why (the change is kept).

    What is recorded: the playbook does the `stands_for` stage's work (the kubernetes stage:
    upgrade-cluster.yml brings every node to the pinned version, scale.yml joins nodes), so
    when it runs to its end that stage is recorded at the inputs it ran with, `via` "cli
    upgrade-cluster.yml", and `rackform plan` and `pulumi preview` do not list it again for
    a version that is already on the cluster. Only when the stage was applied, before the
    change, at exactly the inputs the run started from: a stage with changes of its own
    still has work no day-2 playbook does, and is left as it was (plan keeps naming its
    files). The record is complete only when the earlier one was and no host failed; a
    limited run (scale.yml) at new inputs is not complete. Other stages are never recorded
    (e.g. the os stage's apt lists on hosts outside the cluster stay the os stage's work).
    `stands_for` None: a playbook that does no stage's work (etcd-backup.yml, etcd-restore.yml)
    records nothing, and Day2Run says neither `recorded` nor `not_recorded`.

    Raises what run_stages raises (BadInput, DesignRejected, StageEnvironmentError,
    SiteLocked); SiteLocked before `change` is made, so a locked site is left untouched.
    """
    from rackform.run import cluster
    from rackform.render.project import render_files
    from rackform.render.writer import write_project

    root = Path(root)
    with site_lock(root, site_name, say=say):
        site, _warnings = load_and_check(site_name, root)
        files = render_files(site)
        started_from = stage_fingerprints(files).get(stands_for)
        if change is not None:
            change()
            site, _warnings = load_and_check(site_name, root)
            files = render_files(site)
        project_dir = build_dir(root, site.name)
        rendered = write_project(files, project_dir)
        if say is not None:
            say(_render_line(site.name, project_dir, rendered))
        k8s = cluster.find(project_dir)
        if k8s.absent:
            return Day2Run(site.name, playbook, None, absent=k8s.absent.split(": nothing")[0])
        # upgrade-cluster.yml serves the target release's bundle: its keys, as a deploy's
        mirror_env = prepare_mirror(site, root, files, [playbook], envvars)
        env = stage_environment(site, {stands_for} - {None}, private_key=private_key,
                                given={**mirror_env, **(envvars or {})}, say=say)
        name = Path(playbook).stem
        steps = [Step("validate", VALIDATE_PLAYBOOK, "validate"), Step(name, playbook, name)]
        report = deploy(site.name, project_dir, steps, limit=limit, progress=progress, envvars=env.envvars,
                        runner=runner)
        run = report.runs[-1]
        if not _finished(run):
            why = report.interrupted or (run.not_run or "").removeprefix("not run: ") or "it did not run to its end"
            return Day2Run(site.name, playbook, report, not_recorded=f"{playbook} {why}")
        if stands_for is None:
            return Day2Run(site.name, playbook, report)
        now_at = stage_fingerprints(files).get(stands_for)
        before = applied.load(root, site.name).get(stands_for)
        if now_at is None or started_from is None:
            return Day2Run(site.name, playbook, report, not_recorded=f"the site has no {stands_for} stage")
        if before is None or before.digest != started_from[0]:
            state = "was never applied" if before is None else "has changes of its own (rackform plan lists them)"
            return Day2Run(site.name, playbook, report, not_recorded=(
                f"the {stands_for} stage {state}: {playbook} does not do them; deploy the stage"))
        failed = {failure.host for failure in run.failures()}
        digest, inputs = now_at
        entry = applied.AppliedStage(
            digest=digest, complete=before.complete and not failed and (limit is None or digest == before.digest),
            applied_at=applied.now(), by=applied.who(), via=f"{via} {playbook}", hosts=len(run.result.hosts),
            changed=run.result.changed, failed_hosts=sorted(failed | set(before.failed_hosts)), files=dict(inputs),
        )
        applied.record(root, site.name, stands_for, entry)
    return Day2Run(site.name, playbook, report, recorded=entry)
