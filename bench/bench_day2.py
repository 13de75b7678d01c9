"""Day-2 benchmark: `rackform node add` to a verified node, and `rackform maintain`, per host, on the lab.

    sudo .venv/bin/python bench/bench_day2.py --extra 1 2 4     # one lab per count, ~6-10 minutes each

For each count N: a lab site of its own (`daybench`, 10.78.x/10.79.x only) with two HCI
hosts on one Cumulus leaf plus N vScaler Stor XL servers whose containers and ipmi_sim
BMCs are up but which are powered off and absent from the design and inventory (as the
lab test does). The base site is deployed (untimed); then, timed:

- `rackform node add daybench --oob 10.78.1.0/24`: sweep, FRU, power on one node at a time
  and hear it on LLDP, write the files, deploy the new nodes (with the leaf and the PXE
  server), the os stage everywhere, verify the new nodes;
- `rackform maintain daybench --batch 2 --power-cycle`: every host power-cycled through
  its BMC two at a time, each batch back on SSH and verified before the next.

Prints the wall time and the time per added (or maintained) host. The lab is taken down
afterwards, also on failure. Not a test: figures go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "lab"))

from sitebuilder import IPMI_SIM_EXCEPTION, ROCE_FABRIC, build_site, group_vars, networks  # noqa: E402

from rackform import cli  # noqa: E402
from rackform.day2 import wire  # noqa: E402
from rackform.ipmi import credentials  # noqa: E402
from rackform.ipmi.fleet import BmcTarget, Fleet  # noqa: E402
from rackform.lab import lab, state  # noqa: E402

SITE = "daybench"



def design(extra: int) -> str:
    devices = "      - {name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2]}\n"
    devices += "".join(f"      - {{name: stor-{i}, block: stor-xl, position_u: {3 + 4 * (i - 1)}}}\n"
                       for i in range(1, extra + 1))
    devices += ("      - name: leaf-1\n        block: sn2700\n        position_u: 40\n"
                "        switch: {role: leaf, os: cumulus, fabric: compute}\n")
    cables = "cabling:\n" + "".join(f"  - {{a: node-{i}:fab0, b: leaf-1:swp{i}}}\n" for i in (1, 2))
    cables += "".join(f"  - {{a: stor-{i}:fab0, b: leaf-1:swp{2 + i}}}\n" for i in range(1, extra + 1))
    return (f"site: {SITE}\ndescription: day-2 benchmark\npower_basis: max\nracks:\n  - name: r1\n"
            f"    height_u: 42\n    power_budget_w: 60000\n    devices:\n{devices}"
            + networks("10.78.0.0/24", "10.78.1.0/24", "10.79.0.0/16") + ROCE_FABRIC + cables + IPMI_SIM_EXCEPTION)


def host_vars(n: int) -> str:
    return (f'management_address: 10.78.0.{n}\nmanagement_mac: "02:4e:00:00:00:{n:02x}"\n'
            f'bmc_address: 10.78.1.{n}\nbmc_mac: "02:4e:01:00:00:{n:02x}"\nserial: DAYBENCH-{n}\n'
            f"fabric_ports:\n  fab0: {{address: 10.79.1.{n}/24}}\n")


def rackform(*argv: str) -> tuple[int, float, str]:
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(argv))
    return code, time.monotonic() - started, out.getvalue()


def one_count(extra: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="daybench-") as scratch:
        nodes = {f"node-{i}": host_vars(10 + i) for i in (1, 2)}
        nodes |= {f"stor-{i}": host_vars(20 + i) for i in range(1, extra + 1)}
        nodes["leaf-1"] = 'management_address: 10.78.0.201\nmanagement_mac: "02:4e:00:00:00:c9"\nserial: DAYBENCH-LEAF\n'
        root = build_site(Path(scratch), SITE, design(extra), nodes, group_vars(SITE, "10.78.0.1"))
        lab.down(SITE, progress=lambda line: None)
        try:
            status = lab.up(SITE, root, progress=lambda line: None)
            if not status.up:
                raise SystemExit("\n".join(status.lines()))
            fleet = Fleet(credentials.factory_credentials())
            targets = [BmcTarget(f"stor-{i}", f"10.78.1.{20 + i}") for i in range(1, extra + 1)]
            assert all(result.ok for result in wire.power(fleet, targets, "off"))
            (root / "topologies/sites" / f"{SITE}.yaml").write_text(design(0))
            inventory = root / "inventories" / SITE
            (inventory / "hosts.yml").write_text("all:\n  hosts:\n    node-1:\n    node-2:\n    leaf-1:\n")
            for i in range(1, extra + 1):
                (inventory / "host_vars" / f"stor-{i}.yml").unlink()
            code, _seconds, out = rackform("deploy", SITE, "--root", str(root))
            if code:
                raise SystemExit(out)
            code, add_s, out = rackform("node", "add", SITE, "--root", str(root), "--oob", "10.78.1.0/24")
            if code:
                raise SystemExit(out)
            code, maintain_s, out = rackform("maintain", SITE, "--root", str(root), "--batch", "2", "--power-cycle")
            if code:
                raise SystemExit(out)
            return {"extra": extra, "add_s": add_s, "maintain_s": maintain_s, "hosts": 2 + extra}
        finally:
            lab.down(SITE, progress=lambda line: None)
            shutil.rmtree(state.LABS_DIR / SITE, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, nargs="+", default=[1, 2, 4], help="added nodes per run")
    args = parser.parse_args()
    print(f"{'added':>5} {'node add':>10} {'per node':>10} {'maintain':>10} {'hosts':>6} {'per host':>10}")
    for extra in args.extra:
        row = one_count(extra)
        print(f"{extra:>5} {row['add_s']:>9.1f}s {row['add_s'] / extra:>9.1f}s {row['maintain_s']:>9.1f}s "
              f"{row['hosts']:>6} {row['maintain_s'] / row['hosts']:>9.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
