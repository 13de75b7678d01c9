"""Bandwidth checks: storage can feed the GPU nodes."""

from __future__ import annotations

from rackform.checks.bandwidth import cabled_fabric_gbps, storage_bandwidth

STOR_XL_FABRIC = "{role: fabric, pattern: \"fab{n}\", count: 2, speed_gbps: 100}"


def test_fabric_bandwidth_per_role_counts_links_at_their_trained_speed(lab_site):
    # GPU nodes: 4 links of 400G host ports on 400G leaf ports
    assert cabled_fabric_gbps(lab_site) == {"management_plane": 150, "storage": 200, "gpu": 1600}


def test_lab_storage_bandwidth_is_a_visible_warning(lab_site):
    # one Stor XL (2x 100G) against two DGX H100 (2x 400G each, as cabled): 12 %
    [finding] = storage_bandwidth(lab_site)
    assert finding.severity == "warning" and "200 Gb/s" in finding.message and "12%" in finding.message


def test_enough_storage_bandwidth_is_quiet(lab_files):
    lab_files.edit("topologies/blocks/stor-xl.yaml", STOR_XL_FABRIC, STOR_XL_FABRIC.replace("100", "400"))
    assert list(storage_bandwidth(lab_files.load())) == []


def test_storage_under_a_quarter_of_gpu_bandwidth_warns(lab_files):
    lab_files.edit("topologies/blocks/stor-xl.yaml", STOR_XL_FABRIC, STOR_XL_FABRIC.replace("100", "10"))
    site = lab_files.load()

    [finding] = storage_bandwidth(site)

    assert (finding.severity, finding.loc) == ("warning", site.fabric_loc)
    assert "storage fabric bandwidth is 20 Gb/s (1 storage host(s)) against 1,600 Gb/s for 2 GPU node(s): 1%" in finding.message


def test_uncabled_storage_warns(lab_files):
    lab_files.edit_site("  - {a: stor-1:fab0, b: leaf-1:swp4}\n  - {a: stor-1:fab1, b: leaf-2:swp4}\n", "")

    [finding] = storage_bandwidth(lab_files.load())

    assert "is 0 Gb/s" in finding.message


def test_site_without_gpu_links_is_not_checked(lab_files):
    text = lab_files.read("topologies/sites/lab.yaml")
    lab_files.write("topologies/sites/lab.yaml", "\n".join(line for line in text.splitlines() if "{a: gpu-" not in line))

    assert list(storage_bandwidth(lab_files.load())) == []
