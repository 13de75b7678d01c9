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


LONG_STRINGS = [
    " ".join(["word"] * 60),
    " ".join(["{{ $labels.gpu }} (UUID {{ $labels.UUID }}): `nvidia-smi -q` | grep -i xid; a: b #c - d"] * 4),
    " ".join(['"quoted" and back\\slash and it\'s'] * 10),
    " ".join(["#starts like a comment"] * 10),
    " ".join(["- starts like a list item"] * 10),
    " ".join(["---"] * 60),
    " ".join(["ünïcode"] * 40),
    "x" * 200 + " " + "y" * 10,
    "short " + "z" * 300,
    "double  spaces  are  never  a  break " * 8,
    "no-spaces-at-all-" * 20,
    " leading space" * 20,
    "trailing space " * 20,
    "tab\tinside " * 30,
    "non\u00a0breaking " * 30,
]


@pytest.mark.parametrize("text", LONG_STRINGS)
@pytest.mark.parametrize("wrap", [lambda t: {"key": t}, lambda t: {"a": {"b": [{"c": t}]}}, lambda t: [[t]],
                                  lambda t: {"k" * 158: t}])
def test_long_strings_load_back_unchanged(text, wrap):
    assert yaml.safe_load(yamltext.dump(wrap(text))) == wrap(text)


FOLDABLE = [s for s in LONG_STRINGS if s == s.strip(" ") and s.isprintable() and " " in s and "  " not in s]


@pytest.mark.parametrize("text", FOLDABLE)
def test_a_long_line_is_folded_to_what_ansible_lint_allows(text):
    written = yamltext.dump({"spec": {"rules": [{"annotations": {"description": text}}]}})
    longest = max(len(word) for word in text.split(" ")) + len("          ")
    assert max(len(line) for line in written.splitlines()) <= max(yamltext.MAX_LINE, longest)
    assert ">-" in written


def test_a_long_line_is_broken_at_its_spaces():
    assert yamltext.dump({"k": "a" * 100 + " " + "b" * 100}) == "---\nk: >-\n  " + "a" * 100 + "\n  " + "b" * 100 + "\n"


def test_a_line_that_fits_is_written_as_it_was():
    text = "word " * 30 + "end"
    assert yamltext.dump({"key": text}) == f'---\nkey: "{text}"\n'


def test_header_comes_before_the_document_start():
    assert yamltext.dump({"a": 1}, header="# note\n") == "# note\n---\na: 1\n"


def test_unsupported_values_are_refused():
    with pytest.raises(TypeError, match="set"):
        yamltext.dump({"tags": {"a", "b"}})


@pytest.mark.parametrize("value", ["a\x85b", "x\u2028y", "p\u2029q", "del\x7f", "c1\x9b", "bom\ufeff",
                                   "two\nlines\x85\n", "é and ü stay as they are"])
def test_characters_yaml_reads_specially_are_escaped_and_load_back(value):
    """Raw, YAML's reader refuses DEL, C1 controls and U+FEFF, and reads NEL, U+2028 and U+2029 as
    line breaks: an inventory value holding one must still reach Ansible as written."""
    text = yamltext.dump({"key": value, value: [value]})
    assert yaml.safe_load(text) == {"key": value, value: [value]}
    assert not any(ch in text for ch in "\x85\u2028\u2029\x7f\x9b\ufeff")
