"""Preflight: a design rackform cannot push to an Onyx switch is refused at validate, with
the reason: an AS number (rackform renders no Onyx BGP) and a DSCP map other than Onyx's
default (the onyx_switch role writes none)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rackform.checks.switch_os import onyx_dscp_map_is_default, onyx_runs_no_bgp
from rackform.model.loader import load_site

REPO = Path(__file__).resolve().parents[2]


def reference(tmp_path: Path, *edits: tuple[str, str]):
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    path = tmp_path / "topologies" / "sites" / "reference.yaml"
    text = path.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path.write_text(text)
    return load_site("reference", tmp_path)


def test_the_shipped_reference_site_passes(tmp_path):
    site = reference(tmp_path)
    assert list(onyx_runs_no_bgp(site)) == [] and list(onyx_dscp_map_is_default(site)) == []


def test_onyx_leaves_with_as_numbers_are_refused(tmp_path):
    site = reference(tmp_path, ("switch: {role: leaf, os: onyx}", "switch: {role: leaf, os: onyx, asn: 65101}"),
                     ("switch: {role: leaf, os: onyx}", "switch: {role: leaf, os: onyx, asn: 65102}"))
    findings = list(onyx_runs_no_bgp(site))
    assert [(f.key, f.loc.line, f.severity) for f in findings] == [
        ("racks[r1].devices[leaf-1].switch.asn", 26, "error"), ("racks[r1].devices[leaf-2].switch.asn", 31, "error")]
    assert "renders no BGP for Onyx" in findings[0].message and "AS 65101" in findings[0].message


@pytest.mark.parametrize("override", ["", "        roce_overrides: {dscp_to_priority: {26: 3, 34: 3, 48: 6}}\n"])
def test_a_dscp_map_onyx_does_not_run_is_refused(tmp_path, override):
    edits = [("switch: {role: leaf, os: onyx}\n", "switch: {role: leaf, os: onyx}\n" + override)] if override else []
    if not override:
        edits.append(("extends: [roce, kubernetes]\n",
                      "extends: [roce, kubernetes]\nfabric:\n  switch:\n    dscp_to_priority: {26: 3, 34: 3, 48: 6}\n"))
    (finding,) = onyx_dscp_map_is_default(reference(tmp_path, *edits))
    assert "DSCP 34 -> 3 (Onyx's default gives 4)" in finding.message
    assert finding.key == ("racks[r1].devices[leaf-1].roce_overrides.dscp_to_priority" if override
                           else "fabric.switch.dscp_to_priority")
