"""`rackform rollout`: the sites of topologies/rollout.yaml, wave by wave, stopping the line.

For each wave in order, up to `parallel` of its sites at once:
1. plan the site (`rackform.run.plan`): the stages whose inputs changed since they were
   applied, never applied, or left pending; every stage with `converge`;
2. run those stages through the stage runner every deploy uses (`run_stages`, under the
   site's lock), or nothing when the plan is empty;
3. when stages ran, the site's gates: `verify` (the testinfra host checks) and
   `fabric-check` (the live fabric check), as the wave says.

A site that fails its deploy or a gate stops the line: no later site of its wave starts
(sites already running finish) and no later wave starts. Progress is kept in
build/.rollout/<rollout>.json; `--resume` starts again at the first wave that did not
pass. Stages that finished are recorded with their digests, so a resumed site re-runs
only what did not finish, whether the run failed, crashed or was killed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from rackform.fleet.rollout_file import Rollout, Wave
from rackform.run import interrupt
from rackform.run.sitelock import site_lock

PROGRESS_DIR = Path("build") / ".rollout"
ROLLOUT_LOCK = "rollout"
"""Name of the lock that keeps two rollouts of one repo apart (build/.locks/rollout.lock)."""


@dataclass(slots=True)
class SiteResult:
    site: str
    wave: str
    stages: list[str] = field(default_factory=list)
    """The stages run (empty: the plan had nothing to do)."""
    changed: int = 0
    seconds: float = 0.0
    result: str = "not started"
    """ok, nothing to do, passed earlier (--resume), failed, gate failed, interrupted, not started."""
    failed_stage: str | None = None
    failed_hosts: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.result in ("ok", "nothing to do", "passed earlier")


@dataclass(slots=True)
class RolloutReport:
    rollout: str
    sites: list[SiteResult]
    stopped_at: str | None = None
    """The site that stopped the line, or None."""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.stopped_at is None and all(site.ok for site in self.sites)

    def as_dict(self) -> dict:
        return {"rollout": self.rollout, "ok": self.ok, "stopped_at": self.stopped_at, "seconds": self.seconds,
                "sites": [asdict(site) for site in self.sites]}


class _Prefixed:
    """A stream that starts every line with the site's name (sites of a wave run at once)."""

    def __init__(self, stream: TextIO, prefix: str, lock: threading.Lock):
        self.stream, self.prefix, self.lock = stream, prefix, lock
        self._partial = ""

    def write(self, text: str) -> int:
        with self.lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self.stream.write(f"{self.prefix}{line}\n")
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


SiteRunner = Callable[[str, Wave, bool, TextIO], SiteResult]
"""(site, its wave, converge, output) -> what happened: `deploy_site`, or a test's stand-in."""


def progress_file(root: Path, rollout: Rollout) -> Path:
    return Path(root) / PROGRESS_DIR / f"{rollout.path.stem}.json"


def run_rollout(rollout: Rollout, root: Path, *, converge: bool = False, resume: bool = False,
                stream: TextIO = sys.stdout, site_runner: SiteRunner | None = None) -> RolloutReport:
    """Walk the waves; see the module doc. `site_runner` stands in for deploy_site in tests."""
    root = Path(root)
    runner = site_runner or (lambda site, wave, converge, out: deploy_site(site, root, wave, converge, out))
    started = time.monotonic()
    with site_lock(root, ROLLOUT_LOCK, say=lambda line: print(line, file=stream)):
        done = _waves_done(root, rollout) if resume else []
        if resume and done:
            print(f"rollout: resuming after wave(s) {', '.join(done)}", file=stream)
        _save_progress(root, rollout, done)
        results: list[SiteResult] = []
        stopped_at = None
        for wave in rollout.waves:
            if wave.name in done:
                results += [SiteResult(site, wave.name, result="passed earlier") for site in wave.sites]
                continue
            if stopped_at is not None:
                results += [SiteResult(site, wave.name, detail="an earlier wave stopped the line")
                            for site in wave.sites]
                continue
            print(f"rollout: wave {wave.name}: {', '.join(wave.sites)}", file=stream)
            wave_results = _run_wave(wave, converge, runner, stream)
            results += wave_results
            failed = next((result for result in wave_results if not result.ok and result.result != "not started"),
                          None)
            if failed is not None or interrupt.cancel_requested():
                stopped_at = failed.site if failed is not None else wave.name
            else:
                done.append(wave.name)
                _save_progress(root, rollout, done)
    return RolloutReport(rollout.path.stem, results, stopped_at, round(time.monotonic() - started, 1))


def _run_wave(wave: Wave, converge: bool, runner: SiteRunner, stream: TextIO) -> list[SiteResult]:
    lock = threading.Lock()
    results = {site: SiteResult(site, wave.name) for site in wave.sites}
    pending = list(wave.sites)
    stop = False
    with ThreadPoolExecutor(max_workers=wave.parallel) as pool:
        running: dict[Future, str] = {}
        while pending or running:
            while pending and not stop and len(running) < wave.parallel and not interrupt.cancel_requested():
                site = pending.pop(0)
                running[pool.submit(runner, site, wave, converge, _Prefixed(stream, f"{site}: ", lock))] = site
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                site = running.pop(future)
                try:
                    result = future.result()
                except Exception as error:  # noqa: BLE001 - one site's crash stops the line, named
                    result = SiteResult(site, wave.name, result="failed", detail=f"{type(error).__name__}: {error}")
                result.wave = wave.name
                results[site] = result
                stop = stop or not result.ok
    for site in pending:
        results[site].detail = f"not started: {'another site of the wave failed' if stop else interrupt.reason()}"
    return [results[site] for site in wave.sites]


def deploy_site(site: str, root: Path, wave: Wave, converge: bool, out: TextIO) -> SiteResult:
    """Plan the site, run what the plan says (every stage with `converge`), then its gates."""
    from rackform.run.environment import StageEnvironmentError
    from rackform.run.plan import plan_site
    from rackform.run.progress import ProgressDisplay
    from rackform.run.sitelock import SiteLocked
    from rackform.run.stages import run_stages
    from rackform.run.summary import summary_lines

    started = time.monotonic()
    result = SiteResult(site, wave.name)
    stages = None
    if not converge:
        plan = plan_site(site, root)
        stages = plan.to_run
        if not stages:
            print("nothing to do: every stage is as applied", file=out)
            result.result, result.seconds = "nothing to do", round(time.monotonic() - started, 1)
            return result
        print(f"plan: {', '.join(stages)}", file=out)
    try:
        site_run = run_stages(site, root, stages, progress=ProgressDisplay(out, live=False),
                              say=lambda line: print(line.removeprefix(f"{site}: "), file=out))
    except (StageEnvironmentError, SiteLocked) as error:
        result.result, result.detail = "failed", str(error)
        return result
    report = site_run.report
    result.stages = [run.step.name for run in report.runs if run.result is not None and run.step.name != "validate"]
    result.changed = report.changed
    print("\n".join(summary_lines(report)), file=out)
    if report.interrupted is not None:
        result.result, result.detail = "interrupted", report.interrupted
    elif not report.ok:
        failures = report.failed_hosts
        broken = report.broken_step
        result.result = "failed"
        result.failed_hosts = sorted(failures)
        result.failed_stage = (broken.step.name if broken is not None
                               else min((f.stage for f in failures.values()), key=_stage_index))
    else:
        _run_gates(site, root, wave.gates, result, out)
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _stage_index(stage: str) -> int:
    from rackform.pipeline import STAGE_NAMES

    return STAGE_NAMES.index(stage) if stage in STAGE_NAMES else -1


def _run_gates(site: str, root: Path, gates, result: SiteResult, out: TextIO) -> None:
    from rackform.fleet.gates import GATE_CHECKS

    for gate in gates:
        ok, detail = GATE_CHECKS[gate](site, root, out)
        print(f"gate {gate}: {'passed' if ok else 'FAILED'}{': ' + detail if detail else ''}", file=out)
        if not ok:
            result.result, result.failed_stage, result.detail = "gate failed", f"gate {gate}", detail
            return
    result.result = "ok"


def _waves_done(root: Path, rollout: Rollout) -> list[str]:
    try:
        data = json.loads(progress_file(root, rollout).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return []
    names = [wave.name for wave in rollout.waves]
    return [name for name in data.get("waves_passed", []) if name in names]


def _save_progress(root: Path, rollout: Rollout, done: list[str]) -> None:
    path = progress_file(root, rollout)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rollout": str(rollout.path), "waves_passed": done}, indent=2) + "\n",
                   encoding="utf-8")
    tmp.replace(path)
