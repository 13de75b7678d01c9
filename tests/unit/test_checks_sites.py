"""Every check together: the shipped sites pass, and every finding names its check."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.checks.registry import REGISTRY
from rackform.checks.runner import run_checks
from rackform.model.loader import load_site

REPO_ROOT = Path(__file__).resolve().parents[2]

SHIPPED_SITES = sorted(path.stem for path in (REPO_ROOT / "topologies" / "sites").glob("*.yaml"))


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
def test_shipped_site_passes_every_check(site_name):
    errors = [str(f) for f in run_checks(load_site(site_name, REPO_ROOT)) if f.severity == "error"]

    assert errors == []


def test_check_names_are_unique():
    run_checks(load_site("lab", REPO_ROOT))  # imports every check module
    names = [fn.__name__ for fn in REGISTRY]

    assert len(names) == len(set(names))


def test_each_finding_names_the_check_that_made_it(lab_files):
    # several mistakes at once, one per check family
    lab_files.edit_site("power_budget_w: 35000", "power_budget_w: 20000")
    lab_files.edit_site("{a: gpu-2:fab0, b: leaf-1:swp6}", "{a: gpu-2:fab0, b: leaf-1:swp5}")
    lab_files.edit("topologies/profiles/roce.yaml", "    mtu: 9216", "    mtu: 9000")
    lab_files.edit_site("control_plane: [mgmt-1, mgmt-2, mgmt-3]", "control_plane: [mgmt-1, gpu-1]")
    lab_files.edit_host_vars("gpu-2", "management_address: 10.10.0.16", "management_address: 10.10.0.15")
    names = {fn.__name__ for fn in REGISTRY}

    findings = run_checks(lab_files.load())

    assert {f.check for f in findings} <= names
    assert {"rack_power", "ports_cabled_once", "roce_mtu", "control_plane_count", "unique_addresses"} <= {f.check for f in findings}
