"""The building-block catalog: every block file is valid, sourced and self-consistent.

Each file is validated twice, by the pydantic model and by the published JSON Schema
(`topologies/blocks/schema.json`, what editors and other tools use), so neither can
drift from the other unnoticed.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from rackform.model.loader import load_catalog
from rackform.model.schema import BlockType
from rackform.model.site import SWITCH_PORT_PATTERNS

REPO = Path(__file__).resolve().parents[2]
BLOCKS_DIR = REPO / "topologies" / "blocks"
SCHEMA_PATH = BLOCKS_DIR / "schema.json"
BLOCK_FILES = sorted(BLOCKS_DIR.glob("*.yaml"))

SEED_BLOCKS = {"hci", "compute", "flash-hybrid", "stor-xl", "vgpu", "dgx1", "dgx2"}
"""Every building block of seed 000, Fig 9."""
CURRENT_DGX = "dgx-h100"
NETWORK_BLOCKS = {"sn2700", "mgmt-switch", "oob-switch"}

FIGURE_FIELDS = ("rack_units", "nodes", "power", "node", "switch", "storage")
"""Top-level fields holding figures that need a source (name, vendor ... are labels)."""


def _raw(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _block(path: Path) -> BlockType:
    return BlockType.model_validate(_raw(path))


def _leaf_paths(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the values a file states (lists count as one value)."""
    paths = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        paths.extend(_leaf_paths(value, f"{path}.") if isinstance(value, dict) else [path])
    return paths


def _resolve(block: BaseModel, dotted: str) -> Any:
    """The value a dotted field path names on the model, or None if there is no such field."""
    value: Any = block
    for part in dotted.split("."):
        if not isinstance(value, BaseModel) or part not in type(value).model_fields:
            return None
        value = getattr(value, part)
    return value


def _port_names(block: BlockType) -> list[str]:
    if block.node is not None:
        return [
            group.pattern.replace("{n}", str(n))
            for group in block.node.ports
            for n in range(group.first, group.first + group.count)
        ]
    assert block.switch is not None
    return [
        SWITCH_PORT_PATTERNS[os_name].format(n=n)
        for os_name in block.switch.os[:1]
        for n in range(1, block.switch.ports + 1)
    ]


@pytest.fixture(scope="module")
def json_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@pytest.fixture(scope="module")
def catalog() -> dict[str, BlockType]:
    return load_catalog(BLOCKS_DIR)


block_files = pytest.mark.parametrize("path", BLOCK_FILES, ids=lambda p: p.stem)


# ---------------------------------------------------------------- two validators


@block_files
def test_block_validates_against_the_model(path: Path):
    assert isinstance(_block(path), BlockType)


@block_files
def test_block_validates_against_the_json_schema(path: Path, json_schema: dict[str, Any]):
    jsonschema.Draft202012Validator(json_schema).validate(_raw(path))


def test_json_schema_refuses_an_unknown_key(json_schema: dict[str, Any]):
    data = _raw(BLOCKS_DIR / "dgx2.yaml")
    data["rack_unit"] = 10
    with pytest.raises(jsonschema.ValidationError, match="rack_unit"):
        jsonschema.Draft202012Validator(json_schema).validate(data)


def test_json_schema_is_up_to_date_with_the_model():
    expected = json.dumps(BlockType.model_json_schema(), indent=2, sort_keys=True) + "\n"
    assert SCHEMA_PATH.read_text() == expected, "regenerate topologies/blocks/schema.json from BlockType"


# ---------------------------------------------------------------- per-block rules


@block_files
def test_name_is_the_file_stem(path: Path):
    assert _block(path).name == path.stem


@block_files
def test_sources_name_fields_the_block_sets(path: Path):
    block = _block(path)
    assert block.sources
    unknown = [key for key in block.sources if _resolve(block, key) is None]
    assert unknown == [], f"sources keys that are not set fields of {path.name}"


@block_files
def test_every_figure_has_a_source(path: Path):
    raw, block = _raw(path), _block(path)
    figures = [p for p in _leaf_paths({k: raw[k] for k in FIGURE_FIELDS if k in raw}) if p != "nodes" or block.nodes > 1]
    unsourced = [p for p in figures if not any(p == key or p.startswith(f"{key}.") for key in block.sources)]
    assert unsourced == []


@block_files
def test_switch_blocks_have_switch_figures_and_others_node_figures(path: Path):
    block = _block(path)
    if block.category == "switch":
        assert (block.switch is not None, block.node) == (True, None)
    else:
        assert (block.node is not None, block.switch) == (True, None)


@block_files
def test_no_block_defines_a_port_name_twice(path: Path):
    repeated = [name for name, count in Counter(_port_names(_block(path))).items() if count > 1]
    assert repeated == []


@block_files
def test_typical_power_does_not_exceed_nameplate(path: Path):
    power = _block(path).power
    assert power.typical_w <= power.max_w


# ---------------------------------------------------------------- the catalog as a whole


def test_catalog_loads_every_block_file(catalog: dict[str, BlockType]):
    assert sorted(catalog) == sorted(path.stem for path in BLOCK_FILES)


def test_catalog_holds_seed_blocks_a_current_dgx_and_network_blocks(catalog: dict[str, BlockType]):
    wanted = SEED_BLOCKS | {CURRENT_DGX} | NETWORK_BLOCKS
    assert wanted - set(catalog) == set()


def test_dgx2_is_10u_with_the_seeds_measured_power(catalog: dict[str, BlockType]):
    dgx2 = catalog["dgx2"]
    assert (dgx2.rack_units, dgx2.power.typical_w, dgx2.power.max_w) == (10, 7800, 10000)


def test_dgx2_carries_16_gpus_and_12_nvswitches(catalog: dict[str, BlockType]):
    gpus = catalog["dgx2"].node.gpus
    assert (gpus.count, gpus.memory_gb, gpus.nvswitches) == (16, 32, 12)


def test_oob_switch_can_stay_unmanaged(catalog: dict[str, BlockType]):
    assert "unmanaged" in catalog["oob-switch"].switch.os
