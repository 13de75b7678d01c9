"""Day 2 against the real lab: `node add`, `node replace`, `node remove` on a site of its own.

Site `daytwo` (10.77.x, 10.76.x: apart from the shipped `lab` and every other lab test):
two HCI hosts and a Cumulus leaf, plus `stor-1`, a vScaler Stor XL whose container and
ipmi_sim BMC (10.77.1.23) are brought up with the rest but which is then powered off
through its BMC and taken out of the design and inventory: a server racked and cabled
that nobody has told rackform about. The site file carries a person's comments; the test
checks byte for byte that `node add` changes only the lines it must.

Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_day2_lab.py -s
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from labenv import skip_reason
from sitebuilder import IPMI_SIM_EXCEPTION, ROCE_FABRIC, build_site, group_vars, networks

from rackform import cli
from rackform.day2 import wire
from rackform.ipmi import credentials
from rackform.ipmi.fleet import BmcTarget, Fleet
from rackform.lab import lab

pytestmark = pytest.mark.lab

SITE = "daytwo"
NEW_BMC = "10.77.1.23"

HEAD = f"""\
# daytwo: a site kept by hand. These comments, this spacing and the order below are mine.
site: {SITE}
description: Day-2 lab - two HCI hosts on one Cumulus leaf, room for more
power_basis: max
lab_only: true   # a lab's machines get new SSH host keys at every start
racks:
  - name: r1
    height_u: 42
    power_budget_w: 30000   # the PDU pair's rating, not a guess
    devices:
      - {{name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2]}}
"""
EXTRA_DEVICE = "      - {name: stor-1, block: stor-xl, position_u: 3}\n"
LEAF = """\
      # top of rack
      - name: leaf-1
        block: sn2700
        position_u: 40
        switch: {role: leaf, os: cumulus, fabric: compute}   # one leaf: no BGP to run
"""
CABLES = """\
cabling:
  # servers, port 0 to leaf-1
  - {a: node-1:fab0, b: leaf-1:swp1}
  - {a: node-2:fab0, b: leaf-1:swp2}
"""
EXTRA_CABLE = "  - {a: stor-1:fab0, b: leaf-1:swp3}\n"
NETWORKS = networks("10.77.0.0/24", "10.77.1.0/24", "10.76.0.0/16")


def design(extra: bool) -> str:
    return (HEAD + (EXTRA_DEVICE if extra else "") + LEAF + NETWORKS + ROCE_FABRIC + CABLES
            + (EXTRA_CABLE if extra else "") + IPMI_SIM_EXCEPTION)


def host_vars(n: int, serial: str) -> str:
    return (f"management_address: 10.77.0.{n}\n"
            f'management_mac: "02:4d:00:00:00:{n:02x}"\n'
            f"bmc_address: 10.77.1.{n}\n"
            f'bmc_mac: "02:4d:01:00:00:{n:02x}"\n'
            f"serial: {serial}\n"
            "fabric_ports:\n"
            f"  fab0: {{address: 10.76.1.{n}/24}}\n")


LEAF_VARS = 'management_address: 10.77.0.201\nmanagement_mac: "02:4d:00:00:00:c9"\nserial: DAYTWO-LEAF-1\n'
HOSTS_YML = "# daytwo's hosts; groups come from the design\nall:\n  hosts:\n    node-1:\n    node-2:\n    leaf-1:\n"

# `rackform lab up` gives every machine a new SSH host key: lab sites turn Ansible's checking off.


def quiet(_line: str) -> None:
    pass


def rackform(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(argv))
    print(f"\n$ rackform {' '.join(argv)}  -> exit {code} in {time.monotonic() - started:.1f} s\n{out.getvalue()}")
    return code, out.getvalue()


def factory_fleet() -> Fleet:
    return Fleet(credentials.factory_credentials())


@pytest.fixture(scope="module")
def daytwo(tmp_path_factory):
    reason = skip_reason(single_worker=f"the `{SITE}` lab site")
    if reason:
        pytest.skip(reason)
    root = build_site(tmp_path_factory.mktemp("daytwo-root"), SITE, design(extra=True),
                      {"node-1": host_vars(11, "DAYTWO-11"), "node-2": host_vars(12, "DAYTWO-12"),
                       "stor-1": host_vars(23, "DAYTWO-NEW-23"), "leaf-1": LEAF_VARS},
                      group_vars(SITE, "10.77.0.1"))  # host key checking off, as every lab site
    lab.down(SITE, progress=quiet)
    try:
        status = lab.up(SITE, root, progress=quiet)
        assert status.up, "\n".join(status.lines())
        # stor-1 is racked and cabled, its BMC answers, but it is off and rackform has never heard of it.
        assert wire.power(factory_fleet(), [BmcTarget("stor-1", NEW_BMC)], "off")[0].ok
        (root / "topologies/sites" / f"{SITE}.yaml").write_text(design(extra=False))
        (root / "inventories" / SITE / "hosts.yml").write_text(HOSTS_YML)
        (root / "inventories" / SITE / "host_vars" / "stor-1.yml").unlink()
        code, out = rackform("deploy", SITE, "--root", str(root))
        assert code == 0, out
        yield root
    finally:
        lab.down(SITE, progress=quiet)
        from rackform.lab import state
        shutil.rmtree(state.LABS_DIR / SITE, ignore_errors=True)


@pytest.fixture(scope="module")
def added(daytwo):
    before = (daytwo / "topologies/sites" / f"{SITE}.yaml").read_text()
    code, out = rackform("node", "add", SITE, "--root", str(daytwo), "--oob", "10.77.1.0/24")
    return code, out, before


def test_node_add_finds_cables_writes_deploys_and_verifies(added, daytwo):
    code, out, before = added
    assert code == 0, out
    assert "3 BMC(s) answered in 10.77.1.0/24: 2 known, 1 new" in out
    assert "heard on LLDP as stor-1: fab0->leaf-1:swp3" in out
    after = (daytwo / "topologies/sites" / f"{SITE}.yaml").read_text()
    # Byte for byte: the person's file, plus exactly the device and its cable.
    assert after == design(extra=True)
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["+" + EXTRA_DEVICE.rstrip("\n"), "+" + EXTRA_CABLE.rstrip("\n")]
    hosts = (daytwo / "inventories" / SITE / "hosts.yml").read_text()
    assert hosts == HOSTS_YML.replace("    node-2:\n", "    node-2:\n    stor-1:\n")
    new_vars = (daytwo / "inventories" / SITE / "host_vars" / "stor-1.yml").read_text()
    assert "management_address: 10.77.0.23\n" in new_vars and "bmc_address: 10.77.1.23\n" in new_vars
    assert 'management_mac: "02:4d:00:00:00:17"\n' in new_vars
    assert "serial: DAYTWO-NEW-23\n" in new_vars and "  fab0: {address: 10.76.1.23/24}\n" in new_vars
    assert "all checks passed" in out


def test_second_deploy_changes_nothing(added, daytwo):
    assert added[0] == 0
    code, out = rackform("deploy", SITE, "--root", str(daytwo))
    assert code == 0, out
    assert "no changes" in out.splitlines()[-1], out


def test_node_replace_records_the_swapped_serial(added, daytwo):
    assert added[0] == 0
    from rackform.lab import bmc, state
    from rackform.model.loader import load_site

    # Swap the board: stor-1's ipmi_sim dies and comes back serving a FRU with another serial
    # (its users and LAN settings, kept in its state folder, stay as provisioning left them).
    site = load_site(SITE, daytwo)
    site.hosts["stor-1"].serial = "DAYTWO-SWAPPED-1"
    info = next(item for item in bmc.recorded_bmcs(state.LABS_DIR, SITE) if item.host == "stor-1")
    os.kill(info.pid, signal.SIGKILL)
    while Path(f"/proc/{info.pid}").exists() and Path(f"/proc/{info.pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.05)
    bmc.start_bmcs(site, state.LABS_DIR)  # the others run as they are; stor-1's starts again
    code, out = rackform("bmc", "status", SITE, "--root", str(daytwo))
    assert code == 1 and "stor-1" in out and "DAYTWO-SWAPPED-1" in out, out
    code, out = rackform("node", "replace", SITE, "stor-1", "--root", str(daytwo))
    assert code == 0, out
    assert "serial: DAYTWO-SWAPPED-1\n" in (daytwo / "inventories" / SITE / "host_vars" / "stor-1.yml").read_text()


def test_maintain_power_cycles_two_at_a_time_with_verify_between(added, daytwo):
    assert added[0] == 0
    code, out = rackform("maintain", SITE, "--root", str(daytwo), "--batch", "2", "--power-cycle")
    assert code == 0, out
    assert "3 host(s) in 2 batch(es) of at most 2: BMC power cycle" in out
    assert "batch 1/2: node-1, node-2: ok" in out and "batch 2/2: stor-1: ok" in out
    assert out.count("power cycled through its BMC") == 3
    assert "all checks passed" in out


def test_console_says_plainly_that_the_lab_bmcs_serve_no_sol(daytwo):
    code, out = rackform("console", SITE, "node-1", "--root", str(daytwo))
    assert code == 1, out
    assert "the BMC at 10.77.1.11 does not serve serial-over-LAN (Error requesting SOL parameter" in out


def test_node_remove_powers_off_and_leaves_a_valid_site(added, daytwo):
    assert added[0] == 0
    code, out = rackform("node", "remove", SITE, "stor-1", "--root", str(daytwo))
    assert code == 0, out
    assert "no cluster" in out and "powered off through its BMC 10.77.1.23" in out
    assert (daytwo / "topologies/sites" / f"{SITE}.yaml").read_text() == design(extra=False)
    assert (daytwo / "inventories" / SITE / "hosts.yml").read_text() == HOSTS_YML
    code, out = rackform("validate", SITE, "--root", str(daytwo))
    assert code == 0, out


def test_maintain_stops_at_a_batch_whose_host_stays_off(added, daytwo, tmp_path):
    """Last: node-2 is kept off (its BMC told so by the site's hook) and the line stops there."""
    assert added[0] == 0
    hook = tmp_path / "keep-node-2-off.sh"
    hook.write_text(f"#!/bin/sh\n[ \"$RACKFORM_HOST\" = node-2 ] || exit 0\n"
                    f"exec {sys.executable} -m rackform.cli bmc power {SITE} off --nodes node-2 --root {daytwo}\n")
    hook.chmod(0o755)
    code, out = rackform("maintain", SITE, "--root", str(daytwo), "--batch", "2", "--hook", str(hook),
                         "--up-timeout", "20")
    assert code == 1, out
    assert "node-2: does not answer SSH at 10.77.0.12 after 20 s" in out
    assert "batch 1 failed on node-2; stopped (done: none; not started:" in out
