"""Rack elevation SVGs: valid XML, one box per device over the right U, honest footer figures."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rackform.model.loader import load_site
from rackform.model.site import Rack, Site
from rackform.render.diagram import rack_svg, site_svgs

REPO_ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def lab_site_pristine() -> Site:
    return load_site("lab", REPO_ROOT)


@pytest.fixture
def lab_site() -> Site:
    """A fresh lab site per test, so tests may move devices and change budgets."""
    return load_site("lab", REPO_ROOT)


def lab_rack(site: Site) -> Rack:
    return site.racks[0]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.encode("utf-8"))


def device_groups(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-device"): g for g in root.iter(f"{SVG}g") if g.get("class") == "device"}


def by_class(root: ET.Element, css_class: str) -> list[ET.Element]:
    return [el for el in root.iter() if el.get("class") == css_class]


def test_site_svgs_names_one_file_per_rack(lab_site_pristine):
    assert list(site_svgs(lab_site_pristine)) == [f"{rack.name}.svg" for rack in lab_site_pristine.racks]


def test_svg_is_well_formed_xml_with_svg_root(lab_site_pristine):
    root = parse(rack_svg(lab_site_pristine, lab_rack(lab_site_pristine)))
    assert root.tag == f"{SVG}svg"


def test_one_group_per_device(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    groups = device_groups(parse(rack_svg(lab_site_pristine, rack)))
    assert sorted(groups) == sorted(device.name for device in rack.devices)


@pytest.mark.parametrize("device_name", ["hci-1", "stor-1", "gpu-1", "gpu-2", "leaf-1", "spine-1", "oob-1"])
def test_device_group_spans_its_u_range(lab_site_pristine, device_name):
    rack = lab_rack(lab_site_pristine)
    device = next(d for d in rack.devices if d.name == device_name)
    group = device_groups(parse(rack_svg(lab_site_pristine, rack)))[device_name]
    assert (int(group.get("data-u-start")), int(group.get("data-u-end"))) == (device.position_u, device.top_u)


def test_device_group_carries_block_category(lab_site_pristine):
    group = device_groups(parse(rack_svg(lab_site_pristine, lab_rack(lab_site_pristine))))["gpu-1"]
    assert group.get("data-category") == "gpu"


def test_multi_node_device_label_lists_its_hosts(lab_site_pristine):
    group = device_groups(parse(rack_svg(lab_site_pristine, lab_rack(lab_site_pristine))))["hci-1"]
    labels = [el.text for el in group.iter() if el.get("class") == "device-label"]
    assert labels == ["hci-1 · mgmt-1, mgmt-2, mgmt-3"]


def test_device_shows_block_display_name(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    gpu = next(d for d in rack.devices if d.name == "gpu-1")
    group = device_groups(parse(rack_svg(lab_site_pristine, rack)))["gpu-1"]
    assert [el.text for el in group.iter() if el.get("class") == "device-block"] == [gpu.block.display_name]


def test_u_labels_run_from_1_to_rack_height(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    root = parse(rack_svg(lab_site_pristine, rack))
    left = [int(el.text) for el in by_class(root, "u-label") if el.get("data-side") == "left"]
    assert sorted(left) == list(range(1, rack.height_u + 1))


def test_u1_is_drawn_at_the_bottom(lab_site_pristine):
    root = parse(rack_svg(lab_site_pristine, lab_rack(lab_site_pristine)))
    y_by_u = {int(el.text): float(el.get("y")) for el in by_class(root, "u-label") if el.get("data-side") == "left"}
    assert y_by_u[1] > y_by_u[2] > y_by_u[42]


def test_empty_slots_are_the_unoccupied_units(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    occupied = {u for d in rack.devices for u in range(d.position_u, d.top_u + 1)}
    root = parse(rack_svg(lab_site_pristine, rack))
    empty = {int(el.get("data-u")) for el in by_class(root, "slot-empty")}
    assert empty == set(range(1, rack.height_u + 1)) - occupied


def test_footer_power_shows_computed_figure(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    used_w = sum(device.power_w(lab_site_pristine.power_basis) for device in rack.devices)
    (power,) = by_class(parse(rack_svg(lab_site_pristine, rack)), "power")
    percent = 100 * used_w / rack.power_budget_w
    expected = f"Power {used_w / 1000:.1f} kW of {rack.power_budget_w / 1000:.1f} kW ({percent:.1f} %, max basis)"
    assert (power.text, int(power.get("data-power-w"))) == (expected, used_w)


def test_footer_power_follows_the_site_power_basis(lab_site):
    lab_site.power_basis = "typical"
    rack = lab_rack(lab_site)
    used_w = sum(device.power_w("typical") for device in rack.devices)
    (power,) = by_class(parse(rack_svg(lab_site, rack)), "power")
    assert (int(power.get("data-power-w")), power.text.endswith("typical basis)")) == (used_w, True)


@pytest.mark.parametrize(
    ("budget_w", "level"),
    [(100_000, "ok"), (30_000, "amber"), (20_000, "red")],
    ids=["under-80-percent", "above-80-percent", "above-100-percent"],
)
def test_footer_power_colour_level(lab_site, budget_w, level):
    rack = lab_rack(lab_site)
    rack.power_budget_w = budget_w
    (power,) = by_class(parse(rack_svg(lab_site, rack)), "power")
    assert power.get("data-level") == level


def test_footer_shows_u_used_of_height(lab_site_pristine):
    rack = lab_rack(lab_site_pristine)
    used_u = sum(device.block.rack_units for device in rack.devices)
    (space,) = by_class(parse(rack_svg(lab_site_pristine, rack)), "space")
    assert space.text.startswith(f"Space {used_u}U of {rack.height_u}U used")


def test_legend_names_every_category(lab_site_pristine):
    root = parse(rack_svg(lab_site_pristine, lab_rack(lab_site_pristine)))
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "legend")
    assert [el.get("data-category") for el in legend if el.get("data-category")] == [
        "gpu", "hci", "compute", "storage", "switch",
    ]


def test_odd_names_are_escaped(lab_site):
    rack = lab_rack(lab_site)
    odd = 'a<b>&"c\'\x01'
    rack.name = odd
    rack.devices[0].name = odd
    rack.devices[0].block = rack.devices[0].block.model_copy(update={"display_name": "<HCI & co>"})
    root = parse(rack_svg(lab_site, rack))
    assert (root.get("data-rack"), odd.replace("\x01", "\ufffd") in device_groups(root)) == (
        odd.replace("\x01", "\ufffd"), True,
    )


def test_overlapping_devices_are_named_in_the_footer(lab_site):
    rack = lab_rack(lab_site)
    stor = next(d for d in rack.devices if d.name == "stor-1")
    stor.position_u = 2  # hci-1 holds U1-U2
    problems = [el.text for el in by_class(parse(rack_svg(lab_site, rack)), "placement-problem")]
    assert problems == ["overlap at U2"]


def test_device_above_the_rack_is_named_in_the_footer(lab_site):
    rack = lab_rack(lab_site)
    gpu = next(d for d in rack.devices if d.name == "gpu-2")
    gpu.position_u = 42
    problems = [el.text for el in by_class(parse(rack_svg(lab_site, rack)), "placement-problem")]
    assert "gpu-2 outside U1-U42" in problems


def test_output_is_deterministic():
    first = site_svgs(load_site("lab", REPO_ROOT))
    second = site_svgs(load_site("lab", REPO_ROOT))
    assert first == second


@pytest.mark.skipif(
    not (REPO_ROOT / "topologies" / "sites" / "reference.yaml").exists(), reason="reference site not present yet"
)
def test_reference_dgx_rack_shows_40u_used():
    site = load_site("reference", REPO_ROOT)
    fullest = max(site.racks, key=lambda rack: sum(d.block.rack_units for d in rack.devices))
    (space,) = by_class(parse(rack_svg(site, fullest)), "space")
    assert int(space.get("data-used-u")) == 40


def test_default_host_names_are_shortened_to_their_suffix(lab_site):
    hci = lab_rack(lab_site).devices[0]
    hci.host_names = [f"{hci.name}-n{i}" for i in range(1, 5)]
    group = device_groups(parse(rack_svg(lab_site, lab_rack(lab_site))))[hci.name]
    labels = [el.text for el in group.iter() if el.get("class") == "device-label"]
    assert labels == [f"{hci.name} · n1, n2, n3, n4"]


@pytest.mark.parametrize("site_name", sorted(p.stem for p in (REPO_ROOT / "topologies" / "sites").glob("*.yaml")))
def test_every_shipped_site_draws_one_parseable_svg_per_rack(site_name):
    site = load_site(site_name, REPO_ROOT)
    svgs = site_svgs(site)
    assert [parse(text).get("data-rack") for text in svgs.values()] == [rack.name for rack in site.racks]
