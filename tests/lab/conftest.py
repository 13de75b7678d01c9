"""A small lab site for the lifecycle tests: two HCI hosts on one Cumulus leaf.

Its own name (`labtest`) and addresses (10.99.x) keep it apart from the shipped `lab`
site, so the tests never touch a lab a person has up. It uses the repo's real catalog.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "labtest"
NEEDED_TOOLS = ("systemd-nspawn", "debootstrap", "ip", "ssh", "ssh-keygen", "setsid", "nsenter")
GROUPING_DISTS = ("loadfile", "loadscope")  # both keep a module on one worker

SITE_YAML = """\
site: labtest
description: Lifecycle tests - two HCI hosts on one Cumulus leaf
power_basis: max
racks:
  - name: r1
    height_u: 42
    power_budget_w: 30000
    devices:
      - {name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2]}
      - name: leaf-1
        block: sn2700
        position_u: 40
        switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}
networks:
  - {name: mgmt, purpose: management, prefix: 10.99.0.0/24, gateway: 10.99.0.1}
  - {name: oob, purpose: oob, prefix: 10.99.1.0/24}
  - {name: compute, purpose: compute_fabric, prefix: 10.98.0.0/16}
fabric:
  no_single_point_of_failure: false
  roce: {priority: 3, dscp: 26, cnp_priority: 6, cnp_dscp: 48}
  switch:
    trust: dscp
    pfc_priorities: [3]
    dscp_to_priority: {26: 3, 48: 6}
    ecn: {enabled: true, min_kb: 150, max_kb: 1500}
    pfc_watchdog: true
    mtu: 9216
  host: {trust: dscp, pfc_priorities: [3], roce_tos: 106, ecn: true, mtu: 9000}
cabling:
  - {a: node-1:fab0, b: leaf-1:swp1}
  - {a: node-2:fab0, b: leaf-1:swp2}
"""

HOST_VARS = """\
management_address: 10.99.0.{n}
management_mac: "02:63:00:00:00:{n:02x}"
bmc_address: 10.99.1.{n}
bmc_mac: "02:63:01:00:00:{n:02x}"
serial: LABTEST-{n}
fabric_ports:
  fab0: {{mac: "02:62:01:00:00:{n:02x}", address: 10.98.1.{n}/24}}
"""

LEAF_VARS = """\
management_address: 10.99.0.201
management_mac: "02:63:00:00:00:c9"
serial: LABTEST-LEAF-1
"""

GROUP_VARS = """\
ansible_user: root
ntp_servers: [10.99.0.1]
dns_servers: [10.99.0.1]
timezone: Etc/UTC
domain: labtest.rackform.test
"""


def _skip_reason(config) -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    missing = [tool for tool in NEEDED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt: systemd-container debootstrap)"
    # Under xdist the module's one lab must stay on one worker, else two workers race on it.
    if os.environ.get("PYTEST_XDIST_WORKER") and _xdist_mode(config) not in GROUPING_DISTS:
        return "under xdist the lab tests need --dist loadfile (or run: pytest -m lab tests/lab)"
    return None


def _xdist_mode(config) -> str:
    """The controller's --dist (workers see only `no` in their own options)."""
    argv = [*getattr(config, "workerinput", {}).get("mainargv", []), *config.getini("addopts"),
            *os.environ.get("PYTEST_ADDOPTS", "").split()]
    modes = re.findall(r"--dist[= ](\w+)", " ".join(argv))
    return modes[-1] if modes else "load"


def pytest_collection_modifyitems(config, items):
    """Tests that bring up `labtest` need root and the lab's tools; skip them, saying why, otherwise."""
    reason = _skip_reason(config)
    for item in items:
        if reason and "labtest_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def labtest_root(tmp_path_factory) -> Path:
    """A repo root holding the real catalog and the `labtest` site with its inventory."""
    root = tmp_path_factory.mktemp("labtest-root")
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    (root / "topologies" / "sites").mkdir()
    (root / "topologies" / "sites" / f"{SITE}.yaml").write_text(SITE_YAML)
    inventory = root / "inventories" / SITE
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars").mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    node-1:\n    node-2:\n    leaf-1:\n")
    (inventory / "group_vars" / "all.yml").write_text(GROUP_VARS)
    for n in (1, 2):
        (inventory / "host_vars" / f"node-{n}.yml").write_text(HOST_VARS.format(n=10 + n))
    (inventory / "host_vars" / "leaf-1.yml").write_text(LEAF_VARS)
    return root
