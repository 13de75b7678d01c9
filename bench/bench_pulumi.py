"""The Pulumi engine's own overhead against the CLI's (issue 25, item 5; docs/benchmarks.md, "Pulumi").

    .venv/bin/python bench/bench_pulumi.py                        # part A: 1,000 servers, 3 rounds (about 10 min on 2 cores)
    .venv/bin/python bench/bench_pulumi.py --nodes 300 --rounds 1 # a quick look
    sudo .venv/bin/python bench/bench_pulumi.py --lab --no-site   # part B only (the deployed lab; see below)

Part A, no lab: a generated site of NODES servers (bench/gen_site.py, as bench_scale.py makes its
sites) in a scratch repo root, and a Pulumi project of its own for it (tests/engine_stack.py's
EngineProject: a local file backend, the passphrase provider, RACKFORM_ROOT naming that root; one
stack, `scale`, with `rackform:site: scale`). Timed side by side, taking turns, ROUNDS rounds after
one untimed warm-up of each:

- `rackform plan scale --root ROOT`: load + checks + render + what would run;
- `pulumi preview -s scale --json` of the fresh stack with `rackform:bareMetalNodes` true (the
  default: one BareMetalNode per server) and false;
- the same two previews with PULUMI_SKIP_CHECKPOINTS=true: the engine then keeps the snapshot it
  builds in memory instead of serializing and checking all of it after every step. A preview
  throws that snapshot away, so this takes nothing from it; it shows the engine's own share.

Printed: wall and CPU seconds (medians, range in brackets; CPU is the command and everything it
started, the steadier figure on a shared machine), the ratio of each preview to the plan (target
<= 2x), the CPU of each process of the preview (the program, the dynamic-provider host, the
language host's `pip list`, the rest being the engine's Go processes), and the resources the
preview would create, by type. A preview that fails is reported with its error, not timed.

Part B, `--lab`: `pulumi up -s lab` with nothing to change against `rackform deploy lab` with
nothing to change (target <= 1.2x), and `rackform plan lab` beside them as the floor: what the
engine must work out to find nothing to do. Runs only when asked, and only when the lab is
deployed: `rackform lab status lab` exits 0 and the site's applied state (state/lab.json) exists.
It needs a Pulumi state that recorded the lab:

- `--engine-dir DIR` names an EngineProject folder (DIR/project, DIR/backend, DIR/home) whose
  stack `lab` deployed it: the one tests/lab/test_pulumi_lab.py makes (its pytest tmp folder,
  `pulumi-lab0`), or one this bench made before;
- otherwise the bench makes its own under `--lab-dir` (default /var/tmp/rackform-bench-pulumi),
  runs one `pulumi up -s lab --yes --skip-preview` to converge (not timed: a stack with no state
  runs every stage once), and keeps it there for the next run.

Either way `pulumi preview -s lab --expect-no-changes` must pass before anything is timed. Then,
taking turns, LAB_ROUNDS rounds of `pulumi up -s lab --yes --expect-no-changes` (its preview
included, as a user runs it), the same with `--skip-preview`, `rackform deploy lab` and
`rackform plan lab`. `rackform deploy` runs every stage's playbook again (Ansible finds nothing
to change); `pulumi up` runs a stage only when its digest changed, so with nothing changed it runs
none. Part B needs root, as the lab does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
# EngineProject is imported from tests/, not moved: tests/unit and tests/lab import it by that name,
# and it needs nothing of pytest. One copy of how a Pulumi project of our own is made and run.
sys.path.insert(0, str(REPO / "tests"))

from engine_stack import EngineProject, engine_missing  # noqa: E402
from gen_site import SITE_NAME, write_site  # noqa: E402

PREVIEW_TARGET = 2.0
UP_TARGET = 1.2
LAB_SITE = "lab"
DEFAULT_LAB_DIR = Path("/var/tmp/rackform-bench-pulumi")
TIMEOUT_S = 3600
DEPLOY_TIMEOUT_S = 3 * 3600

PROCESS_RECORDER = """\
# Written by bench/bench_pulumi.py: each Python process of the engine's run records its CPU at exit.
import atexit, json, os, resource, signal, sys

def _record(*_args):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.path.join(os.environ["RACKFORM_BENCH_CPU_DIR"], f"{os.getpid()}.json"), "w") as out:
        json.dump({"argv": sys.argv[:2], "cpu_s": usage.ru_utime + usage.ru_stime}, out)

if os.environ.get("RACKFORM_BENCH_CPU_DIR"):
    atexit.register(_record)
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_record(), os._exit(0)))
    except ValueError:
        pass
"""
PROCESS_KINDS = ("program", "provider host", "pip list", "engine (Go)")


# ---------------------------------------------------------------- timing


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Timed:
    """Figures of one command over the rounds."""

    label: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    processes: list[dict[str, float]] = field(default_factory=list)
    failure: str | None = None
    last_output: str = ""

    def median(self, what: str) -> float | None:
        values = getattr(self, what)
        return statistics.median(values) if values else None

    def cell(self, what: str) -> str:
        values = getattr(self, what)
        if not values:
            return "failed" if self.failure else "n/a"
        middle = f"{statistics.median(values):.2f}"
        return middle if len(values) < 2 else f"{middle} ({min(values):.2f}-{max(values):.2f})"


def timed_run(figures: Timed, command: list[str], *, cwd: Path = REPO, env: dict | None = None,
              timeout_s: float = TIMEOUT_S, cpu_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `command` once, adding its wall and CPU seconds to `figures` when it exits 0."""
    if cpu_dir is not None:
        for old in cpu_dir.glob("*.json"):
            old.unlink()
    cpu, started = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    wall, used = time.perf_counter() - started, children_cpu_s() - cpu
    figures.last_output = done.stdout
    if done.returncode != 0:
        figures.failure = why_failed(done)
        return done
    figures.wall.append(wall)
    figures.cpu.append(used)
    if cpu_dir is not None:
        figures.processes.append(split_cpu(cpu_dir, used))
    return done


def why_failed(done: subprocess.CompletedProcess[str]) -> str:
    """The last line that says what went wrong (a preview's --json carries it in its diagnostics)."""
    text = done.stdout + "\n" + done.stderr
    try:
        diagnostics = json.loads(done.stdout).get("diagnostics", [])
        text = "\n".join(d.get("message", "") for d in diagnostics if d.get("severity") == "error") or text
    except (json.JSONDecodeError, AttributeError):
        pass
    lines = [line.strip() for line in text.replace("\\n", "\n").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return f"exit {done.returncode}: {(errors or lines or ['no output'])[-1][:300]}"


def split_cpu(cpu_dir: Path, total: float) -> dict[str, float]:
    """CPU seconds per kind of process of one engine run; what no Python process claims is the engine's."""
    split = dict.fromkeys(PROCESS_KINDS, 0.0)
    for record in cpu_dir.glob("*.json"):
        found = json.loads(record.read_text())
        argv0 = (found["argv"] or [""])[0]
        kind = "provider host" if "pulumi/dynamic" in argv0 else "pip list" if "pip" in argv0 else "program"
        split[kind] += found["cpu_s"]
    split["engine (Go)"] = max(total - sum(split.values()), 0.0)
    return split


def ratio(numerator: float | None, denominator: float | None) -> str:
    return "n/a" if not numerator or not denominator else f"{numerator / denominator:.2f}x"


def verdict(value: float | None, floor: float | None, target: float) -> str:
    if not value or not floor:
        return "n/a"
    return "ok" if value / floor <= target else "MISSED"


def print_table(rows: list[Timed], floor: Timed, target: float) -> None:
    print(f"{'command':<58}{'wall s':>22}{'CPU s':>22}{'wall ratio':>12}{'CPU ratio':>11}")
    for row in rows:
        is_floor = row is floor
        print(f"{row.label:<58}{row.cell('wall'):>22}{row.cell('cpu'):>22}"
              f"{'' if is_floor else ratio(row.median('wall'), floor.median('wall')):>12}"
              f"{'' if is_floor else ratio(row.median('cpu'), floor.median('cpu')):>11}")
    for row in rows:
        if row.failure:
            print(f"  {row.label}: FAILED, {row.failure}")
    print(f"(ratios: median against the median of `{floor.label}`; target <= {target:.1f}x)")


def machine_line() -> str:
    load_1m, load_5m, _ = os.getloadavg()
    return (f"{time.strftime('%Y-%m-%d %H:%M')}, Python {platform.python_version()}, {os.cpu_count()} CPU(s), "
            f"load average {load_1m:.1f}/{load_5m:.1f}")


def rackform_command() -> list[str]:
    script = Path(sys.executable).parent / "rackform"
    return [str(script)] if script.exists() else [sys.executable, "-m", "rackform.cli"]


# ---------------------------------------------------------------- part A: a 1,000-server site


@dataclass(frozen=True)
class Preview:
    label: str
    bare_metal_nodes: bool
    skip_checkpoints: bool


PREVIEWS = (
    Preview("pulumi preview, bareMetalNodes true (default)", True, False),
    Preview("pulumi preview, bareMetalNodes false", False, False),
    Preview("pulumi preview, bareMetalNodes true, SKIP_CHECKPOINTS", True, True),
    Preview("pulumi preview, bareMetalNodes false, SKIP_CHECKPOINTS", False, True),
)


def engine_for_site(scratch: Path, root: Path, cpu_dir: Path) -> EngineProject:
    """A project of its own for the generated site: one stack, `scale`, its design under `root`."""
    recorder = scratch / "recorder"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(PROCESS_RECORDER)
    python_path = os.pathsep.join(filter(None, [str(recorder), os.environ.get("PYTHONPATH")]))
    engine = EngineProject.make(scratch / "engine", root=root, PYTHONPATH=python_path,
                                RACKFORM_BENCH_CPU_DIR=str(cpu_dir))
    (engine.folder / f"Pulumi.{SITE_NAME}.yaml").write_text(f"config:\n  rackform:site: {SITE_NAME}\n")
    engine.init(SITE_NAME)
    return engine


def preview_command(engine: EngineProject) -> list[str]:
    return [str(REPO / ".venv" / "bin" / "pulumi"), "preview", "-s", SITE_NAME, "--json", "--non-interactive"]


def set_bare_metal_nodes(engine: EngineProject, wanted: bool) -> None:
    engine.run("config", "set", "rackform:bareMetalNodes", str(wanted).lower(), "-s", SITE_NAME)


def resource_counts(preview_json: str) -> Counter:
    try:
        steps = json.loads(preview_json).get("steps", [])
    except json.JSONDecodeError:
        return Counter()
    return Counter(step.get("newState", step.get("oldState", {})).get("type", "?") for step in steps)


def part_a(nodes: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rackform-bench-pulumi-") as scratch_name:
        scratch = Path(scratch_name)
        root = write_site(scratch / "root", nodes)
        cpu_dir = scratch / "cpu"
        cpu_dir.mkdir()
        engine = engine_for_site(scratch, root, cpu_dir)
        plan_env = {**os.environ, "RACKFORM_STATE_DIR": str(scratch / "state")}
        plan_command = [*rackform_command(), "plan", SITE_NAME, "--root", str(root)]
        plan = Timed(f"rackform plan {SITE_NAME}")
        previews = {spec: Timed(spec.label) for spec in PREVIEWS}
        # Warm-up, not timed: the first run of each compiles what it imports.
        timed_run(Timed("warm-up"), plan_command, env=plan_env)
        set_bare_metal_nodes(engine, False)
        timed_run(Timed("warm-up"), preview_command(engine), cwd=engine.folder, env=engine.env())
        for round_number in range(1, rounds + 1):
            timed_run(plan, plan_command, env=plan_env)
            for spec, figures in previews.items():
                if figures.failure:
                    continue  # a preview that failed once is not run again: it fails the same way
                set_bare_metal_nodes(engine, spec.bare_metal_nodes)
                env = {**engine.env(), **({"PULUMI_SKIP_CHECKPOINTS": "true"} if spec.skip_checkpoints else {})}
                timed_run(figures, preview_command(engine), cwd=engine.folder, env=env, cpu_dir=cpu_dir)
            print(f"round {round_number} of {rounds} done ({time.strftime('%H:%M:%S')})", file=sys.stderr)
    report_a(nodes, rounds, plan, previews)


def report_a(nodes: int, rounds: int, plan: Timed, previews: dict[Preview, Timed]) -> None:
    print(f"Part A: `pulumi preview` of a fresh stack against `rackform plan`, a generated site of {nodes:,} servers")
    print(f"{machine_line()}; {rounds} round(s), taking turns; medians, range in brackets")
    print()
    print_table([plan, *previews.values()], plan, PREVIEW_TARGET)
    default = previews[PREVIEWS[0]]
    print(f"target: preview <= {PREVIEW_TARGET:.0f}x plan (wall, default stack): "
          f"{ratio(default.median('wall'), plan.median('wall'))}, "
          f"{verdict(default.median('wall'), plan.median('wall'), PREVIEW_TARGET) if not default.failure else 'FAILED'}")
    print()
    print("CPU seconds per process of the preview (medians):")
    print(f"{'preview':<58}" + "".join(f"{kind:>15}" for kind in PROCESS_KINDS))
    for figures in previews.values():
        if figures.processes:
            cells = "".join(f"{statistics.median(p[kind] for p in figures.processes):>15.2f}" for kind in PROCESS_KINDS)
            print(f"{figures.label:<58}{cells}")
    print()
    print("Resources each preview would create, by type:")
    counted = {figures.label: resource_counts(figures.last_output) for figures in previews.values()}
    types = sorted({kind for counts in counted.values() for kind in counts}, key=lambda t: (t.startswith("pulumi:"), t))
    shown = [spec for spec in PREVIEWS if not spec.skip_checkpoints]
    headers = [f"BareMetalNodes {'on' if s.bare_metal_nodes else 'off'}{' (failed)' if previews[s].failure else ''}"
               for s in shown]
    print(f"{'type':<50}" + "".join(f"{header:>28}" for header in headers))
    for kind in types:
        print(f"{kind:<50}" + "".join(f"{counted[s.label].get(kind, 0):>28}" for s in shown))
    print(f"{'total':<50}" + "".join(f"{sum(counted[s.label].values()):>28}" for s in shown))
    if any(previews[s].failure for s in shown):
        print("(a failed preview: the resources it had registered when it stopped)")
    on, off = (previews[spec] for spec in shown)
    if on.median("wall") and off.median("wall"):
        grown = sum(counted[on.label].values()) - sum(counted[off.label].values())
        print(f"the {grown:,} BareMetalNodes add {on.median('wall') - off.median('wall'):.1f} s wall, "
              f"{on.median('cpu') - off.median('cpu'):.1f} s CPU to the preview "
              f"({(on.median('wall') - off.median('wall')) / max(grown, 1) * 1000:.0f} ms each)")
    print()


# ---------------------------------------------------------------- part B: the deployed lab, nothing to change


def lab_not_ready() -> str | None:
    """Why part B cannot run now, or None."""
    from rackform.run import applied

    missing = engine_missing()
    if missing:
        return missing
    recorded = applied.state_dir(REPO) / f"{LAB_SITE}.json"
    if not recorded.is_file():
        return f"{recorded} is missing: the lab was never deployed from this checkout"
    status = subprocess.run([*rackform_command(), "lab", "status", LAB_SITE], cwd=REPO, capture_output=True,
                            text=True, check=False)
    if status.returncode != 0:
        return f"`rackform lab status {LAB_SITE}` exited {status.returncode}: the lab is not up\n{status.stdout[-2000:]}"
    return None


def lab_engine(engine_dir: Path | None, lab_dir: Path) -> EngineProject:
    """The stack `lab` with a state that recorded the deployed lab: given, kept from a run before, or converged now."""
    if engine_dir is not None:
        if not (engine_dir / "project" / "Pulumi.yaml").is_file() or not (engine_dir / "backend").is_dir():
            raise SystemExit(f"{engine_dir} is not an EngineProject folder (project/Pulumi.yaml and backend/ expected)")
        return EngineProject(engine_dir / "project", REPO)
    if (lab_dir / "project" / "Pulumi.yaml").is_file():
        return EngineProject(lab_dir / "project", REPO)
    lab_dir.mkdir(parents=True, exist_ok=True)
    engine = EngineProject.make(lab_dir, REPO)
    engine.init(LAB_SITE)
    print(f"converging a new stack {LAB_SITE} in {lab_dir} (not timed: every stage runs once)", file=sys.stderr)
    started = time.perf_counter()
    engine.run("up", "-s", LAB_SITE, "--yes", "--skip-preview", timeout_s=DEPLOY_TIMEOUT_S)
    print(f"converged in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return engine


def part_b(engine_dir: Path | None, lab_dir: Path, rounds: int) -> int:
    why = lab_not_ready()
    if why:
        print(f"Part B skipped: {why}")
        return 1
    engine = lab_engine(engine_dir, lab_dir)
    unchanged = engine.run("preview", "-s", LAB_SITE, "--expect-no-changes", check=False, timeout_s=TIMEOUT_S)
    if unchanged.returncode != 0:
        print(f"Part B stopped: `pulumi preview -s {LAB_SITE} --expect-no-changes` found changes or failed "
              f"(exit {unchanged.returncode}): the stack in {engine.folder.parent} did not record this lab as it is"
              f"\n{unchanged.stdout[-3000:]}")
        return 1
    pulumi = [str(REPO / ".venv" / "bin" / "pulumi")]
    up = Timed(f"pulumi up -s {LAB_SITE} --yes (preview included)")
    up_skip = Timed(f"pulumi up -s {LAB_SITE} --yes --skip-preview")
    deploy = Timed(f"rackform deploy {LAB_SITE}")
    plan = Timed(f"rackform plan {LAB_SITE}")
    commands = [
        (up, [*pulumi, "up", "-s", LAB_SITE, "--yes", "--expect-no-changes", "--non-interactive"], engine.folder,
         engine.env()),
        (up_skip, [*pulumi, "up", "-s", LAB_SITE, "--yes", "--skip-preview", "--expect-no-changes",
                   "--non-interactive"], engine.folder, engine.env()),
        (deploy, [*rackform_command(), "deploy", LAB_SITE, "--root", str(REPO)], REPO, None),
        (plan, [*rackform_command(), "plan", LAB_SITE, "--root", str(REPO)], REPO, None),
    ]
    for round_number in range(1, rounds + 1):
        for figures, command, cwd, env in commands:
            timed_run(figures, command, cwd=cwd, env=env, timeout_s=DEPLOY_TIMEOUT_S)
        print(f"lab round {round_number} of {rounds} done ({time.strftime('%H:%M:%S')})", file=sys.stderr)
    print(f"Part B: the deployed lab, nothing to change; {machine_line()}; {rounds} round(s), taking turns")
    print()
    print_table([deploy, up, up_skip, plan], deploy, UP_TARGET)
    print(f"target: pulumi up <= {UP_TARGET}x rackform deploy (wall, preview included): "
          f"{ratio(up.median('wall'), deploy.median('wall'))}, {verdict(up.median('wall'), deploy.median('wall'), UP_TARGET)}")
    print(f"against the floor: pulumi up / rackform plan {ratio(up.median('wall'), plan.median('wall'))} wall, "
          f"{ratio(up.median('cpu'), plan.median('cpu'))} CPU")
    return 0 if not any(f.failure for f, *_ in commands) else 1


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="servers of the generated site (part A)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of part A")
    parser.add_argument("--no-site", action="store_true", help="skip part A")
    parser.add_argument("--lab", action="store_true", help="also part B: the deployed lab (needs root and the lab up)")
    parser.add_argument("--lab-rounds", type=int, default=2, help="timed rounds of part B")
    parser.add_argument("--engine-dir", type=Path,
                        help="part B: an EngineProject folder whose stack lab deployed the lab (tests/lab/test_pulumi_lab.py's)")
    parser.add_argument("--lab-dir", type=Path, default=DEFAULT_LAB_DIR,
                        help=f"part B: where the bench keeps its own stack lab (default {DEFAULT_LAB_DIR})")
    args = parser.parse_args(argv)
    missing = engine_missing()
    if missing:
        print(f"bench_pulumi: {missing}", file=sys.stderr)
        return 2
    code = 0
    if not args.no_site:
        part_a(args.nodes, args.rounds)
    if args.lab:
        code = part_b(args.engine_dir, args.lab_dir, args.lab_rounds)
    return code


if __name__ == "__main__":
    sys.exit(main())
