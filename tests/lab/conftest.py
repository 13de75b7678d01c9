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

from sitebuilder import build_site, group_vars, networks, two_hosts_on_a_leaf

SITE = "labtest"
NEEDED_TOOLS = ("systemd-nspawn", "debootstrap", "ip", "ssh", "ssh-keygen", "setsid", "nsenter")
GROUPING_DISTS = ("loadfile", "loadscope")  # both keep a module on one worker

SITE_YAML = two_hosts_on_a_leaf(SITE, "Lifecycle tests - two HCI hosts on one Cumulus leaf",
                                networks("10.99.0.0/24", "10.99.1.0/24", "10.98.0.0/16"))

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
    host_vars = {f"node-{n}": HOST_VARS.format(n=10 + n) for n in (1, 2)} | {"leaf-1": LEAF_VARS}
    return build_site(tmp_path_factory.mktemp("labtest-root"), SITE, SITE_YAML, host_vars,
                      group_vars(SITE, "10.99.0.1"))
