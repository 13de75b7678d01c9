"""Labs shared between lab test modules.

- `labtest`: a small site for the lifecycle tests, two HCI hosts on one Cumulus leaf. Its
  own name and addresses (10.99.x) keep it apart from the shipped `lab` site.
- `shipped_lab`: the shipped `lab` site itself (a real Kubernetes cluster once deployed),
  brought up once per session from freshly imaged nodes: test_deploy_lab deploys it and
  leaves it converged, test_storage_lab reads its data sets, test_kubernetes_lab works on the
  cluster that deploy made, test_hardening_lab checks its control plane's hardening,
  test_platform_lab its tenants, queues, maintenance and upgrade, test_certificates_lab renews
  kubeadm's certificates, and test_etcd_recovery_lab, last (it destroys etcd's data), restores
  etcd from a snapshot. Its site mirror's bundle is built first (from the cache when nothing
  changed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import clusterlab
from rackform.lab import lab, state
from labenv import skip_reason
from sitebuilder import build_site, group_vars, networks, two_hosts_on_a_leaf

SITE = "labtest"

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


# Modules that share the shipped lab run one after the other, in this order, so the cluster
# is not left idling (and taking CPU) while unrelated lab tests run.
# test_pulumi_lab deploys it (`pulumi up -s lab`); the others work on what it deployed.
SHIPPED_LAB_MODULES = ("test_pulumi_lab.py", "test_deploy_lab.py", "test_storage_lab.py", "test_kubernetes_lab.py",
                       "test_hardening_lab.py", "test_platform_lab.py", "test_certificates_lab.py",
                       "test_etcd_recovery_lab.py")


def pytest_collection_modifyitems(config, items):
    """Tests that bring up `labtest` need root and the lab's tools; skip them, saying why, otherwise.
    The shipped lab's modules are moved next to each other (test_pulumi_lab first)."""
    reason = skip_reason(config)
    for item in items:
        if reason and "labtest_root" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=reason))
    first = next((n for n, item in enumerate(items) if item.path.name in SHIPPED_LAB_MODULES), None)
    if first is not None:
        shipped = [item for item in items if item.path.name in SHIPPED_LAB_MODULES]
        shipped.sort(key=lambda item: SHIPPED_LAB_MODULES.index(item.path.name))  # stable: order within a module kept
        others = [item for item in items if item.path.name not in SHIPPED_LAB_MODULES]
        items[:] = others[:first] + shipped + others[first:]


@pytest.fixture(scope="session")
def labtest_root(tmp_path_factory) -> Path:
    """A repo root holding the real catalog and the `labtest` site with its inventory."""
    host_vars = {f"node-{n}": HOST_VARS.format(n=10 + n) for n in (1, 2)} | {"leaf-1": LEAF_VARS}
    return build_site(tmp_path_factory.mktemp("labtest-root"), SITE, SITE_YAML, host_vars,
                      group_vars(SITE, "10.99.0.1"))


REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_LAB = "lab"


@pytest.fixture(scope="session")
def shipped_lab():
    """The shipped `lab` site up from freshly imaged nodes, its mirror bundle built; down at the end
    of the session, or earlier by `shipped_lab_done` (the last module that uses it)."""
    from rackform import cli

    reason = skip_reason(single_worker="the shared `lab` site")
    if reason:
        pytest.skip(reason)
    assert cli.main(["mirror", "build", SHIPPED_LAB, "--root", str(REPO_ROOT)]) == 0, "the site mirror's bundle"
    quiet = lambda line: None  # noqa: E731
    if reusing_a_running_lab():
        yield state.load(SHIPPED_LAB)
        return
    lab.down(SHIPPED_LAB, progress=quiet)  # freshly imaged nodes: the first deploy really is the first
    clusterlab.SHIPPED_LAB_IMAGED_AT = time.time()
    status = lab.up(SHIPPED_LAB, REPO_ROOT, progress=quiet)
    assert status.up, "\n".join(status.lines())
    yield state.load(SHIPPED_LAB)
    lab.down(SHIPPED_LAB, progress=quiet)


def reusing_a_running_lab() -> bool:
    """`RACKFORM_LAB_REUSE=1`: a developer's shortcut for running one shipped-lab module again on
    the lab already up (and deployed): it is neither re-imaged nor taken down. CI never sets it."""
    return os.environ.get("RACKFORM_LAB_REUSE") == "1" and lab.status(SHIPPED_LAB).up


@pytest.fixture(scope="module")
def shipped_lab_done(shipped_lab):
    """Take the shipped lab down when the module using this (the last of SHIPPED_LAB_MODULES) ends."""
    yield shipped_lab
    if not reusing_a_running_lab():
        lab.down(SHIPPED_LAB, progress=lambda line: None)
