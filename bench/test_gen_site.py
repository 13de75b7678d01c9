"""The synthetic scale site must be a valid design, or the benchmark measures error paths.

Run: .venv/bin/pytest -q bench/test_gen_site.py   (not under tests/, so `make test` stays fast)
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_site  # noqa: E402

from rackform.checks.runner import run_checks  # noqa: E402
from rackform.model.loader import load_site  # noqa: E402

NODES = 250
"""Enough for every rack kind (HCI, GPU, compute, storage) and a partly filled last block."""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = gen_site.write_site(tmp_path_factory.mktemp("scale"), NODES)
    return load_site(gen_site.SITE_NAME, root)


def test_site_has_exactly_the_requested_nodes(site):
    assert len(site.hosts) == NODES


def test_site_passes_every_preflight_check(site):
    assert [str(finding) for finding in run_checks(site)] == []


def test_site_has_every_rack_kind(site):
    roles = {host.role for host in site.hosts.values()}
    assert roles == {"management_plane", "gpu", "compute", "storage"}


def test_every_host_reaches_two_leaves(site):
    leaves_of: dict[str, set[str]] = defaultdict(set)
    for cable in site.cables:
        if cable.a.device in site.hosts and site.switches[cable.b.device].role == "leaf":
            leaves_of[cable.a.device].add(cable.b.device)
    assert {name for name in site.hosts if len(leaves_of[name]) < 2} == set()


def test_control_plane_spans_three_racks(site):
    racks = {site.hosts[name].device.rack for name in site.kubernetes.control_plane}
    assert len(racks) == 3


def test_too_many_nodes_for_the_fabric_is_refused():
    rack_units = {"hci": 2, "compute": 2, "dgx2": 10, "stor-xl": 4, "sn2700": 1, "oob-switch": 1}
    with pytest.raises(ValueError, match="do not fit"):
        gen_site.plan_site(1_000_000, rack_units)
