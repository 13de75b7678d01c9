"""`Playbook`: one stage of a site as a Pulumi resource (a dynamic provider).

Every stage of `rackform.pipeline.STAGES`: the Ansible ones, and `platform` (no playbook:
the stage runner applies build/<site>/platform/ with kubectl and helm, as `rackform
deploy --stage platform` does; it is the `apply` of the GpuPlatform component).

The program computes each stage's digest (`rackform.pipeline.stage_digests`: a hash
of the rendered files that stage reads); the engine compares it with the digest
stored in the state, so `pulumi preview` lists exactly the stages that would run
again. `create`/`update` call `rackform.run.stages.run_stages` for the one stage:
the function `rackform deploy` calls, so both front doors render, validate, build
the stage environment, run, isolate failed hosts and record the applied digest
(state/<site>.json) the same way.

Failed hosts, as `rackform deploy` treats them: a host that fails a stage is left
out of the later ones (`failed_hosts` feeds the next stage's `left_out`) and the
stage succeeds for the others, with a warning; the stored digest is then marked
incomplete, so the next preview shows the stage again. A stage fails the resource
when it could not run to its end (a broken playbook, a cut run, no host left, a
platform apply that stopped at a failed kubectl or helm command or could not start), and
the last stage (`last`) fails when any host failed anywhere: `pulumi up` exits
non-zero where `rackform deploy` exits 1, after the healthy hosts were deployed.

Credentials come from the stack's configuration (`configure`, stacks/providers/
credentials.py), never from the resource's inputs or state.

Ctrl-C on `pulumi up`: the engine starts this process in a process group of its own, so
the terminal's SIGINT never reaches it; the first Ctrl-C (or SIGTERM) to `pulumi` makes
the engine send every provider the Cancel RPC and wait for the steps in flight, the
second kills the provider processes. The SDK's dynamic-provider server answers Cancel
with nothing and gives a ResourceProvider no hook for it, so `listen_for_engine_cancel`
makes that RPC ask for `rackform.run.interrupt`'s cancel, what the first SIGINT does to
`rackform deploy`: ansible-runner stops the running playbook, no later step starts,
nothing is recorded for the cut stage, and the resource fails saying so (its stored
digest stays, so the next `pulumi up` runs the stage again).

How the engine ships this provider: `pulumi.dynamic.Resource` pickles the provider
*instance* with dill into the state, and a separate `python -m pulumi.dynamic`
process unpickles it before calling `diff`/`create`/`update`. dill stores this
class by reference (`providers.playbook.PlaybookProvider`), so that process must be
able to import it (see docs/pulumi.md for the arrangement). Hence: no state on the
instance, no resources created at import time, and the heavy imports (rackform,
ansible-runner) inside methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

from providers.pickling import one_sorting_pickler

if TYPE_CHECKING:
    from rackform.run.ansible import RunResult

INPUT_KEYS = ("site", "stage", "root", "digest")
OPTIONAL_INPUT_KEYS = ("left_out", "last")
OUTPUT_KEYS = ("changed", "ok_hosts", "duration_s", "kubeconfig", "failed_hosts")
SECRET_OUTPUTS = ["kubeconfig"]
"""Stored encrypted in the state and shown as [secret]: the cluster's admin credentials."""
KUBECONFIG_STAGE = "kubernetes"
KUBECONFIG_ARTIFACT = "artifacts/kubeconfig"
"""Where the kubeadm role fetches the admin kubeconfig to, under build/<site>/."""
MAX_FAILURES_SHOWN = 20
"""A failed stage's message names at most this many hosts and tasks (the rest are counted)."""


class StageFailed(Exception):
    """The stage playbook ran and some hosts failed: Pulumi marks the resource failed."""


@dataclass(frozen=True, slots=True)
class PlaybookArgs:
    site: pulumi.Input[str]
    """Site name (topologies/sites/<site>.yaml)."""
    stage: pulumi.Input[str]
    """A stage of `rackform.pipeline.STAGES`: one with a playbook, or `platform`."""
    root: pulumi.Input[str]
    """Repo root holding topologies/ and inventories/; where build/<site>/ is written."""
    digest: pulumi.Input[str]
    """Hash of the rendered files the stage reads: a new digest means the stage runs again."""
    left_out: pulumi.Input[list[str]] | None = None
    """Hosts earlier stages lost (the previous stage's `failed_hosts`): not run here."""
    last: bool = False
    """The last stage of the chain: fails when any host failed anywhere."""


_CREDENTIALS: list = []
"""The stack's credentials, set by `configure` in the provider process (kept off the instance,
which dill pickles into the state)."""


class PlaybookProvider(ResourceProvider):
    """CRUD for one stage: run it when its digest changes, remember what it did."""

    serialize_as_secret_always = False  # the pickled provider holds no secrets; keep the state readable

    def configure(self, req) -> None:
        from providers.credentials import StageCredentials

        listen_for_engine_cancel()  # configure runs in the engine's provider process, before any create
        _CREDENTIALS[:] = [StageCredentials.from_config(req.config)]

    def cancel(self) -> None:
        """The engine's Cancel, where an SDK hands it to dynamic providers (see listen_for_engine_cancel)."""
        from rackform.run import interrupt

        interrupt.request_cancel(interrupt.PULUMI_CANCEL)

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        return CheckResult(news, _check_inputs(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # Only the digest says whether the stage must run again: `root` is where the
        # repo sits on this machine, not what is deployed.
        return DiffResult(
            changes=olds.get("digest") != news.get("digest"),
            replaces=[],
            stables=["site", "stage"],
            delete_before_replace=False,
        )

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"{props['site']}/{props['stage']}", outs=apply_stage(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=apply_stage(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # What the stage last did, as stored. Reading the live hosts back (drift on
        # `pulumi refresh`) comes with the per-node resources of later issues.
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """Forget the stage; the hosts (and, for `platform`, the cluster: releases, namespaces,
        workloads) keep what it did. The resource is also `retain_on_delete`, so a preview says
        so. Tearing hosts or the platform down is a separate, explicit operation."""


class Playbook(Resource, module="rackform", name="Playbook"):
    """One stage of a site (type `pulumi-python:dynamic/rackform:Playbook`)."""

    site: pulumi.Output[str]
    stage: pulumi.Output[str]
    digest: pulumi.Output[str]
    changed: pulumi.Output[int]
    """Tasks that changed something in the last run."""
    ok_hosts: pulumi.Output[int]
    """Hosts that finished the last run without a failure."""
    duration_s: pulumi.Output[float]
    kubeconfig: pulumi.Output[str]
    """The cluster's admin kubeconfig (secret) where the kubernetes stage fetched one, else ''."""

    failed_hosts: pulumi.Output[list[str]]
    """Hosts that have failed this stage or an earlier one (left out of the later stages)."""

    def __init__(self, name: str, args: PlaybookArgs, opts: pulumi.ResourceOptions | None = None):
        props = ({key: getattr(args, key) for key in INPUT_KEYS}
                 | {"left_out": args.left_out or [], "last": args.last} | dict.fromkeys(OUTPUT_KEYS))
        own = pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS, retain_on_delete=True)
        with one_sorting_pickler():  # providers/pickling.py: linear, and no RecursionError at 1,000 nodes
            super().__init__(PlaybookProvider(), name, props, pulumi.ResourceOptions.merge(opts, own))


def _engine_cancel(self, request, context):
    """What the dynamic-provider server's Cancel becomes. Its code runs as that method, in the SDK
    module's namespace: it names nothing of this module, only what it imports."""
    from google.protobuf import empty_pb2

    from rackform.run import interrupt

    interrupt.request_cancel(interrupt.PULUMI_CANCEL)
    return empty_pb2.Empty()


def listen_for_engine_cancel() -> bool:
    """Make the engine's Cancel RPC cancel the running stage; True where this process serves it.

    `python -m pulumi.dynamic` (the SDK's provider server, pulumi 3.x) registers its servicer's
    `Cancel` with gRPC when it starts; that method returns an empty answer and tells no provider.
    The bound method stays registered, so its code is replaced in place: from then on Cancel
    asks for `rackform.run.interrupt.request_cancel`, which the stage runner's ansible-runner
    polls (cancel_callback). An SDK whose ResourceProvider has a `cancel` hook calls
    `PlaybookProvider.cancel` itself, and nothing is replaced. Elsewhere (the program, tests)
    there is no such server and nothing changes.
    """
    from pulumi.dynamic import ResourceProvider
    from pulumi.runtime.proto.provider_pb2_grpc import ResourceProviderServicer

    if hasattr(ResourceProvider, "cancel"):
        return False
    for servicer in ResourceProviderServicer.__subclasses__():
        if servicer.__name__ == "DynamicResourceProviderServicer":
            servicer.Cancel.__code__ = _engine_cancel.__code__
            return True
    return False


RUNNER_STAGES = ("platform",)
"""Stages without a playbook that the stage runner runs itself (rackform.run.stages._stage_runners)."""


def _check_inputs(news: dict[str, Any]) -> list[CheckFailure]:
    from rackform.pipeline import STAGES

    failures = [CheckFailure(key, "required") for key in INPUT_KEYS if not news.get(key)]
    runnable = [stage.name for stage in STAGES if stage.playbook or stage.name in RUNNER_STAGES]
    if news.get("stage") and news["stage"] not in runnable:
        reason = f"'{news['stage']}' is not an Ansible stage; expected one of: {', '.join(runnable)}"
        failures.append(CheckFailure("stage", reason))
    return failures


def apply_stage(props: dict[str, Any]) -> dict[str, Any]:
    """Run the stage through the pipeline's stage runner; return the resource's outputs.

    Raises StageFailed when the stage could not run to its end, or (last stage) when
    any host failed; warns and carries on when only some hosts failed.
    """
    from providers.credentials import StageCredentials

    from rackform.run import interrupt
    from rackform.run.stage_process import run_stage_in_fresh_process
    from rackform.run.stages import applied_digest

    listen_for_engine_cancel()
    credentials = _CREDENTIALS[0] if _CREDENTIALS else StageCredentials()
    stage = props["stage"]
    with credentials.environment() as envvars:
        # Never forked from this gRPC process (rackform.run.stage_process says why).
        site_run = run_stage_in_fresh_process(props["site"], Path(props["root"]), stage, envvars=envvars,
                                              left_out=props.get("left_out") or [], via="pulumi",
                                              cancel_requested=interrupt.cancel_requested)
    report = site_run.report
    run = next(run for run in report.runs if run.step.name == stage)
    failed = sorted(set(report.failed_hosts) | set(props.get("left_out") or []))
    problem = _stage_problem(report, run, failed, last=bool(props.get("last")))
    if problem is not None:
        raise StageFailed(problem)
    if failed:
        pulumi.log.warn(f"stage '{stage}' of site '{props['site']}': {len(failed)} host(s) failed and are left out "
                        f"of later stages: {', '.join(failed[:MAX_FAILURES_SHOWN])}")
    result = run.result
    recorded = site_run.recorded.get(stage)
    return {
        **{key: props[key] for key in INPUT_KEYS},
        "left_out": props.get("left_out") or [],
        "last": bool(props.get("last")),
        "digest": applied_digest(recorded) if recorded else props["digest"],  # what actually ran
        "changed": result.changed,
        "ok_hosts": sum(stats.failed == 0 and stats.unreachable == 0 for stats in result.hosts.values()),
        "duration_s": result.duration_s,
        "kubeconfig": fetched_kubeconfig(site_run.project_dir, stage),
        "failed_hosts": failed,
    }


def _stage_problem(report, run, failed: list[str], *, last: bool) -> str | None:
    """Why the resource fails, or None when the stage ran (possibly without some hosts)."""
    site = report.site
    if report.interrupted is not None:
        cut = f"{report.interrupted}: ansible-runner cancelled the playbook" if run.result is not None else (
            f"not run: {report.interrupted}")
        lines = [f"stage '{run.step.name}' of site '{site}' {cut}; nothing was recorded for it in "
                 f"state/{site}.json and the resource keeps its stored digest: the next `pulumi up` runs it again"]
        cut_run = report.cut_step
        if cut_run is not None and cut_run.result.run_dir is not None:
            lines.append(f"ansible-runner artifacts: {cut_run.result.run_dir}")
        return "\n".join(lines)
    if run.result is None:
        why = run.not_run or "not run"
        broken = report.broken_step
        if broken is not None:
            return failure_message(site, broken.step.name, broken.result)
        return f"stage '{run.step.name}' of site '{site}' {why}" + (f"; failed hosts: {', '.join(failed)}" if failed else "")
    if report.interrupted is not None or run.broken:
        return failure_message(site, run.step.name, run.result)
    if run.step.playbook is None and not run.result.ok:
        # The platform acts on the cluster, not on hosts (its failure's host is "cluster"), and it
        # stops at the first command that fails: it could not run to its end.
        return failure_message(site, run.step.name, run.result)
    if last and failed:
        return failure_message(site, run.step.name, run.result) if run.result.failures else (
            f"site '{site}': {len(failed)} host(s) failed in earlier stages: {', '.join(failed[:MAX_FAILURES_SHOWN])}")
    return None


def fetched_kubeconfig(project_dir: Path, stage: str) -> str:
    """The admin kubeconfig the kubernetes stage fetched; '' where the bootstrap stopped before init."""
    path = project_dir / KUBECONFIG_ARTIFACT
    return path.read_text() if stage == KUBECONFIG_STAGE and path.is_file() else ""


def failure_message(site: str, stage: str, result: RunResult) -> str:
    """What a person reads in `pulumi up` when a stage fails (short, even for thousands of hosts)."""
    hosts = result.failed_hosts
    shown_hosts = ", ".join(hosts[:MAX_FAILURES_SHOWN]) + (", ..." if len(hosts) > MAX_FAILURES_SHOWN else "")
    lines = [f"stage '{stage}' of site '{site}' failed ({result.status}, rc {result.rc})"]
    lines.append(f"failed hosts ({len(hosts)}): {shown_hosts or 'none reported'}")
    lines += [f"  {failure}" for failure in result.failures[:MAX_FAILURES_SHOWN]]
    if len(result.failures) > MAX_FAILURES_SHOWN:
        lines.append(f"  ... and {len(result.failures) - MAX_FAILURES_SHOWN} more failed task(s)")
    if result.run_dir is not None:
        lines.append(f"ansible-runner artifacts: {result.run_dir}")
    return "\n".join(lines)
