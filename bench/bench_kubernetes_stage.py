"""Benchmark the kubernetes stage on the shipped lab (docs/benchmarks.md, "Kubernetes stage").

    .venv/bin/python bench/bench_kubernetes_stage.py        (root; about 7 minutes)

With a warm site mirror (its bundle built, the mirror host serving it), times what a user
runs, from freshly imaged nodes:

1. `rackform lab up lab` then `rackform deploy lab --stage provision fabric os` (not timed:
   the nodes and the mirror before Kubernetes);
2. `rackform deploy lab --stage kubernetes`: the first run, kubeadm init, the HA joins, the
   workers, the network and DNS rolled out;
3. the same again: the re-run, which must change nothing.

Targets: the first run <= 6 min on 2 cores, the re-run <= 0.3 of it; both are measured in
one session, on the same nodes, and the re-run is reported as a ratio to the first. The lab
is left up; `rackform lab down lab` removes it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RACKFORM = [sys.executable, "-m", "rackform.cli"]


def rackform(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([*RACKFORM, *args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"rackform {' '.join(args)} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr}")
    return seconds, done.stdout


def stage_row(out: str, stage: str) -> tuple[float, int]:
    """(seconds, changed) from the deploy summary's row of `stage`."""
    match = re.search(rf"^{stage}\s+([\d.]+) s\s+\d+\s+\d+\s+(\d+)", out, re.MULTILINE)
    if match is None:
        sys.exit(f"no {stage} row in the deploy summary:\n{out[-2000:]}")
    return float(match.group(1)), int(match.group(2))


def main() -> None:
    rackform("mirror", "build", "lab")
    subprocess.run([*RACKFORM, "lab", "down", "lab"], cwd=ROOT, capture_output=True)
    rackform("lab", "up", "lab")
    rackform("deploy", "lab", "--stage", "provision", "fabric", "os")
    _wall, first_out = rackform("deploy", "lab", "--stage", "kubernetes")
    _wall, second_out = rackform("deploy", "lab", "--stage", "kubernetes")
    first, first_changed = stage_row(first_out, "kubernetes")
    again, again_changed = stage_row(second_out, "kubernetes")
    print(f"{'run':<34} {'stage s':>8} {'changed':>8} {'x first':>8}")
    print(f"{'kubernetes stage, first run':<34} {first:8.1f} {first_changed:8d} {1:8.2f}")
    print(f"{'kubernetes stage, re-run':<34} {again:8.1f} {again_changed:8d} {again / first:8.2f}")
    print(f"targets: first <= 360 s ({'met' if first <= 360 else 'MISSED'}), "
          f"re-run <= 0.3 x first ({'met' if again <= 0.3 * first else 'MISSED'}), re-run changes nothing "
          f"({'met' if again_changed == 0 else 'MISSED'})")


if __name__ == "__main__":
    main()
