"""The loader: one typed model from catalog + site + inventory, with file:line on every error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rackform.model.loader import load_site
from rackform.model.source import BadInput, load_yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def errors_of(root: Path, site: str = "lab") -> list[str]:
    with pytest.raises(BadInput) as caught:
        load_site(site, root)
    return [str(error) for error in caught.value.errors]


def test_lab_site_resolves_hosts_switches_and_cables():
    site = load_site("lab", REPO)
    assert sorted(site.hosts) == ["gpu-1", "gpu-2", "mgmt-1", "mgmt-2", "mgmt-3", "stor-1"]
    assert {name: s.role for name, s in site.switches.items()}["spine-1"] == "spine"
    assert site.hosts["mgmt-2"].role == "management_plane"
    assert site.hosts["gpu-1"].role == "gpu"
    assert str(site.hosts["gpu-1"].bmc_address) == "10.10.1.15"
    assert "swp32" in site.switches["leaf-1"].ports and "swp33" not in site.switches["leaf-1"].ports


def test_multi_node_block_names_hosts_and_scales_power():
    site = load_site("lab", REPO)
    hci = next(d for d in site.devices() if d.name == "hci-1")
    assert hci.host_names == ["mgmt-1", "mgmt-2", "mgmt-3"]
    # three of four nodes populated: three quarters of the chassis nameplate
    assert hci.power_w("max") == round(hci.block.power.max_w * 3 / 4)


def test_unknown_key_names_line_and_suggests(root: Path):
    edit(root / "topologies/sites/lab.yaml", "    height_u: 42", "    hieght_u: 42")
    (error,) = errors_of(root)
    assert error.startswith("topologies/sites/lab.yaml:10: racks[r1].hieght_u: unknown key (did you mean 'height_u'?)")


def test_wrong_type_names_the_value(root: Path):
    edit(root / "topologies/sites/lab.yaml", "position_u: 3,", "position_u: three,")
    (error,) = errors_of(root)
    assert "topologies/sites/lab.yaml:14: racks[r1].devices[stor-1].position_u:" in error
    assert "'three'" in error


def test_yaml_syntax_error_has_a_line(root: Path):
    edit(root / "inventories/lab/host_vars/gpu-1.yml", "serial: LAB-GPU-1", "serial: [LAB-GPU-1")
    (error,) = errors_of(root)
    assert error.startswith("inventories/lab/host_vars/gpu-1.yml:")
    assert "YAML syntax error" in error


def test_duplicate_yaml_key_is_refused(root: Path):
    edit(root / "inventories/lab/host_vars/gpu-1.yml", "serial: LAB-GPU-1", "serial: LAB-GPU-1\nserial: LAB-GPU-9")
    (error,) = errors_of(root)
    assert "serial: duplicate key (first given on line" in error


def test_unknown_block_suggests_the_closest(root: Path):
    edit(root / "topologies/sites/lab.yaml", "block: dgx-h100, position_u: 7", "block: dgx-h10, position_u: 7")
    (error,) = errors_of(root)
    assert "unknown block type 'dgx-h10' (did you mean 'dgx-h100'?)" in error


def test_host_missing_from_inventory(root: Path):
    (root / "inventories/lab/host_vars/stor-1.yml").unlink()
    edit(root / "inventories/lab/hosts.yml", "    stor-1:\n", "")
    (error,) = errors_of(root)
    assert "stor-1: placed in the site design but missing from inventories/lab/hosts.yml" in error


def test_every_error_of_a_file_is_reported(root: Path):
    edit(root / "topologies/sites/lab.yaml", "    height_u: 42", "    height_u: tall")
    edit(root / "topologies/sites/lab.yaml", "power_basis: max", "power_basis: peak")
    assert len(errors_of(root)) == 2


def test_unknown_site_lists_known_sites(root: Path):
    (error,) = errors_of(root, "nosuch")
    assert "no such site 'nosuch'; known sites:" in error and "lab" in error


def test_line_dicts_record_key_lines(tmp_path: Path):
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\nb:\n  - {c: 2}\n  - d\n")
    data = load_yaml(path, shown_as="x.yaml")
    assert data.key_loc("b").line == 2
    assert data["b"].item_loc(1).line == 4
    assert data["b"][0].key_loc("c").line == 3
