"""What a deploy of a site would do now, stage by stage, without touching anything.

A stage is compared with what was last applied to it (`rackform.run.applied`,
state/<site>.json), using the digests `rackform deploy` and the Pulumi `Playbook`
record and diff on (`rackform.pipeline.stage_fingerprints`):

    new        never applied
    changed    its inputs differ from what was applied (the files are named)
    pending    applied, but not to every host (a --limit, or hosts that failed)
    unchanged  applied, with these very inputs
    blocked    would run, but cannot from here (the platform without a kubeconfig,
               kubectl or helm): not counted as work to do, the reason is shown

verify checks what every stage before it did, so it is `changed` whenever any of
them is. The rendering happens in memory: build/<site>/ is not written.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rackform.model.source import BadInput
from rackform.pipeline import STAGES, VERIFY_STAGE, DesignRejected, build_dir, load_and_check, stage_fingerprints
from rackform.render.project import render_files
from rackform.run import applied
from rackform.run.retained import retained_tenants
from rackform.run.stages import unavailable_stages

PLATFORM = "platform"

NEW, CHANGED, PENDING, UNCHANGED, BLOCKED = "new", "changed", "pending", "unchanged", "blocked"
TO_RUN = (NEW, CHANGED, PENDING)


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    change: str
    """added, modified or removed, against the inputs the stage was last applied with."""


@dataclass(slots=True)
class StagePlan:
    stage: str
    status: str
    digest: str
    reason: str = ""
    files: list[FileChange] = field(default_factory=list)

    @property
    def runs(self) -> bool:
        return self.status in TO_RUN

    def as_dict(self) -> dict:
        return {"stage": self.stage, "status": self.status, "reason": self.reason, "digest": self.digest,
                "files": [{"path": f.path, "change": f.change} for f in self.files]}


@dataclass(slots=True)
class SitePlan:
    site: str
    stages: list[StagePlan]
    rendered: dict[str, bytes] = field(default_factory=dict, repr=False)
    project_dir: Path | None = None
    retained_tenants: list[str] = field(default_factory=list)
    """Tenants removed from the design whose namespaces the platform keeps (rackform.run.retained)."""

    @property
    def to_run(self) -> list[str]:
        return [stage.stage for stage in self.stages if stage.runs]

    def as_dict(self) -> dict:
        return {"site": self.site, "to_run": self.to_run, "stages": [stage.as_dict() for stage in self.stages],
                "retained_tenants": self.retained_tenants}


def plan_sites(names: list[str], root: Path, *, keep_render: bool = False) -> list[tuple[SitePlan | None, list[str]]]:
    """(plan or None, error lines) per site, in order (`plan_one`); several sites are planned on
    every core (each is independent: load, check, render in memory, compare)."""
    if len(names) < 2:
        return [plan_one(name, root, keep_render) for name in names]
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from rackform.checks.runner import check_modules

    # The first site is planned here, before the workers fork: they inherit what it made ready
    # (the check families, render's templates and collection files, the stage runner's
    # imports) instead of each making its own, about 0.2 s CPU per process.
    check_modules()
    first = plan_one(names[0], root, keep_render)
    rest = names[1:]
    workers = min(len(rest), os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return [first, *pool.map(plan_one, rest, [root] * len(rest), [keep_render] * len(rest),
                                 chunksize=max(1, len(rest) // (workers * 4)))]


def plan_one(name: str, root: Path, keep_render: bool = False) -> tuple[SitePlan | None, list[str]]:
    """(the site's plan, no lines), or (None, the lines saying why there is none)."""
    try:
        plan = plan_site(name, root)
    except (BadInput, DesignRejected) as error:
        lines = [str(line) for line in getattr(error, "errors", None) or getattr(error, "findings", [])]
        return None, [*lines, f"rackform plan: {name}: the design has errors; no plan"]
    except applied.AppliedStateError as error:
        return None, [f"rackform plan: {error}"]
    if not keep_render:
        plan.rendered = {}  # megabytes per site, needed only for --diff
    return plan, []


def plan_site(site_name: str, root: Path) -> SitePlan:
    """The plan of one site; BadInput / DesignRejected for a design with errors."""
    root = Path(root)
    site, _warnings = load_and_check(site_name, root)
    # No stage reads the rack diagrams (rackform.render.digest), nor does a plan: not drawn.
    files = render_files(site, diagrams=False)
    project_dir = build_dir(root, site.name)
    plan = compare(site.name, files, applied.load(root, site.name), project_dir)
    return block_unavailable(plan, project_dir)


def block_unavailable(plan: SitePlan, project_dir: Path) -> SitePlan:
    """Stages that would run but cannot from here become `blocked`, with the reason."""
    reasons = unavailable_stages(plan.to_run, project_dir, files=plan.rendered)
    for stage in plan.stages:
        if stage.stage in reasons:
            stage.reason = f"{stage.status}, but {reasons[stage.stage].removeprefix('not run: ')}"
            stage.status = BLOCKED
    return plan


def compare(site: str, files: dict[str, bytes], last: dict[str, applied.AppliedStage],
            project_dir: Path | None = None) -> SitePlan:
    """The plan for a render (`files`) against the applied state `last`."""
    fingerprints = stage_fingerprints(files)
    plans: list[StagePlan] = []
    for stage in STAGES:
        if stage.name not in fingerprints:
            continue
        digest, inputs = fingerprints[stage.name]
        plans.append(_stage_plan(stage.name, digest, inputs, last.get(stage.name), plans))
    kept = retained_tenants(last.get(PLATFORM), files) if PLATFORM in fingerprints else []
    return SitePlan(site, plans, files, project_dir, kept)


def _stage_plan(stage: str, digest: str, inputs: dict[str, str], was: applied.AppliedStage | None,
                earlier: list[StagePlan]) -> StagePlan:
    if was is None:
        return StagePlan(stage, NEW, digest, "never applied")
    files = file_changes(was.files, inputs)
    if was.digest != digest:
        reason = f"{len(files)} input file(s) changed" if files else "inputs changed"
        if stage == VERIFY_STAGE and not files:
            changed_before = [plan.stage for plan in earlier if plan.status != UNCHANGED]
            reason = f"checks what {', '.join(changed_before)} will change" if changed_before else reason
        return StagePlan(stage, CHANGED, digest, reason, files)
    if not was.complete:
        failed = f"{len(was.failed_hosts)} host(s) failed" if was.failed_hosts else "a limited run"
        return StagePlan(stage, PENDING, digest, f"last applied {was.applied_at} without every host ({failed})")
    return StagePlan(stage, UNCHANGED, digest, f"applied {was.applied_at} by {was.by} ({was.via})")


def file_changes(before: dict[str, str], now: dict[str, str]) -> list[FileChange]:
    changes = [FileChange(path, "removed") for path in sorted(before.keys() - now.keys())]
    changes += [FileChange(path, "added") for path in sorted(now.keys() - before.keys())]
    changes += [FileChange(path, "modified") for path in sorted(before.keys() & now.keys())
                if before[path] != now[path]]
    return sorted(changes, key=lambda change: change.path)


def file_diffs(plan: SitePlan, stages: Iterable[StagePlan] | None = None) -> list[str]:
    """Unified diffs of the changed files, against what build/<site>/ holds from the last render.

    The applied state keeps hashes, not contents: build/<site>/ holds the files of the
    last render on this machine (a deploy renders first). Where it is missing, or was
    rendered again since and already holds the new version, that is said instead of an
    empty or misleading diff.
    """
    lines: list[str] = []
    seen: set[str] = set()
    for stage in stages if stages is not None else plan.stages:
        for change in stage.files:
            if change.path in seen:
                continue
            seen.add(change.path)
            lines += _file_diff(plan, change)
    return lines


def _file_diff(plan: SitePlan, change: FileChange) -> list[str]:
    new = plan.rendered.get(change.path, b"")
    old_path = plan.project_dir / change.path if plan.project_dir is not None else None
    old = old_path.read_bytes() if old_path is not None and old_path.is_file() else None
    if old is None and change.change != "added":
        return [f"--- {change.path}: {change.change}; no copy in {plan.project_dir} to diff against"]
    if old == new:
        return [f"--- {change.path}: {change.change}; {plan.project_dir} was rendered again since the last "
                f"deploy and already holds this version"]
    diff = difflib.unified_diff(
        (old or b"").decode("utf-8", "replace").splitlines(keepends=True),
        new.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=f"applied/{change.path}", tofile=f"now/{change.path}",
    )
    return [line.rstrip("\n") for line in diff]
