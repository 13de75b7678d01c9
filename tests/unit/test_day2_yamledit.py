"""The round-trip editor changes the lines an edit needs and leaves every other byte."""

from __future__ import annotations

import difflib

import pytest

from rackform.day2.yamledit import YamlFile, insert_after, like_siblings, remove_at, set_key

HAND_EDITED = """\
# A site a person keeps by hand: comments, odd spacing and quoting must survive.
site: hand
racks:
  - name: r1
    height_u: 42      # a short rack
    devices:
      - {name: gpu-1, block: dgx-h100, position_u: 7}   # racked 2024-03
      - {name: gpu-2, block: dgx-h100, position_u: 15}
      # the leaves, top of rack
      - name: leaf-1
        block: sn4700
        position_u: 38
cabling:
  # dual-homed hosts
  - {a: gpu-1:fab0, b: leaf-1:swp5}
  - {a: gpu-2:fab0, b: leaf-1:swp6}   # re-patched after the RMA
  # uplinks
  - {a: leaf-1:swp31, b: spine-1:swp1}
description: 'single quoted, kept'
"""


def changed_lines(before: str, after: str) -> list[str]:
    """The diff's +/- lines, without the headers."""
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_untouched_document_is_byte_for_byte_the_same():
    document = YamlFile.parse(HAND_EDITED)
    assert document.text() == HAND_EDITED
    assert not document.changed()


def test_adding_a_device_and_a_cable_changes_only_those_lines():
    document = YamlFile.parse(HAND_EDITED)
    devices = document.data["racks"][0]["devices"]
    insert_after(devices, 1, like_siblings({"name": "gpu-3", "block": "dgx-h100", "position_u": 23}, devices, 1))
    cables = document.data["cabling"]
    insert_after(cables, 1, like_siblings({"a": "gpu-3:fab0", "b": "leaf-1:swp7"}, cables, 1))
    after = document.text()
    assert changed_lines(HAND_EDITED, after) == [
        "+      - {name: gpu-3, block: dgx-h100, position_u: 23}",
        "+  - {a: gpu-3:fab0, b: leaf-1:swp7}",
    ]
    # The comments that introduce the next group stay above it, the end-of-line ones on their line.
    assert "      - {name: gpu-3, block: dgx-h100, position_u: 23}\n      # the leaves, top of rack\n" in after
    assert ("  - {a: gpu-2:fab0, b: leaf-1:swp6}   # re-patched after the RMA\n"
            "  - {a: gpu-3:fab0, b: leaf-1:swp7}\n  # uplinks\n") in after


def test_removing_an_item_keeps_the_comment_that_introduces_the_next_one():
    document = YamlFile.parse(HAND_EDITED)
    remove_at(document.data["cabling"], 1)
    after = document.text()
    assert changed_lines(HAND_EDITED, after) == ["-  - {a: gpu-2:fab0, b: leaf-1:swp6}   # re-patched after the RMA"]
    assert "  # uplinks\n  - {a: leaf-1:swp31" in after


def test_setting_a_scalar_rewrites_one_line():
    document = YamlFile.parse(HAND_EDITED)
    document.data["racks"][0]["height_u"] = 48
    assert changed_lines(HAND_EDITED, document.text()) == [
        "-    height_u: 42      # a short rack", "+    height_u: 48      # a short rack"]


def test_new_key_goes_where_asked():
    document = YamlFile.parse("a: 1\nb: 2  # two\nc: 3\n")
    set_key(document.data, "serial", "NEW-1", after="a")
    assert document.text() == "a: 1\nserial: NEW-1\nb: 2  # two\nc: 3\n"


def test_a_file_ruamel_cannot_reproduce_is_patched_line_by_line():
    # Two spaces after a colon and a trailing blank-padded flow list: ruamel would normalise both.
    text = "hosts:\n  a:   1\n  b: [x,   y]\nlast: 1\n"
    document = YamlFile.parse(text)
    assert not document.exact
    document.data["last"] = 2
    assert document.text() == "hosts:\n  a:   1\n  b: [x,   y]\nlast: 2\n"


@pytest.mark.parametrize("path", ["topologies/sites/lab.yaml", "topologies/sites/campus.yaml",
                                  "topologies/sites/reference.yaml", "inventories/lab/hosts.yml"])
def test_shipped_files_round_trip_exactly(repo_root, path):
    text = (repo_root / path).read_text()
    assert YamlFile.parse(text).text() == text


def test_diff_is_a_unified_diff_with_git_style_labels(tmp_path):
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  hosts:\n    a:\n    b:\n")
    document = YamlFile.load(path)
    document.data["all"]["hosts"].insert(1, "c", None)
    diff = document.diff("inventories/x/hosts.yml")
    assert diff.startswith("--- a/inventories/x/hosts.yml\n+++ b/inventories/x/hosts.yml\n")
    assert "+    c:\n" in diff
    assert path.read_text() == "all:\n  hosts:\n    a:\n    b:\n"  # diff writes nothing
    assert document.save() and path.read_text() == "all:\n  hosts:\n    a:\n    c:\n    b:\n"
