"""The scale (or fleet) benchmark of two trees in turns: the code before a change against the code now.

    .venv/bin/python bench/side_by_side.py --before /tmp/rackform-before [--rounds 3] [--sizes 1000 10000]
    .venv/bin/python bench/side_by_side.py --before /tmp/rackform-before --fleet [--rounds 3]

`--before DIR` is a copy of the repository as it was (`git worktree add DIR <commit>`, or
`git archive <commit> | tar -x -C DIR`). Each round runs bench/bench_scale.py once for each
tree, in a fresh process per size (`--code DIR` for the before tree), taking turns at going
first, on the same generated sites, with the libyaml parse floor beside each run. On a
machine shared with other work, single runs of the same code differ by a third, more than
most changes: what counts is the ratio to the parse floor measured in the same run, and its
median over the rounds. Prints, for each tree, the median and range over the rounds of each
phase's CPU seconds, of load + check + render against the floor, and of each phase's growth
from the smallest size to the largest. `--fleet` does the same with bench/bench_fleet.py
(100 sites of 100 nodes): `plan --all` CPU against its floor, in one process and in as many
processes as plan has workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PHASES = ("load", "check", "render")
CPU = 1


def run_scale(code: Path | None, sizes: list[int], sites: Path, out: Path) -> dict:
    command = [sys.executable, str(BENCH / "bench_scale.py"), "--sizes", *map(str, sizes), "--floor-only",
               "--sites-dir", str(sites), "--json", str(out)]
    if code is not None:
        command += ["--code", str(code)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_fleet(code: Path | None, out: Path) -> dict[str, float]:
    command = [sys.executable, str(BENCH / "bench_fleet.py"), "--json", str(out)]
    if code is not None:
        command += ["--code", str(code)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    run = json.loads(out.read_text())
    floor, parallel = run["floor"][CPU], run["parallel_floor"][CPU]
    worst = max(run["unchanged"][CPU], run["changed"][CPU])
    return {"floor CPU": floor, "parallel floor CPU": parallel, "plan unchanged CPU": run["unchanged"][CPU],
            "plan changed CPU": run["changed"][CPU], "plan/floor worst": worst / floor,
            "plan/floor unchanged": run["unchanged"][CPU] / floor, "plan/floor changed": run["changed"][CPU] / floor,
            "plan/parallel floor worst": worst / parallel,
            "plan wall worst": max(run["unchanged"][0], run["changed"][0])}


def figures_of(run: dict, sizes: list[int]) -> dict[str, float]:
    """Phase CPU seconds at each size, total / floor at each size, growth of each phase."""
    results, baselines = run["results"], run["baselines"]
    figures: dict[str, float] = {}
    for nodes in sizes:
        phases = {phase: results[str(nodes)][phase][CPU] for phase in PHASES}
        for phase, seconds in phases.items():
            figures[f"{phase} {nodes}"] = seconds
        figures[f"total {nodes}"] = sum(phases.values())
        figures[f"floor {nodes}"] = baselines[str(nodes)]["parse-floor"]["load"][CPU]
        figures[f"total/floor {nodes}"] = figures[f"total {nodes}"] / figures[f"floor {nodes}"]
    small, large = min(sizes), max(sizes)
    if small != large:
        for phase in (*PHASES, "total"):
            figures[f"growth {phase}"] = figures[f"{phase} {large}"] / figures[f"{phase} {small}"]
    return figures


def summary(runs: list[dict[str, float]]) -> dict[str, tuple[float, float, float]]:
    """name -> (median, lowest, highest) over the rounds."""
    return {name: (statistics.median(values), min(values), max(values))
            for name in runs[0] for values in [[run[name] for run in runs]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a copy of the repository before the change")
    parser.add_argument("--after", type=Path, help="a copy of the repository after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every round's figures to PATH")
    parser.add_argument("--fleet", action="store_true", help="bench_fleet.py (plan --all) instead of bench_scale.py")
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve() if args.after else None}
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="rackform-side-by-side-") as folder:
        sites, out = Path(folder) / "sites", Path(folder) / "run.json"
        for index in range(args.rounds):
            order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
            for name in order:
                if args.fleet:
                    figures = run_fleet(trees[name], out)
                    headline = f"plan/floor {figures['plan/floor worst']:.2f}x"
                else:
                    figures = figures_of(run_scale(trees[name], args.sizes, sites, out), args.sizes)
                    headline = f"total/floor at {max(args.sizes):,} {figures[f'total/floor {max(args.sizes)}']:.2f}x"
                rounds[name].append(figures)
                print(f"round {index + 1} {name:<6}: {headline}, load average {os.getloadavg()[0]:.1f}", flush=True)
    print(f"\nmedian (lowest-highest) of {args.rounds} round(s), CPU seconds; before = {trees['before']}, "
          f"after = {trees['after'] or BENCH.parent}")
    summaries = {name: summary(runs) for name, runs in rounds.items()}
    for figure in summaries["after"]:
        cells = [f"{summaries[name][figure][0]:7.3f} ({summaries[name][figure][1]:.3f}-{summaries[name][figure][2]:.3f})"
                 for name in ("before", "after")]
        print(f"  {figure:<26} before {cells[0]:<26} after {cells[1]}")
    if args.json:
        args.json.write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
