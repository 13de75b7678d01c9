"""How long `rackform verify` takes to list a site's inventory for testinfra, and how it grows.

    .venv/bin/python bench/bench_verify_inventory.py                  # 1,000 and 10,000 hosts
    .venv/bin/python bench/bench_verify_inventory.py --sizes 1000 --timeout-s 120

Each size is generated (bench/gen_site.py) and rendered once, not timed. Then, in a
child process each:
- `ansible-inventory --list`: what testinfra runs (as shipped) to learn hosts and
  their connection variables; wall time and the size of its JSON output;
- the same listing "before": the project as rendered until /etc/hosts became a
  project file, i.e. with the site's /etc/hosts block as a group variable of `all`
  (`site_etc_hosts_block`), which the listing copies into every host. Only at sizes up
  to `--before-up-to` (it grows with the square of the site: 10,000 hosts would print
  gigabytes);
- rackform's reader (`rackform.run.verify_inventory.EmittedInventory`): what verify
  uses to pick machines and give the checks their variables; every host's merged
  variables read once.
Each figure is printed with its ratio to the same column at the first size (the
baseline), and the table ends with the growth exponent of each column between its
smallest and largest measured size: time (and output size) ~ hosts^k, 1 linear, 2
quadratic. A run past
`--timeout-s` or `--memory-gib` is reported as such, not waited for. Compare sizes from
1,000 hosts up: below that a generated site is mostly its first pod's HCI racks, whose
hosts carry fewer variables, so the mix and not the layout drives the ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import gen_site  # noqa: E402

READER = """
import sys, time
from pathlib import Path
from rackform.run.verify_inventory import EmittedInventory
start = time.perf_counter()
inventory = EmittedInventory(Path(sys.argv[1]))
for host in inventory.hosts:
    inventory.vars_for(host)
print(f"{time.perf_counter() - start:.2f}")
"""


def render(nodes: int, root: Path) -> Path:
    from rackform.model.loader import load_site
    from rackform.render.project import render_project

    gen_site.write_site(root, nodes)
    project = root / "build" / gen_site.SITE_NAME
    render_project(load_site(gen_site.SITE_NAME, root), project)
    return project


@dataclass
class Figure:
    seconds: float | None
    mib: float | None = None
    note: str = ""
    """Why there is no figure (stopped at the time limit, out of memory, not run)."""

    def cell(self, baseline: Figure | None) -> str:
        if self.seconds is None:
            return self.note
        text = f"{self.seconds:.1f} s" + ("" if self.mib is None else f", {self.mib:.1f} MiB")
        if baseline is None or not baseline.seconds or baseline is self:
            return text
        ratio = f"×{self.seconds / baseline.seconds:.1f}"
        if self.mib is not None and baseline.mib:
            ratio += f", ×{self.mib / baseline.mib:.1f}"
        return f"{text} ({ratio})"


def etc_hosts_as_group_variable(project: Path) -> None:
    """The layout before /etc/hosts was a project file: the whole block a variable of every host."""
    block = (project / "files" / "etc_hosts").read_text()
    (project / "inventory" / "group_vars" / "all" / "etc_hosts.yml").write_text(
        yaml.safe_dump({"site_etc_hosts_block": block}, width=math.inf))


def ansible_listing(project: Path, timeout_s: float, memory_gib: float) -> Figure:
    env = {**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_VERBOSITY": "0",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    limit = int(memory_gib * 2**30)

    def cap_memory() -> None:  # a quadratic listing must fail here, not take the shared machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        try:
            subprocess.run(["ansible-inventory", "--list", "-i", "inventory/hosts.yml"], cwd=project, env=env,
                           stdout=out, stderr=subprocess.DEVNULL, timeout=timeout_s, check=True,
                           preexec_fn=cap_memory)
        except subprocess.TimeoutExpired:
            return Figure(None, note=f"over {timeout_s:.0f} s (stopped)")
        except subprocess.CalledProcessError as error:
            return Figure(None, note=f"failed (exit {error.returncode}; memory capped at {memory_gib:g} GiB)")
        size = out.seek(0, os.SEEK_END)
    return Figure(time.perf_counter() - started, size / 2**20)


def reader(project: Path) -> Figure:
    done = subprocess.run([sys.executable, "-c", READER, str(project / "inventory" / "hosts.yml")],
                          capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    return Figure(float(done.stdout))


def exponent(column: list[tuple[int, Figure]]) -> str:
    """k in time ~ hosts^k (and in size ~ hosts^k) between the smallest and largest size measured here."""
    measured = [(hosts, figure) for hosts, figure in column if figure.seconds]
    if len(measured) < 2:
        return "n/a"
    (first, early), (last, late) = measured[0], measured[-1]
    span = math.log(last / first)
    text = f"time {math.log(late.seconds / early.seconds) / span:.2f}"
    if early.mib and late.mib:
        text += f", size {math.log(late.mib / early.mib) / span:.2f}"
    return f"{text} ({first:,} to {last:,})"


COLUMNS = ("ansible-inventory --list", "before: /etc/hosts as a group variable", "rackform reader")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--before-up-to", type=int, default=1_000, metavar="HOSTS",
                        help="measure the old layout only at sizes up to this (default 1,000)")
    parser.add_argument("--memory-gib", type=float, default=6.0, help="memory cap of each listing (default 6)")
    args = parser.parse_args(argv)
    print(f"| hosts | {' | '.join(COLUMNS)} |\n|---:|---|---|---|")
    rows: list[tuple[int, tuple[Figure, Figure, Figure]]] = []
    for nodes in args.sizes:
        with tempfile.TemporaryDirectory(prefix=f"rackform-bench-inv-{nodes}-") as scratch:
            project = render(nodes, Path(scratch))
            now = ansible_listing(project, args.timeout_s, args.memory_gib)
            figures = (now, Figure(None, note="not run (--before-up-to)"), reader(project))
            if nodes <= args.before_up_to:
                etc_hosts_as_group_variable(project)
                figures = (now, ansible_listing(project, args.timeout_s, args.memory_gib), figures[2])
        rows.append((nodes, figures))
        baseline = rows[0][1]
        cells = [figure.cell(base) for figure, base in zip(figures, baseline)]
        scale = "" if len(rows) == 1 else f" (×{nodes / rows[0][0]:g})"
        print(f"| {nodes:,}{scale} | {' | '.join(cells)} |", flush=True)
    if len(rows) > 1:
        exponents = [exponent([(nodes, figures[index]) for nodes, figures in rows]) for index in range(len(COLUMNS))]
        print(f"| k in ~ hosts^k (1: linear, 2: quadratic) | {' | '.join(exponents)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
