"""Benchmark `rackform plan --all` over a generated fleet (docs/benchmarks.md, "Fleet").

    .venv/bin/python bench/bench_fleet.py [--sites 100] [--nodes 100]

Writes SITES copies of a generated NODES-node site (bench/gen_site.py) under a scratch
root, records every stage of every site as applied (as a deploy would: the digests and
input hashes the stage runner records), changes one shared setting that every site reads
(the host MTU of the `roce` profile), then times, as a user runs them:

- `rackform plan --all --json` with nothing changed (every site compared with its state);
- the same after the shared change (every site names its changed stages and file);
- side by side, the floor: load + checks + render of every site in one process, which
  plan cannot go below (plan = that + digests + the comparison);
- and the same floor in as many forked processes as plan has workers, sharing the sites as
  plan does: two processes busy at once each take more CPU seconds for the same work than one
  alone (on the 2-vCPU VM about a third more), which plan pays too without doing more.

Targets: plan --all over 100 sites of 100 nodes (10,000 nodes) within 10 s on a 2-core
machine; (issue 26) its CPU at most 1.2x the floor's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))
# `--code DIR`: the rackform package of another tree (a copy of the code before a change) is
# timed, here and in plan's process; it must come first on the path before anything imports it.
CODE = Path(sys.argv[sys.argv.index("--code") + 1]).resolve() if "--code" in sys.argv[:-1] else REPO
sys.path.insert(0, str(CODE))

from gen_site import SITE_NAME, write_site  # noqa: E402

from rackform.pipeline import load_and_check, stage_digests, stage_inputs  # noqa: E402
from rackform.render.project import render_files  # noqa: E402
from rackform.run import applied  # noqa: E402

TARGET_S = 10.0
CPU_RATIO_TARGET = 1.2


def make_fleet(root: Path, sites: int, nodes: int) -> list[str]:
    template = write_site(root / "template", nodes)
    names = [f"site-{index:03d}" for index in range(sites)]
    for folder in ("blocks", "profiles"):
        shutil.copytree(template / "topologies" / folder, root / "topologies" / folder)
    for file in ("versions.yaml", "defaults.yaml"):
        shutil.copy(template / "topologies" / file, root / "topologies" / file)
    design = (template / "topologies" / "sites" / f"{SITE_NAME}.yaml").read_text()
    (root / "topologies" / "sites").mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / "topologies" / "sites" / f"{name}.yaml").write_text(design.replace(f"site: {SITE_NAME}", f"site: {name}", 1))
        shutil.copytree(template / "inventories" / SITE_NAME, root / "inventories" / name)
    shutil.rmtree(template)
    return names


def record_applied(root: Path, names: list[str]) -> float:
    """Record every stage of every site as applied; returns the seconds it took (load+check+render+digests)."""
    started = time.perf_counter()
    for name in names:
        site, _ = load_and_check(name, root)
        files = render_files(site)
        digests = stage_digests(files)
        inputs = stage_inputs(files, list(digests))
        for stage, digest in digests.items():
            applied.record(root, name, stage, applied.AppliedStage(
                digest=digest, complete=True, applied_at=applied.now(), by="bench", via="cli",
                files=inputs.get(stage, {})))
    return time.perf_counter() - started


def floor_s(root: Path, names: list[str]) -> tuple[float, float]:
    """load + checks + render of every site, in one process: what plan --all cannot go below.
    (wall seconds, CPU seconds)"""
    started, cpu = time.perf_counter(), time.process_time()
    for name in names:
        site, _ = load_and_check(name, root)
        render_files(site)
    return time.perf_counter() - started, time.process_time() - cpu


def _floor_one(name: str, root: Path) -> None:
    site, _ = load_and_check(name, root)
    render_files(site)


def parallel_floor_s(root: Path, names: list[str], workers: int) -> tuple[float, float]:
    """The floor's work in `workers` processes forked from this warm one, the sites shared out
    as plan --all shares them (wall seconds, CPU seconds of the workers)."""
    started, cpu = time.perf_counter(), children_cpu_s()
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_floor_one, names, [root] * len(names), chunksize=max(1, len(names) // (workers * 4))))
    return time.perf_counter() - started, children_cpu_s() - cpu


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_plan(root: Path, env: dict) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the command and its workers, the plan)."""
    started, cpu = time.perf_counter(), children_cpu_s()
    done = subprocess.run([sys.executable, "-m", "rackform.cli", "plan", "--all", "--json", "--root", str(root)],
                          capture_output=True, text=True, env=env, check=True, cwd=CODE)
    return time.perf_counter() - started, children_cpu_s() - cpu, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures to PATH")
    parser.add_argument("--code", type=Path, metavar="DIR", help="time the rackform package of this tree")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rackform-fleet-") as scratch:
        root = Path(scratch)
        env = {**os.environ, applied.STATE_DIR_ENV: str(root / "state"), "PYTHONPATH": str(CODE)}
        os.environ[applied.STATE_DIR_ENV] = env[applied.STATE_DIR_ENV]
        names = make_fleet(root, args.sites, args.nodes)
        record_s = record_applied(root, names)
        floor, floor_cpu = floor_s(root, names)
        workers = min(len(names), os.cpu_count() or 1)
        parallel, parallel_cpu = parallel_floor_s(root, names, workers)
        unchanged_s, unchanged_cpu, unchanged = timed_plan(root, env)
        profile = root / "topologies" / "profiles" / "roce.yaml"
        profile.write_text(profile.read_text().replace("mtu: 9000", "mtu: 8800"))
        changed_s, changed_cpu, changed = timed_plan(root, env)
    total_nodes = args.sites * args.nodes
    idle = sum(1 for site in unchanged["sites"] if not site["to_run"])
    busy = {tuple(site["to_run"]) for site in changed["sites"]}
    print(f"fleet: {args.sites} sites x {args.nodes} nodes = {total_nodes:,} nodes (2-core machine)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (above the core count, other work shares the cores: read the CPU column)")
    print(f"{'what':<60}{'wall s':>8}{'CPU s':>8}{'CPU/site':>10}{'CPU vs floor':>14}{'vs parallel floor':>19}")
    rows = [
        ("floor: load + checks + render, one process", floor, floor_cpu),
        (f"floor in {workers} forked processes, as plan's workers", parallel, parallel_cpu),
        ("recording every stage as applied (deploy's bookkeeping)", record_s, None),
        (f"rackform plan --all, nothing changed ({workers} workers)", unchanged_s, unchanged_cpu),
        (f"rackform plan --all, after a shared MTU change ({workers} workers)", changed_s, changed_cpu),
    ]
    for label, seconds, cpu in rows:
        cpu_text = (f"{cpu:>8.2f}{cpu / args.sites * 1000:>8.1f}ms{cpu / floor_cpu:>13.2f}x{cpu / parallel_cpu:>18.2f}x"
                    if cpu else "")
        print(f"{label:<60}{seconds:>8.2f}{cpu_text}")
    print(f"nothing changed: {idle} of {args.sites} sites with nothing to do")
    print(f"after the change: every site would run {sorted(busy)}")
    verdict = "ok" if max(unchanged_s, changed_s) <= TARGET_S else "MISSED"
    print(f"target: plan --all over {total_nodes:,} nodes <= {TARGET_S:.0f} s: {max(unchanged_s, changed_s):.2f} s, {verdict}")
    worst = max(unchanged_cpu, changed_cpu) / floor_cpu
    print(f"target: plan --all CPU <= {CPU_RATIO_TARGET:g}x the floor's: {worst:.2f}x, "
          f"{'ok' if worst <= CPU_RATIO_TARGET else 'MISSED'} "
          f"({max(unchanged_cpu, changed_cpu) / parallel_cpu:.2f}x the floor run as plan runs it)")
    if args.json:
        args.json.write_text(json.dumps({
            "floor": [floor, floor_cpu], "parallel_floor": [parallel, parallel_cpu], "workers": workers,
            "unchanged": [unchanged_s, unchanged_cpu], "changed": [changed_s, changed_cpu],
            "load_average": os.getloadavg()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
