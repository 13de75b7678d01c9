"""The line-tracking YAML loader's shortcuts give what PyYAML's general path gives.

`rackform.model.source` takes a string scalar's text straight from its node, and resolves a
scalar's tag against the resolvers for its first character only. Both are there for speed
(bench/bench_scale.py); these tests hold them to PyYAML's own answers and keep them taken.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rackform.model import source
from rackform.model.source import LineDict, LineList, SourceError, VaultValue, load_yaml

MIXED = """\
plain: text
quoted: "10.0.0.1"
single: 'yes'
empty:
blank: ""
tilde: ~
int: 42
hex: 0x1f
octal: 0o17
sexagesimal: 1:30
float: 1.5
inf: .inf
bool: true
switch: off
date: 2026-11-26
address: 10.0.0.1/24
mac: 02:0a:0a:00:00:0f
tagged_str: !!str 123
tagged_int: !!int "7"
binary: !!binary aGVsbG8=
anchor: &shared {a: 1, b: "two"}
alias: *shared
merged:
  <<: *shared
  c: three
list: [x, 1, "2", null, [y, z], {k: v}]
block: |
  two
  lines
1: numeric key
null: null key
"""

VAULT = """\
secret: !vault |
  $ANSIBLE_VAULT;1.1;AES256
  6162
plain: text
"""


def _plain(value):
    """LineDict/LineList as plain dict/list, with every scalar's type kept."""
    if isinstance(value, dict):
        return {(type(k), k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return (type(value), value)


def test_loaded_data_equals_pyyaml_safe_load(tmp_path: Path):
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    loaded = load_yaml(path, shown_as="mixed.yaml")
    assert _plain(loaded) == _plain(yaml.load(MIXED, Loader=source._BaseLoader))
    assert isinstance(loaded, LineDict) and isinstance(loaded["list"], LineList)
    assert loaded.key_loc("quoted").line == 2 and loaded.key_loc(None).line == 31 and loaded.key_loc(1).line == 30
    assert loaded["list"].lines == [26, 26, 26, 26, 26, 26]
    assert loaded["merged"] == {"a": 1, "b": "two", "c": "three"} and loaded["alias"] == {"a": 1, "b": "two"}


def test_vault_values_and_plain_strings_side_by_side(tmp_path: Path):
    path = tmp_path / "vars.yml"
    path.write_text(VAULT)
    loaded = load_yaml(path, shown_as="vars.yml", vault=True)
    assert type(loaded["secret"]) is VaultValue and loaded["secret"].startswith("$ANSIBLE_VAULT;")
    assert type(loaded["plain"]) is str


@pytest.mark.parametrize("text, line, message", [
    ("a: 1\nb: 2\na: 3\n", 3, "a: duplicate key (first given on line 1)"),
    ("'a': 1\n\"a\": 2\n", 2, "a: duplicate key (first given on line 1)"),
    ("? [x]\n: 1\n", 1, "a mapping key must be a plain scalar"),
])
def test_key_errors_name_the_same_line(tmp_path: Path, text: str, line: int, message: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SourceError) as caught:
        load_yaml(path, shown_as="bad.yaml")
    assert caught.value.loc.line == line
    assert str(caught.value) == f"bad.yaml:{line}: {message}"


SCALARS = ["", "x", "yes", "Yes", "no", "on", "OFF", "true", "null", "Null", "~", "0", "-1", "+7", "0x1f",
           "0o17", "1_000", "1:30", "1.5", ".5", "-.inf", ".NaN", "1e3", "2026-11-26", "2026-11-26T10:00:00Z",
           "10.0.0.1", "10.0.0.1/24", "02:0a:0a:00:00:0f", "=", "<<", "management_address", "eth0", "fabric_ports"]


@pytest.mark.parametrize("implicit", [(True, False), (False, True), (False, False)])
def test_scalar_tags_are_pyyaml_tags(implicit):
    loader = source._LineLoader("")
    try:
        for value in SCALARS:
            expected = yaml.resolver.BaseResolver.resolve(loader, yaml.ScalarNode, value, implicit)
            assert loader.resolve(yaml.ScalarNode, value, implicit) == expected, value
        for kind in (yaml.SequenceNode, yaml.MappingNode):
            assert loader.resolve(kind, None, (True, False)) == yaml.resolver.BaseResolver.resolve(loader, kind, None, (True, False))
    finally:
        loader.dispose()


def test_string_scalars_skip_pyyaml_construct_object(tmp_path: Path, monkeypatch):
    """Only collections and non-string scalars go through PyYAML's construct_object: calling
    it for each of a host file's many strings was most of the constructor's cost."""
    path = tmp_path / "host.yml"
    path.write_text("management_address: 10.0.0.5\nserial: abc\nfabric_ports:\n"
                    "  eth0: {address: 10.1.0.5/31, mac: '02:00:00:00:00:01'}\n  eth1: {address: 10.1.0.7/31}\n"
                    "names: [a, b, c]\ncount: 3\n")
    calls = []
    original = source._LineLoader.construct_object

    def counted(self, node, deep=False):
        calls.append(node.tag)
        return original(self, node, deep)

    monkeypatch.setattr(source._LineLoader, "construct_object", counted)
    loaded = load_yaml(path, shown_as="host.yml")
    assert loaded["fabric_ports"]["eth0"]["mac"] == "02:00:00:00:00:01" and loaded["count"] == 3
    assert sorted(calls) == sorted(["tag:yaml.org,2002:map"] * 4 + ["tag:yaml.org,2002:seq", "tag:yaml.org,2002:int"])
