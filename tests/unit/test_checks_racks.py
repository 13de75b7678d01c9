"""Rack checks: power against budget, devices inside the rack, one device per U."""

from __future__ import annotations

import pytest

from rackform.checks.racks import rack_height, rack_power, rack_units_free


@pytest.mark.parametrize("rack_check", [rack_power, rack_height, rack_units_free])
def test_lab_racks_have_no_errors(lab_site, rack_check):
    assert [f for f in rack_check(lab_site) if f.severity == "error"] == []


def test_rack_over_budget_is_an_error_at_the_budget_line(lab_files):
    lab_files.edit_site("power_budget_w: 35000", "power_budget_w: 20000")
    site = lab_files.load()

    [finding] = rack_power(site)

    assert (finding.severity, finding.key) == ("error", "racks[r1].power_budget_w")
    assert finding.loc == site.racks[0].budget_loc
    assert "26,700 W" in finding.message and "20,000 W" in finding.message
    assert "move 6,700 W" in finding.message


def test_rack_above_80_percent_of_budget_warns(lab_files):
    # the lab draws 26,700 W: 83 % of 32,000 W
    lab_files.edit_site("power_budget_w: 35000", "power_budget_w: 32000")
    [finding] = rack_power(lab_files.load())

    assert finding.severity == "warning"
    assert "83%" in finding.message


def test_rack_with_headroom_is_quiet(lab_files):
    lab_files.edit_site("power_budget_w: 35000", "power_budget_w: 40000")

    assert list(rack_power(lab_files.load())) == []


def test_rack_power_uses_the_sites_power_basis(lab_files):
    # typical draw is 19,865 W: 66 % of the budget
    lab_files.edit_site("power_basis: max", "power_basis: typical")

    assert list(rack_power(lab_files.load())) == []


def test_device_above_the_rack_top_is_an_error(lab_files):
    lab_files.edit_site("height_u: 42", "height_u: 40")
    site = lab_files.load()

    [finding] = rack_height(site)

    assert finding.key == "racks[r1].devices[oob-1].position_u"
    assert finding.loc.line == site.switches["oob-1"].loc.line
    assert "occupies U41, above the top of the 40U rack r1" in finding.message and "start it at U40 or lower" in finding.message


def test_device_below_u1_is_an_error(lab_site):
    # the schema refuses position_u 0; the check still guards models built in code
    lab_site.racks[0].devices[0].position_u = 0

    [finding] = rack_height(lab_site)

    assert finding.key == "racks[r1].devices[hci-1].position_u"
    assert "lowest position is U1" in finding.message


def test_overlapping_devices_are_both_named(lab_files):
    lab_files.edit_site("{name: gpu-2, block: dgx-h100, position_u: 15}", "{name: gpu-2, block: dgx-h100, position_u: 14}")
    site = lab_files.load()

    [finding] = rack_units_free(site)

    assert finding.key == "racks[r1].devices[gpu-2].position_u"
    assert finding.loc == site.hosts["gpu-2"].loc
    assert "gpu-2 (U14-U21) overlaps gpu-1 (U7-U14" in finding.message
    assert f"line {site.hosts['gpu-1'].loc.line}" in finding.message
    assert "at U14 " in finding.message


def test_device_overlapping_two_devices_reports_each(lab_files):
    lab_files.edit_site("{name: gpu-2, block: dgx-h100, position_u: 15}", "{name: gpu-2, block: dgx-h100, position_u: 3}")

    findings = list(rack_units_free(lab_files.load()))

    assert ["stor-1" in f.message for f in findings] == [True, False]
    assert "overlaps gpu-1" in findings[1].message
