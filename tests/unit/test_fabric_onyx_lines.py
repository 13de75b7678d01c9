"""Onyx CLI lines: which setting a line names, and the commands between two configurations
(forward: the design over what runs; rollback: back to what ran)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.fabric import onyx_lines
from rackform.fabric.onyx_lines import commands, config_lines, diff_text, everything, ports_and_globals, setting

DESIRED = [
    "hostname leaf-2",
    "lldp",
    "dcb priority-flow-control enable force",
    "dcb priority-flow-control priority 3 enable",
    "interface ethernet 1/5 description gpu-1:fab1",
    "interface ethernet 1/5 mtu 9216 force",
    "interface ethernet 1/5 qos trust L3",
    "interface ethernet 1/5 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "interface ethernet 1/5 pfc-wd",
]


@pytest.mark.parametrize(
    "line, key, undo",
    [
        ("hostname leaf-2", "hostname", None),
        ("lldp", "lldp", "no lldp"),
        ("roce lossless", "roce", "no roce"),
        ("dcb priority-flow-control enable force", "pfc", "no dcb priority-flow-control enable"),
        ("dcb priority-flow-control priority 4 enable", "pfc priority 4",
         "no dcb priority-flow-control priority 4 enable"),
        ("interface ethernet 1/5 mtu 9216 force", "1/5 mtu", "no interface ethernet 1/5 mtu"),
        ('interface ethernet 1/5 description "spare port"', "1/5 description",
         "no interface ethernet 1/5 description"),
        ("interface ethernet 1/5 qos trust L3", "1/5 trust", "no interface ethernet 1/5 qos trust"),
        ("interface ethernet 1/5 dcb priority-flow-control mode on force", "1/5 pfc mode",
         "no interface ethernet 1/5 dcb priority-flow-control mode"),
        ("interface ethernet 1/5 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
         "1/5 ecn tc 3", "no interface ethernet 1/5 traffic-class 3 congestion-control"),
        ("interface ethernet 1/5 pfc-wd", "1/5 pfc-wd", "no interface ethernet 1/5 pfc-wd"),
    ],
)
def test_setting_names_the_line_and_its_undo(line, key, undo):
    found = setting(line)
    assert (found.key, found.undo) == (key, undo)


@pytest.mark.parametrize("line", ["username admin password 7 xyz", "snmp-server community public", "ntp enable"])
def test_lines_rackform_does_not_manage_have_no_setting(line):
    assert setting(line) is None


def test_config_lines_drop_comments_blank_lines_and_the_save_command():
    text = "## header\n##\n   lldp\n\n# note\nconfiguration write\n   hostname sw\n"
    assert config_lines(text) == ["lldp", "hostname sw"]


def test_same_configuration_needs_no_command():
    assert commands(DESIRED, list(reversed(DESIRED)), ports_and_globals(DESIRED)) == []


def test_empty_switch_gets_every_line_with_the_hostname_last():
    pushed = commands(DESIRED, ["hostname switch"], ports_and_globals(DESIRED))
    assert pushed == DESIRED[1:] + ["hostname leaf-2"]


def test_changed_value_is_one_line_not_an_undo():
    running = [line.replace("mtu 9216", "mtu 9000") for line in DESIRED]
    assert commands(DESIRED, running, ports_and_globals(DESIRED)) == ["interface ethernet 1/5 mtu 9216 force"]


def test_extra_lossless_priority_is_undone():
    running = [*DESIRED, "dcb priority-flow-control priority 4 enable"]
    assert commands(DESIRED, running, ports_and_globals(DESIRED)) == ["no dcb priority-flow-control priority 4 enable"]


def test_roce_profile_gives_way_to_the_explicit_form():
    assert commands(DESIRED, [*DESIRED, "roce lossless"], ports_and_globals(DESIRED)) == ["no roce"]


def test_ports_outside_the_design_keep_their_settings():
    running = [*DESIRED, "interface ethernet 1/9 pfc-wd"]
    assert commands(DESIRED, running, ports_and_globals(DESIRED)) == []


def test_rollback_undoes_everything_a_partial_push_added():
    previous = ["hostname leaf-2", "interface ethernet 1/9 pfc-wd"]
    half_applied = [*previous, "lldp", "interface ethernet 1/5 mtu 9216 force"]
    assert commands(previous, half_applied, everything) == ["no lldp", "no interface ethernet 1/5 mtu"]


def test_rollback_puts_back_a_replaced_value():
    previous = ["interface ethernet 1/5 mtu 9000 force"]
    assert commands(previous, ["interface ethernet 1/5 mtu 9216 force"], everything) == previous


def test_diff_text_shows_replaced_and_new_lines():
    running = [line.replace("mtu 9216", "mtu 9000") for line in DESIRED if "pfc-wd" not in line]
    assert diff_text(DESIRED, running, ports_and_globals(DESIRED)).splitlines() == [
        "- interface ethernet 1/5 mtu 9000 force",
        "+ interface ethernet 1/5 mtu 9216 force",
        "+ interface ethernet 1/5 pfc-wd",
    ]


def test_managed_keeps_only_known_lines_in_order():
    assert onyx_lines.managed(["ntp enable", "lldp", "snmp-server enable", "hostname a"]) == ["lldp", "hostname a"]


# ---------------------------------------------------------------- one copy, shared with the role's module


def test_rackform_loads_the_collections_copy():
    shipped = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "rackform_onyx_lines.py"
    assert Path(onyx_lines._shared.__file__).resolve() == shipped


def test_no_second_copy_of_the_line_rules_in_rackform():
    rackform = Path(__file__).resolve().parents[2] / "rackform"
    copies = [path for path in rackform.rglob("*.py") if "no interface ethernet {port} pfc-wd" in path.read_text()]
    assert copies == []


def test_default_dscp_map_is_accepted():
    assert onyx_lines.dscp_map_refusal("leaf-1", {26: 3, 48: 6}) is None


def test_other_dscp_map_is_refused_naming_the_switch_and_each_wrong_entry():
    refusal = onyx_lines.dscp_map_refusal("leaf-1", {"26": 4, 48: 6, 10: 2})
    assert refusal.startswith("leaf-1: the design maps DSCP 10 -> 2 (Onyx's default gives 1), "
                              "DSCP 26 -> 4 (Onyx's default gives 3); ")
