"""`rackform deploy`: run a rendered project's stages in order, one playbook each.

validate.yml runs first, as site.yml does, then the Ansible stages of
`rackform.pipeline.STAGES` in their order. A host that fails (or cannot be
reached) fails alone: later stages run without it, as a later play of site.yml
would, and every other host finishes. Where a play says so, Ansible itself ends
the play for all its hosts: `any_errors_fatal` (one host failed) or
`max_fail_percentage` (too many did); those hosts are reported as stopped and
left out of the later stages as well. A stage that fails without any host
failing (a broken playbook, a --limit matching nothing) stops the deployment.

A stage without a playbook (platform) runs through the callable given for it in
`stage_runners` (rackform.run.stages gives kubectl and helm for the platform);
with none it is reported as not run. A SIGINT or SIGTERM (rackform.run.interrupt) cancels the running
playbook and starts no later step; the report says which step was cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from rackform.pipeline import STAGES, Stage
from rackform.run import interrupt
from rackform.run.ansible import EventHandler, RunResult, TaskFailure, run_playbook

VALIDATE_PLAYBOOK = "validate.yml"
OUTSIDE_ANSIBLE = "not run: no runner for this stage"
READS_LIVE_STATE = {"verify"}
"""Stages that check the live machines: in check mode nothing was changed for them
to find, so they run only when asked for by name (--stage verify)."""
STOPPED_REASON = "Ansible ended the play after other hosts failed (any_errors_fatal or max_fail_percentage)"
NOT_IN_CHECK_MODE = "not run in check mode: it checks the live state, which check mode left as it was"


@dataclass(frozen=True, slots=True)
class Step:
    """One playbook run of a deployment: validate.yml or a stage of STAGES."""

    name: str
    playbook: str | None
    label: str
    """How progress lines name it: `os 3/5` (its place among the stages run), `validate`."""
    not_run: str | None = None
    """Why the plan leaves it out (the summary says so), or None."""


def plan_steps(selected: Collection[str] | None = None, *, check: bool = False,
               unavailable: Mapping[str, str] | None = None) -> list[Step]:
    """validate first, then the chosen stages (all by default) in the order of STAGES.

    Stages that do not run stay in the plan, with the reason, so the summary can
    say why: verify in check mode unless chosen, and those `unavailable` names with
    the reason they cannot run here (platform without a kubeconfig). Only the stages
    that run are numbered.
    """
    known = {stage.name for stage in STAGES}
    unknown = sorted(set(selected or ()) - known)
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; stages are {', '.join(s.name for s in STAGES)}")
    stages = [stage for stage in STAGES if selected is None or stage.name in selected]
    reasons = {stage.name: (unavailable or {}).get(stage.name) or _plan_skip(stage, selected, check)
               for stage in stages}
    numbered = [stage.name for stage in stages if reasons[stage.name] is None]
    steps = [Step("validate", VALIDATE_PLAYBOOK, "validate")]
    for stage in stages:
        reason = reasons[stage.name]
        label = stage.name if reason else f"{stage.name} {numbered.index(stage.name) + 1}/{len(numbered)}"
        steps.append(Step(stage.name, stage.playbook, label, reason))
    return steps


def _plan_skip(stage: Stage, selected: Collection[str] | None, check: bool) -> str | None:
    if check and selected is None and stage.name in READS_LIVE_STATE:
        return NOT_IN_CHECK_MODE
    return None


@dataclass(frozen=True, slots=True)
class HostFailure:
    """Why a host did not finish: the first stage where it failed."""

    host: str
    stage: str
    task: str
    reason: str
    kind: str
    """unreachable, failed, or stopped (Ansible ended its play because other hosts failed)."""


@dataclass(slots=True)
class StepRun:
    step: Step
    result: RunResult | None = None
    not_run: str | None = None
    """Why the step did not run (result is None then)."""
    left_out: tuple[str, ...] = ()
    """Hosts that failed in an earlier stage and were not run here."""
    stopped: tuple[str, ...] = ()
    """Hosts Ansible stopped here because others failed (any_errors_fatal, max_fail_percentage)."""
    notices: tuple[tuple[str, str], ...] = ()
    """(host, first line) of what roles reported as SKIPPED or STOPPED: work the stage could not do here."""

    @property
    def ok(self) -> bool:
        return self.result is None or self.result.ok

    @property
    def broken(self) -> bool:
        """The playbook itself failed: a non-zero exit with no host to blame."""
        return self.result is not None and not self.result.ok and not self.result.failures

    def failures(self) -> list[HostFailure]:
        if self.result is None:
            return []
        found = [_host_failure(self.step.name, failure) for failure in self.result.failures]
        found += [HostFailure(host, self.step.name, "-", STOPPED_REASON, "stopped") for host in self.stopped]
        return found


def _host_failure(stage: str, failure: TaskFailure) -> HostFailure:
    task = f"{failure.role} : {failure.task}" if failure.role else failure.task
    return HostFailure(failure.host, stage, task, failure.message, "unreachable" if failure.unreachable else "failed")


@dataclass(slots=True)
class DeployReport:
    site: str
    runs: list[StepRun]
    check: bool = False
    duration_s: float = 0.0
    interrupted: str | None = None
    """Why the deployment was cut short by a signal ('interrupted by SIGTERM'), else None."""

    @property
    def failed_hosts(self) -> dict[str, HostFailure]:
        """Host -> its first failure; a host fails once, in the stage where it stopped."""
        first: dict[str, HostFailure] = {}
        for run in self.runs:
            for failure in run.failures():
                first.setdefault(failure.host, failure)
        return first

    @property
    def broken_step(self) -> StepRun | None:
        return next((run for run in self.runs if run.broken), None)

    @property
    def ok(self) -> bool:
        return not self.failed_hosts and self.broken_step is None and self.interrupted is None

    @property
    def cut_step(self) -> StepRun | None:
        """The step a signal cancelled while it ran."""
        return next((run for run in self.runs if run.result is not None and run.result.status == "canceled"), None)

    @property
    def changed(self) -> int:
        return sum(run.result.changed for run in self.runs if run.result is not None)

    @property
    def hosts(self) -> list[str]:
        """Every host any step ran on."""
        return sorted({host for run in self.runs if run.result for host in run.result.hosts})

    def changes_per_host(self) -> dict[str, dict[str, int]]:
        """Host -> stage -> tasks changed, for hosts with at least one change."""
        changes: dict[str, dict[str, int]] = {}
        for run in self.runs:
            for host, stats in (run.result.hosts.items() if run.result else ()):
                if stats.changed:
                    changes.setdefault(host, {})[run.step.name] = stats.changed
        return dict(sorted(changes.items()))


class Progress(Protocol):
    """What deploy tells the person watching (rackform.run.progress.ProgressDisplay)."""

    def step_started(self, step: Step, left_out: Collection[str]) -> None: ...
    def event(self, step: Step, event: dict[str, Any]) -> None: ...
    def step_finished(self, run: StepRun) -> None: ...


Runner = Callable[..., RunResult]
StageRunner = Callable[..., RunResult]
"""Runs a stage that has no playbook: called with check=, event_handler=; returns its RunResult."""


def deploy(
    site: str,
    project_dir: Path,
    steps: Iterable[Step],
    *,
    limit: str | None = None,
    check: bool = False,
    progress: Progress | None = None,
    envvars: Mapping[str, str] | None = None,
    runner: Runner | None = None,
    stage_runners: Mapping[str, StageRunner] | None = None,
    diff: bool = False,
    left_out: Collection[str] = (),
) -> DeployReport:
    """Run each step's playbook in order and report per stage and per host.

    `runner` stands in for run_playbook (tests replay recorded runs through it).
    `left_out`: hosts that failed before this call (the Pulumi chain passes the hosts
    earlier stages lost), left out as if they had failed in an earlier step here.
    """
    runner = runner or run_playbook
    runs: list[StepRun] = []
    failed: dict[str, str] = dict.fromkeys(left_out, "an earlier stage")  # host -> stage where it failed
    targets: set[str] | None = None  # the hosts validate.yml saw: every host within --limit
    stop_reason: str | None = None
    for step in steps:
        if stop_reason is None and interrupt.cancel_requested():
            stop_reason = f"not run: {interrupt.reason()}"
        reason = stop_reason or _why_not_run(step, targets, failed, stage_runners)
        if reason:
            runs.append(StepRun(step, not_run=reason, left_out=tuple(sorted(failed))))
            continue
        # validate.yml checks the inventory on the controller: it sees every host in the
        # limit, so hosts lost before this call are known to it (and left out after it).
        before = {} if step.playbook == VALIDATE_PLAYBOOK else failed
        run = _run_step(step, project_dir, runner, progress, before, limit=limit, check=check, envvars=envvars,
                        special=(stage_runners or {}).get(step.name), diff=diff)
        runs.append(run)
        if targets is None and step.playbook is not None:
            targets = set(run.result.hosts)
        for failure in run.failures():
            failed.setdefault(failure.host, step.name)
        if run.result.status == "canceled":
            stop_reason = f"not run: {interrupt.reason()} during {step.name}"
        elif run.broken:
            stop_reason = f"not run: {step.name} failed ({run.result.status}, rc {run.result.rc})"
    duration_s = round(sum(run.result.duration_s for run in runs if run.result), 3)
    cut = interrupt.reason() if interrupt.cancel_requested() else None
    return DeployReport(site, runs, check=check, duration_s=duration_s, interrupted=cut)


def _why_not_run(step: Step, targets: set[str] | None, failed: Mapping[str, str],
                 stage_runners: Mapping[str, StageRunner] | None) -> str | None:
    if step.not_run:
        return step.not_run
    if step.playbook is None:
        special = (stage_runners or {}).get(step.name)
        if special is None:
            return OUTSIDE_ANSIBLE
        # Asked when its turn comes: the platform's kubeconfig is fetched by the stage before it.
        unavailable = getattr(special, "unavailable", None)
        return unavailable() if unavailable is not None else None
    if targets is not None and targets <= failed.keys():
        # ansible-playbook refuses a --limit that leaves no host at all.
        return "not run: every host failed in an earlier stage"
    return None


def _run_step(step: Step, project_dir: Path, runner: Runner, progress: Progress | None,
              failed: Mapping[str, str], *, limit: str | None, check: bool,
              envvars: Mapping[str, str] | None, special: StageRunner | None = None, diff: bool = False) -> StepRun:
    left_out = tuple(sorted(failed))
    plays = PlayTracker(fatal_plays(Path(project_dir) / step.playbook) if step.playbook else set())

    notices: list[tuple[str, str]] = []

    def on_event(event: dict[str, Any]) -> None:
        plays.see(event)
        if (found := notice(event)) is not None:
            notices.append(found)
        if progress is not None:
            progress.event(step, event)

    if progress is not None:
        progress.step_started(step, left_out)
    if special is not None:
        result = special(check=check, event_handler=on_event)
    else:
        extra = {"diff": True} if diff else {}
        result = runner(project_dir, step.playbook, limit=combined_limit(limit, left_out), check=check,
                        event_handler=on_event, quiet=True, envvars=envvars, **extra)
    failed_here = {failure.host for failure in result.failures}
    run = StepRun(step, result, left_out=left_out, stopped=tuple(sorted(plays.stopped_hosts() - failed_here)),
                  notices=tuple(sorted(set(notices))))
    if progress is not None:
        progress.step_finished(run)
    return run


NOTICE_WORDS = re.compile(r"\b(SKIPPED|STOPPED)\b")


def notice(event: dict[str, Any]) -> tuple[str, str] | None:
    """A role's report of work it could not do on this host (the lab has no NICs with
    RDMA, no GPUs, no Kubernetes packages): shown in the summary, never hidden."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data") or {}
    message = (data.get("res") or {}).get("msg")
    first = message[0] if isinstance(message, list) and message else message
    if isinstance(first, str) and NOTICE_WORDS.search(first):
        return str(data.get("host", "")), " ".join(first.split())
    return None


def combined_limit(limit: str | None, left_out: Collection[str]) -> str | None:
    """The user's --limit, less the hosts that failed earlier.

    Patterns are joined with commas, the separator Ansible prefers once any
    pattern has one; a colon-separated --limit is split first, as Ansible does.
    """
    if not left_out:
        return limit
    patterns = split_host_patterns(limit) if limit else ["all"]
    return ",".join([*patterns, *(f"!{host}" for host in sorted(left_out))])


_COLON_OUTSIDE_RANGES = re.compile(r":(?![^\[]*\])")


def split_host_patterns(limit: str) -> list[str]:
    """`a,b` or `a:!b` -> its patterns; colons inside ranges (`gpu-[1:4]`) stay.

    Ansible's own split_host_pattern, less its IPv6-address cases (hosts here
    go by name); not imported from ansible, whose Display patches this process's
    stdout and stderr on import.
    """
    parts = limit.split(",") if "," in limit else _COLON_OUTSIDE_RANGES.split(limit)
    return [part.strip() for part in parts if part.strip()]


def fatal_plays(playbook: Path) -> set[str]:
    """Names of the plays in `playbook` that set any_errors_fatal."""
    try:
        plays = yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
    except (OSError, yaml.YAMLError):
        return set()  # the run itself reports a missing or broken playbook
    return {
        str(play.get("name", play.get("hosts", "")))
        for play in plays
        if isinstance(play, dict) and play.get("any_errors_fatal") is True
    }


@dataclass(slots=True)
class PlayTracker:
    """Which hosts ran in which play, and which plays Ansible ended for all their hosts.

    Ansible's stats do not say which hosts it stopped because others failed: they
    look like hosts that finished. Two rules stop them: any_errors_fatal (read from
    the playbook: Ansible sends no event for it when the failure is an unreachable
    host) and max_fail_percentage (Ansible sends playbook_on_no_hosts_remaining).
    """

    fatal: set[str]
    _play: str = ""
    _hosts: dict[str, set[str]] = field(default_factory=dict)
    _failed_plays: set[str] = field(default_factory=set)
    _ended_plays: set[str] = field(default_factory=set)

    def see(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._play = str(data.get("name") or data.get("play") or "")
        elif kind == "runner_on_start" and "host" in data:
            self._hosts.setdefault(self._play, set()).add(data["host"])
        elif kind == "runner_on_unreachable" or (kind == "runner_on_failed" and not data.get("ignore_errors")):
            self._failed_plays.add(self._play)
        elif kind == "playbook_on_no_hosts_remaining":
            self._ended_plays.add(self._play)

    def stopped_hosts(self) -> set[str]:
        """Every host of a play Ansible ended early (the caller takes out those that failed themselves)."""
        ended = (self._failed_plays & self.fatal) | self._ended_plays
        return {host for play in ended for host in self._hosts.get(play, ())}


__all__ = [
    "Step", "StepRun", "HostFailure", "DeployReport", "Progress", "plan_steps", "deploy",
    "combined_limit", "fatal_plays", "PlayTracker", "EventHandler", "VALIDATE_PLAYBOOK",
]
