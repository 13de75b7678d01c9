"""How long `rackform verify` takes to list a site's inventory for testinfra, and how big it is.

    .venv/bin/python bench/bench_verify_inventory.py                  # 1,000 and 10,000 hosts
    .venv/bin/python bench/bench_verify_inventory.py --sizes 1000 --timeout-s 120

Each size is generated (bench/gen_site.py) and rendered once, not timed. Then, in a
child process each:
- `ansible-inventory --list`: what testinfra runs (as shipped) to learn hosts and
  their connection variables; wall time and the size of its JSON output;
- rackform's reader (`rackform.run.verify_inventory.EmittedInventory`): what verify
  uses to pick machines and give the checks their variables; every host's merged
  variables read once.
A run past `--timeout-s` is reported as such, not waited for.
"""

from __future__ import annotations

import argparse
import os
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
    from rackform.render import render_project

    gen_site.write_site(root, nodes)
    project = root / "build" / gen_site.SITE_NAME
    render_project(load_site(gen_site.SITE_NAME, root), project)
    return project


def ansible_listing(project: Path, timeout_s: float) -> str:
    env = {**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_VERBOSITY": "0",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        try:
            subprocess.run(["ansible-inventory", "--list", "-i", "inventory/hosts.yml"], cwd=project, env=env,
                           stdout=out, stderr=subprocess.DEVNULL, timeout=timeout_s, check=True)
        except subprocess.TimeoutExpired:
            return f"over {timeout_s:.0f} s (stopped)"
        size = out.seek(0, os.SEEK_END)
    return f"{time.perf_counter() - started:.1f} s, {size / 2**20:.1f} MiB"


def reader(project: Path) -> str:
    done = subprocess.run([sys.executable, "-c", READER, str(project / "inventory" / "hosts.yml")],
                          capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    return f"{float(done.stdout):.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    print("| hosts | ansible-inventory --list | rackform reader |\n|---:|---|---|")
    for nodes in args.sizes:
        with tempfile.TemporaryDirectory(prefix=f"rackform-bench-inv-{nodes}-") as scratch:
            project = render(nodes, Path(scratch))
            print(f"| {nodes:,} | {ansible_listing(project, args.timeout_s)} | {reader(project)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
