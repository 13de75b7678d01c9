"""The fast YAML writer: whatever it writes loads back as the same data."""

from __future__ import annotations

import pytest
import yaml

from rackform.render import yamltext

TRICKY_STRINGS = [
    "",
    "plain",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "N",
    "null",
    "Null",
    "~",
    "true",
    "False",
    "1",
    "1.0",
    "1e3",
    "0x1f",
    "0o17",
    "017",
    "1_000",
    ".inf",
    "-.inf",
    ".NaN",
    "12:30:00",
    "2001-12-14",
    "02:0a:0a:00:00:0f",
    "10.10.0.15",
    "10.20.1.15/24",
    "Eth1/1",
    "1.31.4",
    " leading space",
    "trailing space ",
    "a: b",
    "a #b",
    "#comment",
    "- item",
    "[list]",
    "{map}",
    "it's",
    'say "hi"',
    "back\\slash",
    "tab\tinside",
    "ünïcode",
    "@at",
    "*star",
    "&anchor",
    "!tag",
    "%percent",
    "`tick",
    "|pipe",
    ">folded",
    "?question",
    "a,b",
    "=",
    "<<",
    "-",
    "---",
    "...",
]
MULTILINE_STRINGS = [
    "one\ntwo\n",
    "one\ntwo",
    "one\n\ntwo\n",
    "ends blank\n\n",
    "\nstarts with newline",
    " indented first\nline\n",
    "trailing \nspace\n",
    "#not a comment\n- not a list\n",
]


@pytest.mark.parametrize("text", TRICKY_STRINGS + MULTILINE_STRINGS)
def test_strings_load_back_unchanged(text):
    assert yaml.safe_load(yamltext.dump({"key": text, "list": [text]})) == {"key": text, "list": [text]}


@pytest.mark.parametrize("text", TRICKY_STRINGS)
def test_strings_load_back_unchanged_as_keys(text):
    assert yaml.safe_load(yamltext.dump({text: 1})) == {text: 1}


@pytest.mark.parametrize(
    "data",
    [
        {"int": 3, "negative": -1, "true": True, "false": False, "none": None},
        {26: 3, 48: 6},
        {"empty_dict": {}, "empty_list": [], "flat": [1, "a", True, None]},
        {"nested": {"deeper": {"deepest": "x"}}},
        {"dicts": [{"a": 1, "b": {"c": 2}}, {}, {"d": [1, 2]}]},
        {"lists": [[1, 2], [{"a": 1}], []]},
        [{"name": "first"}, "second", 3],
    ],
    ids=["scalars", "int-keys", "empties", "nested", "list-of-dicts", "list-of-lists", "top-level-list"],
)
def test_structures_load_back_unchanged(data):
    assert yaml.safe_load(yamltext.dump(data)) == data


def test_multiline_text_is_written_as_a_literal_block():
    assert yamltext.dump({"hosts": "a b\nc d\n"}) == "---\nhosts: |\n  a b\n  c d\n"


def test_header_comes_before_the_document_start():
    assert yamltext.dump({"a": 1}, header="# note\n") == "# note\n---\na: 1\n"


def test_unsupported_values_are_refused():
    with pytest.raises(TypeError, match="set"):
        yamltext.dump({"tags": {"a", "b"}})
