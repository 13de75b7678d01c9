"""Deploy benchmark on the local lab: the os stage on 3 and on 12 servers, three ways.

    sudo .venv/bin/python bench/bench_deploy.py                  # dep3 and dep12, ~10 minutes on 2 cores
    sudo .venv/bin/python bench/bench_deploy.py --sizes 3        # a quick look

Needs root (the lab: systemd-nspawn, network namespaces). Generates two sites in a temp
root from the real catalog: `dep3` (one HCI block, 3 servers, 10.68.0.0/16 only) and
`dep12` (four HCI blocks, 12 servers, 10.69.0.0/16 only); no switches, so the figures
are the servers' alone. For each site it times:

- lab up:  rackform.lab.lab.up on fresh hosts;
- first:   validate + os with the rendered, tuned ansible.cfg (pipelining, ControlPersist,
           forks sized to the site) on fresh hosts;
- re-run:  the same deploy again (idempotent: nothing should change);
- stock:   lab down + up (fresh hosts again), then the same first-run deploy, and its
           re-run, from a copy of the project whose ansible.cfg has Ansible's own defaults:
           forks 5, no pipelining, no fact cache, and Ansible's default ssh_args (which
           include ControlMaster=auto and ControlPersist=60s).

Times are wall-clock seconds around rackform.run.deploy.deploy (imports and render
excluded); the os column is the os playbook's own duration. Targets: re-run <= 0.4x
first (issue 10), tuned >= 2x stock (issue 10), 12-host <= 1.5x 3-host (issue 3). Both labs are taken down at the end,
also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from rackform.lab import lab  # noqa: E402
from rackform.pipeline import build_dir, load_and_check  # noqa: E402
from rackform.render.project import render_project  # noqa: E402
from rackform.run.deploy import deploy, plan_steps  # noqa: E402

SIZES = {3: ("dep3", "10.68"), 12: ("dep12", "10.69")}
HOSTS_PER_HCI = 3
SCALE_TARGET = 1.5
RERUN_TARGET = 0.4
TUNED_TARGET = 2.0

SITE_YAML = """\
site: {site}
description: Deploy benchmark - {count} HCI servers, no switches
power_basis: max
racks:
  - name: r1
    height_u: 42
    power_budget_w: 60000
    devices:
{devices}
networks:
  - {{name: mgmt, purpose: management, prefix: {net}.0.0/24, gateway: {net}.0.1}}
  - {{name: oob, purpose: oob, prefix: {net}.1.0/24}}
fabric:
  no_single_point_of_failure: false
  roce: {{priority: 3, dscp: 26, cnp_priority: 6, cnp_dscp: 48}}
  switch:
    trust: dscp
    pfc_priorities: [3]
    dscp_to_priority: {{26: 3, 48: 6}}
    ecn: {{enabled: true, min_kb: 150, max_kb: 1500}}
    pfc_watchdog: true
    mtu: 9216
  host: {{trust: dscp, pfc_priorities: [3], roce_tos: 106, ecn: true, mtu: 9000}}
"""

HOST_VARS = """\
management_address: {net}.0.{n}
management_mac: "02:{octet:02x}:00:00:00:{n:02x}"
bmc_address: {net}.1.{n}
bmc_mac: "02:{octet:02x}:01:00:00:{n:02x}"
serial: {site}-{n}
"""

GROUP_VARS = """\
ansible_user: root
ntp_servers: [{net}.0.1]
dns_servers: [{net}.0.1]
timezone: Etc/UTC
domain: {site}.rackform.test
ansible_host_key_checking: false   # a lab site: `lab up` gives its machines new keys
"""

STOCK_CFG = """\
# Ansible's own defaults for the benchmark's comparison run: no ssh_args here, so
# Ansible's default (-C -o ControlMaster=auto -o ControlPersist=60s) applies.
[defaults]
inventory = inventory
collections_path = collections
forks = 5
host_key_checking = False
retry_files_enabled = False
interpreter_python = auto_silent
inject_facts_as_vars = False

[ssh_connection]
pipelining = False
"""


def write_site(root: Path, count: int) -> str:
    """topologies/sites/<site>.yaml and inventories/<site>/ for `count` servers (HCI blocks of 3)."""
    site, net = SIZES[count]
    octet = int(net.split(".")[1])
    names = [f"n-{i}" for i in range(1, count + 1)]
    devices = "\n".join(
        f"      - {{name: hci-{b + 1}, block: hci, position_u: {1 + 2 * b}, "
        f"hosts: [{', '.join(names[b * HOSTS_PER_HCI:(b + 1) * HOSTS_PER_HCI])}]}}"
        for b in range(count // HOSTS_PER_HCI)
    )
    (root / "topologies" / "sites" / f"{site}.yaml").write_text(
        SITE_YAML.format(site=site, count=count, devices=devices, net=net))
    inventory = root / "inventories" / site
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars").mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n" + "".join(f"    {name}:\n" for name in names))
    (inventory / "group_vars" / "all.yml").write_text(GROUP_VARS.format(net=net, site=site))
    for i, name in enumerate(names, start=11):
        (inventory / "host_vars" / f"{name}.yml").write_text(HOST_VARS.format(net=net, n=i, octet=octet, site=site))
    return site


def timed_deploy(site: str, project: Path, key: Path) -> dict:
    shutil.rmtree(project / ".cache", ignore_errors=True)  # no facts from an earlier run
    started = time.monotonic()
    report = deploy(site, project, plan_steps(["os"]), envvars={"ANSIBLE_PRIVATE_KEY_FILE": str(key)})
    wall_s = time.monotonic() - started
    os_run = next(run for run in report.runs if run.step.name == "os")
    return {"wall_s": round(wall_s, 1), "os_s": round(os_run.result.duration_s, 1) if os_run.result else None,
            "changed": report.changed, "ok": report.ok, "failed": sorted(report.failed_hosts)}


def timed_up(site: str, root: Path) -> float:
    started = time.monotonic()
    status = lab.up(site, root, progress=lambda line: None)
    if not status.up:
        raise SystemExit(f"{site}: lab did not come up:\n" + "\n".join(status.lines()))
    return round(time.monotonic() - started, 1)


def bench_site(root: Path, count: int) -> dict:
    site = write_site(root, count)
    loaded, _warnings = load_and_check(site, root)
    project = build_dir(root, site)
    render_project(loaded, project)
    stock = project.with_name(f"{site}-stock")
    shutil.copytree(project, stock)
    (stock / "ansible.cfg").write_text(STOCK_CFG)
    key = lab.state.LABS_DIR / site / "ssh" / "id_ed25519"
    result: dict = {"site": site, "hosts": count, "load_before": os.getloadavg()[0]}
    result["lab_up_s"] = timed_up(site, root)
    result["first"] = timed_deploy(site, project, key)
    print(f"{site}: first {result['first']}", flush=True)
    result["rerun"] = timed_deploy(site, project, key)
    print(f"{site}: re-run {result['rerun']}", flush=True)
    lab.down(site, progress=lambda line: None)
    result["lab_up_again_s"] = timed_up(site, root)
    result["stock"] = timed_deploy(site, stock, key)
    print(f"{site}: stock {result['stock']}", flush=True)
    result["stock_rerun"] = timed_deploy(site, stock, key)
    print(f"{site}: stock re-run {result['stock_rerun']}", flush=True)
    result["load_after"] = os.getloadavg()[0]
    return result


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def print_table(results: dict[int, dict]) -> None:
    print(f"\n{'site':<6} {'hosts':>5} {'lab up':>7} {'first':>7} {'re-run':>7} {'stock':>7} {'stock re':>8} "
          f"{'re-run/first':>12} {'stock/tuned':>11} {'stock re/re':>11}   (wall s; os playbook s in parentheses)")
    for count, r in sorted(results.items()):
        f, rr, st, sr = r["first"], r["rerun"], r["stock"], r["stock_rerun"]
        print(f"{r['site']:<6} {count:>5} {r['lab_up_s']:>7} {f['wall_s']:>7} {rr['wall_s']:>7} {st['wall_s']:>7} "
              f"{sr['wall_s']:>8} {ratio(rr['wall_s'], f['wall_s']):>12} {ratio(st['wall_s'], f['wall_s']):>11} "
              f"{ratio(sr['wall_s'], rr['wall_s']):>11}   ({f['os_s']} / {rr['os_s']} / {st['os_s']} / {sr['os_s']}; "
              f"changed {f['changed']}/{rr['changed']}/{st['changed']}/{sr['changed']})")
    if 3 in results and 12 in results:
        for case in ("first", "rerun", "stock", "stock_rerun"):
            scale = ratio(results[12][case]["wall_s"], results[3][case]["wall_s"])
            print(f"12-host/3-host {case}: {scale} (target <= {SCALE_TARGET} for first)")
        print(f"12-host/3-host lab up: {ratio(results[12]['lab_up_s'], results[3]['lab_up_s'])}")
    for count, r in sorted(results.items()):
        print(f"{r['site']}: re-run/first {ratio(r['rerun']['wall_s'], r['first']['wall_s'])} (target <= {RERUN_TARGET}); "
              f"stock/tuned first {ratio(r['stock']['wall_s'], r['first']['wall_s'])}, "
              f"re-run {ratio(r['stock_rerun']['wall_s'], r['rerun']['wall_s'])} (target >= {TUNED_TARGET})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", choices=sorted(SIZES), default=sorted(SIZES))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    lab.require_root()
    root = Path(tempfile.mkdtemp(prefix="rackform-bench-deploy-"))
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    (root / "topologies" / "sites").mkdir()
    results: dict[int, dict] = {}
    try:
        for count in args.sizes:
            results[count] = bench_site(root, count)
            lab.down(SIZES[count][0], progress=lambda line: None)
    finally:
        for count in args.sizes:
            lab.down(SIZES[count][0], progress=lambda line: None)
        shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
