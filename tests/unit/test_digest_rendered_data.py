"""Stage digests from render's data equal the digests from the files on disk.

`rackform plan` and `deploy` hash a fresh render's inventory files from the data render
wrote them from (rackform.render.rendered_yaml) instead of parsing them back. The digests
recorded in state/<site>.json and by the Pulumi `Playbook` resources must not move because
of that: here every stage's digest and input hashes of a render held in memory are compared
with those of the same project written to disk and read back as plain bytes.
"""

from __future__ import annotations

import datetime
import pickle
import random
import sys
from pathlib import Path

import pytest
import yaml

from rackform.model.source import VaultValue
from rackform.pipeline import STAGE_NAMES, load_and_check, stage_fingerprints
from rackform.render.project import render_files
from rackform.render.rendered_yaml import _NOT_ROUND_TRIPPED, RenderedYaml, rendered_yaml
from rackform.render.writer import existing_files, write_project

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))
GENERATED_NODES = 1000
HOST_VARS = "inventory/host_vars/gpu-1.yml"


def _is_inventory_yaml(path: str) -> bool:
    return path.startswith(("inventory/group_vars/", "inventory/host_vars/")) or path == "inventory/hosts.yml"


def from_disk(files: dict[str, bytes], folder: Path) -> dict[str, bytes]:
    """The project as a later run reads it: written out, read back as plain bytes."""
    write_project(files, folder)
    return {path: file.read_bytes() for path, file in existing_files(folder).items()}


def assert_same_fingerprints(files: dict[str, bytes], folder: Path) -> None:
    carried = [path for path, content in files.items() if isinstance(content, RenderedYaml)]
    assert carried and all(_is_inventory_yaml(path) for path in carried)
    on_disk = from_disk(files, folder)
    assert on_disk == files
    assert not any(isinstance(content, RenderedYaml) for content in on_disk.values())
    in_memory = stage_fingerprints(files)
    assert in_memory == stage_fingerprints(on_disk)
    assert set(in_memory) <= set(STAGE_NAMES) and {"provision", "fabric", "os", "verify"} <= set(in_memory)


@pytest.fixture(scope="module")
def lab_files() -> dict[str, bytes]:
    site, _warnings = load_and_check("lab", REPO)
    return render_files(site)


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
def test_every_stage_of_a_shipped_site_digests_the_same_from_memory_and_disk(site_name, tmp_path):
    site, _warnings = load_and_check(site_name, REPO)
    assert_same_fingerprints(render_files(site), tmp_path / site_name)


def test_every_stage_of_a_generated_large_site_digests_the_same_from_memory_and_disk(tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    from gen_site import SITE_NAME, write_site

    root = write_site(tmp_path / "root", GENERATED_NODES)
    site, _warnings = load_and_check(SITE_NAME, root)
    files = render_files(site)
    assert sum(path.startswith("inventory/host_vars/") for path in files) > GENERATED_NODES
    assert_same_fingerprints(files, tmp_path / SITE_NAME)


def test_a_fresh_render_is_digested_without_parsing_its_inventory_back(lab_files, monkeypatch):
    inventory = {content for path, content in lab_files.items() if _is_inventory_yaml(path)}
    parsed = []
    real_load = yaml.load

    def recording_load(stream, *args, **kwargs):
        parsed.append(stream)
        return real_load(stream, *args, **kwargs)

    monkeypatch.setattr(yaml, "load", recording_load)
    stage_fingerprints(lab_files)
    assert [content for content in parsed if content in inventory] == []
    edited = {path: content + b"# edited\n" if _is_inventory_yaml(path) else content
              for path, content in lab_files.items()}  # as by hand: plain bytes, not seen before
    stage_fingerprints(edited)
    assert {content for content in parsed if isinstance(content, bytes) and content.endswith(b"# edited\n")}


_TRICKY = [
    "", "plain", "yes", "No", "~", "null", "1", "1.0", "1e3", "0x1f", "0o17", "017", "1_000", ".inf", "12:30:00",
    "2001-12-14", "10.20.1.15/24", " leading", "trailing ", "a: b", "a #b", "#c", "- item", "[l]", "{m}", "it's",
    'say "hi"', "back\\slash", "tab\there", "cr\rlf", "two\nlines", "ends\n", "blank\n\nline\n", "  indented\nx",
    "é ü ß", "\U0001F600", "\ufeff", "{{ jinja_name }}", "x" * 170, " ".join(["word"] * 60),
    0, -1, 2**70, 1.5, -0.0, 1e20, 1e-7, float("inf"), float("nan"), True, False, None,
    datetime.date(2026, 11, 26), datetime.datetime(2026, 11, 26, 7, 8, 9, 500),
    datetime.datetime(2026, 11, 26, 7, 8, 9, tzinfo=datetime.timezone.utc),
    VaultValue("$ANSIBLE_VAULT;1.1;AES256\n61626364\n65666768"), VaultValue("$ANSIBLE_VAULT;1.1;AES256 6162"),
    [], {}, {1: "int key", 2: "b"}, {"nested": {"deeper": ["a", 1, None]}},
]
_NOT_LOADED_BACK = ["a\x85b", "del\x7f", "c1\x9b", "line\u2028separator", "two\nlines\x85"]
"""YAML reads NEL and U+2028 as line breaks and refuses DEL and C1 controls."""


def _tricky_value(chooser: random.Random, depth: int = 0):
    kind = chooser.random()
    if depth < 3 and kind < 0.2:
        return [_tricky_value(chooser, depth + 1) for _ in range(chooser.randrange(4))]
    if depth < 3 and kind < 0.4:
        return {f"k{index}": _tricky_value(chooser, depth + 1) for index in range(chooser.randrange(4))}
    return chooser.choice(_TRICKY)


@pytest.mark.parametrize("seed", range(8))
def test_tricky_values_digest_the_same_from_memory_and_disk(lab_files, seed, tmp_path):
    """Whatever a user's inventory puts in a variable (ansible_* keys count for every stage)."""
    chooser = random.Random(seed)
    values = {f"ansible_tricky_{index}": _tricky_value(chooser) for index in range(40)}
    values[f"ansible_tricky_{seed}"] = _TRICKY[seed * 7 % len(_TRICKY)]
    edited = {**lab_files, HOST_VARS: rendered_yaml({**lab_files[HOST_VARS].data, **values}, "# gpu-1\n")}
    assert isinstance(edited[HOST_VARS], RenderedYaml)
    assert stage_fingerprints(edited) == stage_fingerprints(from_disk(edited, tmp_path / "project"))


@pytest.mark.parametrize("value", _NOT_LOADED_BACK)
def test_a_value_yaml_reads_specially_is_written_escaped_and_loads_back_as_written(lab_files, value, tmp_path):
    """NEL, DEL, C1 controls, U+2028: raw, YAML's reader refuses them or reads a line break;
    yamltext writes them as escapes, so the file still carries its data."""
    data = {**lab_files[HOST_VARS].data, "ansible_odd": value}
    content = rendered_yaml(data, "# gpu-1\n")
    assert type(content) is RenderedYaml and not _NOT_ROUND_TRIPPED.search(content)
    assert yaml.safe_load(content)["ansible_odd"] == value
    edited = {**lab_files, HOST_VARS: content}
    assert stage_fingerprints(edited) == stage_fingerprints(from_disk(edited, tmp_path / "project"))


def test_a_rendered_file_is_its_bytes_to_everything_else(lab_files):
    content = lab_files[HOST_VARS]
    assert isinstance(content, RenderedYaml)
    plain = bytes(content)
    assert content == plain and hash(content) == hash(plain) and content.decode() == plain.decode()
    assert type(content + b"x: 1\n") is bytes  # an edit is read from its text
    unpickled = pickle.loads(pickle.dumps(content))
    assert type(unpickled) is bytes and unpickled == plain
