"""Scale benchmark: load, check and render synthetic sites of 100, 1,000 and 10,000 nodes.

    .venv/bin/python bench/bench_scale.py                 # the table (about a minute on 2 cores)
    .venv/bin/python bench/bench_scale.py --sizes 100 1000 --no-baseline
    .venv/bin/python bench/bench_scale.py --profile 10000 # cProfile of the load phase

Each size is generated once (bench/gen_site.py, not timed) and measured in a fresh
Python process, so imports are not timed and peak RSS belongs to that size alone.
Phases: load (`rackform.model.loader.load_site`), check (`rackform.checks.runner.run_checks`),
render (`rackform.render.project.render_files`, when that module exists).
Baselines for the load phase, each in its own process:
- pure-Python: the same loader on PyYAML's pure-Python SafeLoader (what rackform
  would cost without libyaml),
- parse floor: libyaml parsing the same files into plain dicts, no line tracking,
  no schema: what no YAML-based loader can beat.
Targets: t(10k)/t(1k) <= 12 per phase (no worse than linear plus noise), a 10k-node
total <= 10 s, and (issue 26) the 10k-node total at most 2x the parse floor, CPU.

    .venv/bin/python bench/bench_scale.py --sizes 1000 10000 --floor-only --json out.json
    .venv/bin/python bench/bench_scale.py ... --code /tmp/before   # the rackform package of another tree

`--code DIR` times the rackform package found in DIR (a copy of the code before a change)
with this benchmark and these generated sites; bench/side_by_side.py runs both in turns.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import gc
import json
import os
import platform
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import gen_site  # noqa: E402

SIZES = (100, 1_000, 10_000)
GROWTH_TARGET = 12.0
TOTAL_10K_TARGET_S = 10.0
FLOOR_RATIO_TARGET = 2.0
"""Issue 26: load + check + render of 10k nodes at most this many times the parse floor (CPU)."""
PIPELINE_PHASES = ("load", "check", "render")
"""What `rackform render SITE` does; the total and the targets cover these."""
PHASES = (*PIPELINE_PHASES, "diagram")
"""Plus `rackform diagram SITE` (one SVG per rack), shown beside the pipeline."""


# ---------------------------------------------------------------- measured in a child process


def timed(fn):
    """([wall s, CPU s], result) of one call.

    CPU time (this process only) is kept beside wall time because it is much
    steadier when other jobs share the machine's cores.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return [time.perf_counter() - wall, time.process_time() - cpu], result


def best_of(repeats: int, fn):
    """([best wall s, best CPU s], last result) over `repeats` calls."""
    best = [float("inf"), float("inf")]
    result = None
    for _ in range(repeats):
        figures, result = timed(fn)
        best = [min(pair) for pair in zip(best, figures)]
    return best, result


def render_phase():
    """`render_files` and how to call it, or None while the renderer does not exist."""
    try:
        from rackform.render.project import render_files
    except ImportError:
        return None
    required = [
        p for p in inspect.signature(render_files).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) == 1:
        return render_files
    return lambda site: render_files(site, Path(tempfile.mkdtemp(prefix="rackform-bench-render-")))


def measure_ours(root: Path, repeats: int) -> dict:
    """Best of `repeats` whole pipelines, each on a freshly loaded site (checks may cache per site)."""
    from rackform.checks.runner import run_checks
    from rackform.model.loader import load_site
    from rackform.render.diagram import site_svgs

    render = render_phase()
    # Warm up on the small lab site: imports of check modules and template compiles are
    # paid once per process and would otherwise land in the single 10k run only.
    lab = load_site("lab", REPO_ROOT)
    run_checks(lab)
    site_svgs(lab)
    if render is not None:
        render(lab)
    best: dict[str, list[float] | None] = dict.fromkeys(PHASES)
    for _ in range(repeats):
        run = {}
        run["load"], site = timed(lambda: load_site(gen_site.SITE_NAME, root))
        run["check"], findings = timed(lambda: run_checks(site))
        if render is not None:
            run["render"] = timed(lambda: render(site))[0]
        run["diagram"] = timed(lambda: site_svgs(site))[0]
        for phase, figures in run.items():
            best[phase] = figures if best[phase] is None else [min(pair) for pair in zip(best[phase], figures)]
    figures: dict = dict(best)
    figures["errors"] = sum(f.severity == "error" for f in findings)
    figures["warnings"] = sum(f.severity == "warning" for f in findings)
    figures["first_findings"] = [str(f) for f in findings[:5]]
    figures["hosts"], figures["switches"] = len(site.hosts), len(site.switches)
    figures["racks"], figures["cables"] = len(site.racks), len(site.cables)
    return figures


def measure_pure_python_load(root: Path, repeats: int) -> dict:
    import yaml

    from rackform.model import source
    from rackform.model.loader import load_site

    class PurePythonLineLoader(yaml.SafeLoader):  # the naive path: no libyaml
        shown_path = "?"

    PurePythonLineLoader.add_constructor("tag:yaml.org,2002:map", source._construct_mapping)
    PurePythonLineLoader.add_constructor("tag:yaml.org,2002:seq", source._construct_sequence)
    source._LineLoader = PurePythonLineLoader
    return {"load": best_of(repeats, lambda: load_site(gen_site.SITE_NAME, root))[0]}


def measure_parse_floor(root: Path, repeats: int) -> dict:
    import yaml

    files = sorted(root.glob("topologies/**/*.yaml")) + sorted(root.glob("inventories/**/*.yml"))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    gc.disable()  # as load_site does, so the floor is a fair one
    return {"load": best_of(repeats, lambda: [yaml.load(p.read_text(), Loader=loader) for p in files])[0]}  # noqa: S506


MEASURES = {"ours": measure_ours, "pure-python": measure_pure_python_load, "parse-floor": measure_parse_floor}


def child_main(what: str, root: Path, repeats: int, code: Path | None = None) -> None:
    if code is not None:  # the rackform package of another tree, before anything imports it
        sys.path.insert(0, str(code))
    figures = MEASURES[what](root, repeats)
    figures["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(figures))


# ---------------------------------------------------------------- the parent: generate, spawn, report


def run_child(what: str, root: Path, repeats: int, code: Path | None = None) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", what, "--root", str(root), "--repeats", str(repeats)]
    if code is not None:
        command += ["--code", str(code)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{what} run on {root} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def repeats_for(nodes: int) -> int:
    return 3 if nodes < 10_000 else 1


WALL, CPU = 0, 1
CLOCK_NAMES = {WALL: "wall", CPU: "CPU"}


def phase_s(figures: dict, phase: str, clock: int) -> float | None:
    return None if figures[phase] is None else figures[phase][clock]


def seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def total_s(figures: dict, clock: int) -> float:
    return sum(phase_s(figures, phase, clock) or 0.0 for phase in PIPELINE_PHASES)


def print_header(sizes: list[int]) -> None:
    import yaml

    libyaml = "with libyaml" if getattr(yaml, "__with_libyaml__", False) else "pure Python"
    load_1m, load_5m, _ = os.getloadavg()
    print(
        f"rackform scale benchmark - {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU(s), PyYAML {yaml.__version__} ({libyaml}), load average {load_1m:.1f}/{load_5m:.1f}"
    )
    print(f"best of {repeats_for(min(sizes))} runs below 10k nodes, 1 run at 10k; wall seconds, CPU seconds in brackets")
    print()


def print_phase_table(results: dict[int, dict]) -> None:
    print(f"{'nodes':>6} {'switches':>8} {'cables':>7} | {'load s':>15} {'check s':>15} {'render s':>15} "
          f"{'total s':>15} {'diagram s':>15} | {'s/1k nodes':>10} | {'peak RSS':>9} | findings")
    for nodes, figures in results.items():
        cells = [
            f"{seconds(phase_s(figures, phase, WALL)):>6} [{seconds(phase_s(figures, phase, CPU)):>6}]" for phase in PHASES
        ]
        total, total_cpu = total_s(figures, WALL), total_s(figures, CPU)
        print(
            f"{nodes:>6} {figures['switches']:>8} {figures['cables']:>7} | {' '.join(f'{c:>15}' for c in cells[:3])} "
            f"{total:>6.3f} [{total_cpu:>6.3f}] {cells[3]:>15} | {total / nodes * 1000:>10.3f} | {figures['peak_rss_mib']:>5.0f} MiB | "
            f"{figures['errors']} error(s), {figures['warnings']} warning(s)"
        )
    if any(figures["render"] is None for figures in results.values()):
        print("render: not available (rackform.render.project.render_files not found)")
    for nodes, figures in results.items():
        if figures["errors"]:
            print(f"\n{nodes} nodes: the generated site has check errors, first ones:")
            print("\n".join(f"  {line}" for line in figures["first_findings"]))


def print_baseline_table(results: dict[int, dict], baselines: dict[int, dict]) -> None:
    print("\nload phase against baselines (wall s [CPU s]; ratio = baseline / ours, on CPU time)")
    print(f"{'nodes':>6} | {'ours':>15} | {'pure-Python SafeLoader':>22} {'ratio':>6} | {'libyaml parse floor':>19} {'ratio':>6}")
    for nodes, base in baselines.items():
        ours = results[nodes]["load"]
        pure, floor = base["pure-python"]["load"], base["parse-floor"]["load"]
        print(
            f"{nodes:>6} | {ours[WALL]:>6.3f} [{ours[CPU]:>6.3f}] | {pure[WALL]:>11.3f} [{pure[CPU]:>8.3f}] "
            f"{pure[CPU] / ours[CPU]:>5.2f}x | {floor[WALL]:>8.3f} [{floor[CPU]:>8.3f}] {floor[CPU] / ours[CPU]:>5.2f}x"
        )


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER TARGET"


def floor_ratio(figures: dict, baseline: dict) -> float:
    """load + check + render against the libyaml parse floor of the same files, CPU seconds."""
    return total_s(figures, CPU) / baseline["parse-floor"]["load"][CPU]


def print_floor_ratios(results: dict[int, dict], baselines: dict[int, dict]) -> None:
    print(f"\nload + check + render against the libyaml parse floor (CPU), target at 10k <= {FLOOR_RATIO_TARGET:g}x")
    for nodes, base in baselines.items():
        ratio = floor_ratio(results[nodes], base)
        verdict_text = f"  {verdict(ratio <= FLOOR_RATIO_TARGET)}" if nodes == 10_000 else ""
        print(f"  {nodes:>6} nodes: {ratio:5.2f}x{verdict_text}")


def print_verdicts(results: dict[int, dict]) -> None:
    if 1_000 not in results or 10_000 not in results:
        return
    small, large = results[1_000], results[10_000]
    print(f"\ngrowth t(10k)/t(1k), target <= {GROWTH_TARGET:g} (10x the nodes)")
    print(f"  {'phase':<8} {'wall':>6} {'CPU':>6}")
    for phase in (*PIPELINE_PHASES, "total", "diagram"):
        if phase == "total":
            ratios = [total_s(large, clock) / total_s(small, clock) for clock in (WALL, CPU)]
        elif small[phase] is None or large[phase] is None:
            continue
        else:
            ratios = [large[phase][clock] / small[phase][clock] for clock in (WALL, CPU)]
        print(f"  {phase:<8} {ratios[WALL]:6.1f} {ratios[CPU]:6.1f}  {verdict(max(ratios) <= GROWTH_TARGET)}")
    for clock in (WALL, CPU):
        total = total_s(large, clock)
        print(f"10k-node total {total:.2f} s {CLOCK_NAMES[clock]}, target <= {TOTAL_10K_TARGET_S:g} s: "
              f"{verdict(total <= TOTAL_10K_TARGET_S)}")


def profile_load(nodes: int, top: int) -> None:
    from rackform.model.loader import load_site

    with tempfile.TemporaryDirectory(prefix=f"rackform-bench-{nodes}-") as folder:
        root = gen_site.write_site(Path(folder), nodes)
        profiler = cProfile.Profile()
        profiler.runcall(load_site, gen_site.SITE_NAME, root)
        for order in ("tottime", "cumulative"):
            print(f"\n== load_site, {nodes} nodes, top {top} by {order}")
            pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(top)


def site_root(folder: Path, nodes: int) -> Path:
    """The generated site of `nodes` under folder/<nodes>, written unless a complete one is there."""
    root, done = folder / str(nodes), folder / f"{nodes}.done"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        gen_site.write_site(root, nodes)
        done.write_text("written by bench_scale.py\n")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="rackform scale benchmark (see the module docstring)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="node counts (default: 100 1000 10000)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the pure-Python and parse-floor load baselines")
    parser.add_argument("--floor-only", action="store_true", help="of the baselines, the libyaml parse floor only")
    parser.add_argument("--code", type=Path, help="time the rackform package of this tree (default: this one)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH")
    parser.add_argument("--sites-dir", type=Path, metavar="DIR",
                        help="generate the sites into DIR/<nodes> once and reuse them (default: a temp folder)")
    parser.add_argument("--profile", type=int, metavar="NODES", help="cProfile the load phase at NODES and exit")
    parser.add_argument("--top", type=int, default=25, help="rows of the profile to print")
    parser.add_argument("--child", choices=sorted(MEASURES), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child, args.root, args.repeats, args.code)
        return 0
    if args.profile:
        profile_load(args.profile, args.top)
        return 0
    print_header(args.sizes)
    results: dict[int, dict] = {}
    baselines: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rackform-bench-") as folder:
        for nodes in args.sizes:
            root = site_root(args.sites_dir or Path(folder), nodes)
            results[nodes] = run_child("ours", root, repeats_for(nodes), args.code)
            if not args.no_baseline:
                kinds = ("parse-floor",) if args.floor_only else ("pure-python", "parse-floor")
                baselines[nodes] = {what: run_child(what, root, repeats_for(nodes), args.code) for what in kinds}
    print_phase_table(results)
    if baselines and not args.floor_only:
        print_baseline_table(results, baselines)
    if baselines:
        print_floor_ratios(results, baselines)
    print_verdicts(results)
    if args.json:
        args.json.write_text(json.dumps({"results": results, "baselines": baselines, "code": str(args.code or REPO_ROOT),
                                         "load_average": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
