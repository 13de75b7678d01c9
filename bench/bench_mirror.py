"""Benchmark `rackform mirror build` from source (docs/benchmarks.md, "Site mirror").

    .venv/bin/python bench/bench_mirror.py [--kubernetes 1.36.3] [--cold]

Runs the build as a user does, in a child process, and reports wall time, CPU time and the
peak memory of the biggest process in the tree (the Go compiler or linker):

- warm: the machine's caches as they are (a second `make test` on the same machine);
- cold (--cold): empty Go build and module caches and an empty rackform cache, all in a
  scratch folder (the first `make test` on a fresh machine; minutes: every package of
  Kubernetes is compiled and every module fetched).

The baseline beside them is the floor of a warm run: reading the bundle's manifest and
hashing its files (`rackform mirror show --verify`), which no check of an unchanged bundle
can avoid.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RACKFORM = [sys.executable, "-m", "rackform.cli"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MiB of the biggest process in the run's tree, last output line),
    measured by GNU time around this one run (so each row's peak is its own)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as figures:
        result = subprocess.run(["/usr/bin/time", "-o", figures.name, "-f", "%e %U %S %M", *argv], cwd=ROOT, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")
        wall, user, system, peak_kib = figures.read().split()[-4:]
    last = (result.stdout.strip().splitlines() or [""])[-1]
    return float(wall), float(user) + float(system), int(peak_kib) / 1024, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubernetes", default=None, help="release (default: the matrix's)")
    parser.add_argument("--cold", action="store_true", help="also a cold build in scratch caches (minutes)")
    args = parser.parse_args()
    release = ["--kubernetes", args.kubernetes] if args.kubernetes else []
    rows = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="bench-mirror-") as scratch:
            cold_env = {**env, "GOCACHE": f"{scratch}/go-build", "GOMODCACHE": f"{scratch}/go-mod",
                        "RACKFORM_MIRROR_CACHE": f"{scratch}/cache", "RACKFORM_MIRROR_BUNDLES": f"{scratch}/bundles"}
            rows.append(("cold build (empty caches)", *timed([*RACKFORM, "mirror", "build", *release], cold_env)))
            rows.append(("warm rebuild, same caches", *timed([*RACKFORM, "mirror", "build", *release], cold_env)))
            subprocess.run(["chmod", "-R", "u+w", scratch], check=False)  # the module cache is read-only
    rows.append(("warm build (this machine)", *timed([*RACKFORM, "mirror", "build", *release], env)))
    rows.append(("floor: show --verify", *timed([*RACKFORM, "mirror", "show", *release, "--verify"], env)))
    floor = rows[-1][1]
    print(f"{'run':<28} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'x floor':>8}")
    for name, wall, cpu, peak, _last in rows:
        print(f"{name:<28} {wall:8.1f} {cpu:8.1f} {peak:9.0f} {wall / floor:8.2f}")
    for name, *_figures, last in rows:
        print(f"  {name}: {last}")


if __name__ == "__main__":
    main()
