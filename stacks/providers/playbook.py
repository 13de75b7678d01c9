"""`Playbook`: one Ansible stage of a site as a Pulumi resource (a dynamic provider).

The program computes each stage's digest (a hash of the rendered files that stage
reads); the engine compares it with the digest stored in the state, so `pulumi
preview` lists exactly the stages that would run again. `create`/`update` render
the project to build/<site>/ and run the stage playbook through ansible-runner.
The digest is `rackform.render.digest.stage_digest` over `rackform.render.project.
render_files(site)`, in the program and here alike.

How the engine ships this provider: `pulumi.dynamic.Resource` pickles the provider
*instance* with dill into the state, and a separate `python -m pulumi.dynamic`
process unpickles it before calling `diff`/`create`/`update`. dill stores this
class by reference (`providers.playbook.PlaybookProvider`), so that process must be
able to import it: Pulumi starts both the program and its dynamic-provider
process in the program directory (`main: stacks/` in Pulumi.yaml), which puts
stacks/ on sys.path. Hence: no state on the instance, no resources created at
import time, and the heavy imports (rackform, ansible-runner) inside methods.
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

if TYPE_CHECKING:
    from rackform.run.ansible import RunResult

INPUT_KEYS = ("site", "stage", "root", "digest")
OUTPUT_KEYS = ("changed", "ok_hosts", "duration_s", "kubeconfig")
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
    """A stage of `rackform.pipeline.STAGES` that has a playbook."""
    root: pulumi.Input[str]
    """Repo root holding topologies/ and inventories/; where build/<site>/ is written."""
    digest: pulumi.Input[str]
    """Hash of the rendered files the stage reads: a new digest means the stage runs again."""


class PlaybookProvider(ResourceProvider):
    """CRUD for one stage: run it when its digest changes, remember what it did."""

    serialize_as_secret_always = False  # the pickled provider holds no secrets; keep the state readable

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
        # A stage that has run cannot be un-run: dropping it from the program only
        # forgets it. Tearing hosts down is a separate, explicit operation.
        return None


class Playbook(Resource, module="rackform", name="Playbook"):
    """One Ansible stage of a site (type `pulumi-python:dynamic/rackform:Playbook`)."""

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

    def __init__(self, name: str, args: PlaybookArgs, opts: pulumi.ResourceOptions | None = None):
        props = {key: getattr(args, key) for key in INPUT_KEYS} | dict.fromkeys(OUTPUT_KEYS)
        secret = pulumi.ResourceOptions(additional_secret_outputs=SECRET_OUTPUTS)
        super().__init__(PlaybookProvider(), name, props, pulumi.ResourceOptions.merge(opts, secret))


def _check_inputs(news: dict[str, Any]) -> list[CheckFailure]:
    from rackform.pipeline import STAGES

    failures = [CheckFailure(key, "required") for key in INPUT_KEYS if not news.get(key)]
    ansible_stages = [stage.name for stage in STAGES if stage.playbook]
    if news.get("stage") and news["stage"] not in ansible_stages:
        reason = f"'{news['stage']}' is not an Ansible stage; expected one of: {', '.join(ansible_stages)}"
        failures.append(CheckFailure("stage", reason))
    return failures


def apply_stage(props: dict[str, Any]) -> dict[str, Any]:
    """Render the site's project, run the stage playbook, return the resource's outputs.

    Raises StageFailed naming the failed hosts and tasks when the run is not ok.
    """
    from rackform.pipeline import STAGES, build_dir, load_and_check
    from rackform.render.digest import stage_digest
    from rackform.render.project import render_files
    from rackform.render.writer import write_project
    from rackform.run import ansible

    root = Path(props["root"])
    stage = next(stage for stage in STAGES if stage.name == props["stage"])
    site, _warnings = load_and_check(props["site"], root)
    files = render_files(site)
    project_dir = build_dir(root, site.name)
    write_project(files, project_dir)
    result = ansible.run_playbook(project_dir, stage.playbook)
    if not result.ok:
        raise StageFailed(failure_message(props["site"], stage.name, result))
    return {
        **{key: props[key] for key in INPUT_KEYS},
        "digest": stage_digest(files, stage.name),  # what actually ran
        "changed": result.changed,
        "ok_hosts": sum(stats.failed == 0 and stats.unreachable == 0 for stats in result.hosts.values()),
        "duration_s": result.duration_s,
        "kubeconfig": fetched_kubeconfig(project_dir, stage.name),
    }


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
