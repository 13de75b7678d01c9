# -*- coding: utf-8 -*-
"""Onyx CLI lines: read a running config, name each setting, and compute the commands
that turn one configuration into another. Standard library only.

The one copy: the collection's module `rackform.site.onyx_config` imports it, and
rackform loads this same file (`rackform.fabric.onyx_lines`) instead of keeping a
second one.

A setting's *key* names what a line sets (`1/5 mtu`, `pfc priority 3`), so a line
that replaces a value (`mtu 9000` -> `mtu 9216`) is one command, and a setting that
must go gets its `no` form. Lines this module does not know (users, SNMP, anything
else a real switch runs) have no key: they are never touched.

Both the switch (`show running-config`) and the role's template write each setting
on one line, the way Onyx prints it, so comparing lines compares settings.
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__metaclass__ = type

SAVE_COMMAND = "configuration write"
ERROR_PATTERN = r"^% .*$"
"""How Onyx marks a refused line (`% Unrecognized command`, `% ... out of range`): the
whole line, so the error netmiko raises quotes it."""
_PORT = r"(?P<port>\d+/\d+)"


@dataclass(frozen=True)
class LineRule:
    pattern: re.Pattern
    key: str
    """Format string over the pattern's groups: what the line sets."""
    undo: str | None
    """Format string of the command that returns the setting to its default (None: cannot)."""
    port_setting: bool

    def match(self, line: str):
        return self.pattern.fullmatch(line)


def _rule(pattern: str, key: str, undo: str | None) -> LineRule:
    return LineRule(re.compile(pattern), key, undo, "(?P<port>" in pattern)


# Every line rackform pushes, and the neighbours it must be able to undo.
RULES = (
    _rule(r"hostname (?P<name>\S+)", "hostname", None),
    _rule(r"lldp", "lldp", "no lldp"),
    _rule(r"roce(?: (?P<mode>\S+))?", "roce", "no roce"),
    _rule(r"dcb priority-flow-control enable(?: force)?", "pfc", "no dcb priority-flow-control enable"),
    _rule(r"dcb priority-flow-control priority (?P<priority>\d) enable", "pfc priority {priority}",
          "no dcb priority-flow-control priority {priority} enable"),
    _rule(r"interface ethernet " + _PORT + r" mtu \d+(?: force)?", "{port} mtu", "no interface ethernet {port} mtu"),
    _rule(r"interface ethernet " + _PORT + r" description .+", "{port} description",
          "no interface ethernet {port} description"),
    _rule(r"interface ethernet " + _PORT + r" shutdown", "{port} shutdown", "no interface ethernet {port} shutdown"),
    _rule(r"interface ethernet " + _PORT + r" qos trust \S+", "{port} trust", "no interface ethernet {port} qos trust"),
    _rule(r"interface ethernet " + _PORT + r" dcb priority-flow-control mode .+", "{port} pfc mode",
          "no interface ethernet {port} dcb priority-flow-control mode"),
    _rule(r"interface ethernet " + _PORT + r" traffic-class (?P<tc>\d) congestion-control .+", "{port} ecn tc {tc}",
          "no interface ethernet {port} traffic-class {tc} congestion-control"),
    _rule(r"interface ethernet " + _PORT + r" pfc-wd", "{port} pfc-wd", "no interface ethernet {port} pfc-wd"),
)


@dataclass(frozen=True)
class Setting:
    line: str
    key: str
    port: str | None
    undo: str | None


def setting(line: str) -> Setting | None:
    """What the line sets, or None for a line rackform does not manage."""
    for rule in RULES:
        match = rule.match(line)
        if match:
            groups = match.groupdict()
            undo = rule.undo.format(**groups) if rule.undo else None
            return Setting(line, rule.key.format(**groups), groups.get("port"), undo)
    return None


def config_lines(text: str) -> list[str]:
    """Configuration lines of a rendered config or a running config: comments
    (`#`, `##` section headers), blank lines and the save command left out."""
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and line != SAVE_COMMAND:
            lines.append(line)
    return lines


def managed(lines: Iterable[str]) -> list[str]:
    """The lines rackform knows how to set and undo, in order."""
    return [line for line in lines if setting(line) is not None]


Scope = Callable[[Setting], bool]


def ports_and_globals(desired: Iterable[str]) -> Scope:
    """Forward scope: global settings, and the settings of ports the desired config names.
    Ports outside the cabling plan keep whatever they have."""
    ports = {found.port for found in map(setting, desired) if found is not None and found.port}
    return lambda found: found.port is None or found.port in ports


def everything(found: Setting) -> bool:
    """Rollback scope: every setting rackform could have touched."""
    return True


def commands(desired: list[str], running: list[str], scope: Scope) -> list[str]:
    """Commands that make `running` hold `desired`: `no` forms for settings in scope that
    must go, then the missing lines. A hostname change goes last (it changes the prompt)."""
    present = set(running)
    desired_keys = {found.key for found in map(setting, desired) if found is not None}
    undo = []
    for line in running:
        found = setting(line)
        if found is None or not scope(found) or found.key in desired_keys or found.undo is None:
            continue
        undo.append(found.undo)
    missing = [line for line in dict.fromkeys(desired) if line not in present]
    renames = [line for line in missing if line.startswith("hostname ")]
    return undo + [line for line in missing if line not in renames] + renames


def diff_text(desired: list[str], running: list[str], scope: Scope) -> str:
    """`-` for each line in scope that goes or is replaced, `+` for each line that comes."""
    present, wanted = set(running), set(desired)
    desired_keys = {found.key for found in map(setting, desired) if found is not None}
    gone = [
        "- " + line
        for line in running
        if line not in wanted and (found := setting(line)) is not None and scope(found)
        and (found.key in desired_keys or found.undo is not None)
    ]
    came = ["+ " + line for line in dict.fromkeys(desired) if line not in present]
    return "\n".join(gone + came)


def onyx_default_priority(dscp: int) -> int:
    """Onyx's default DSCP -> switch priority map under `qos trust L3`."""
    return dscp // 8


def dscp_map_refusal(name: str, dscp_to_priority: Mapping) -> str | None:
    """Why the design cannot be pushed as lines, or None. Onyx classifies by DSCP / 8 once a
    port trusts L3, and the role pushes no other map: a design with another map is refused."""
    wrong = {
        int(dscp): int(priority)
        for dscp, priority in dict(dscp_to_priority or {}).items()
        if onyx_default_priority(int(dscp)) != int(priority)
    }
    if not wrong:
        return None
    detail = ", ".join("DSCP %d -> %d (Onyx's default gives %d)" % (dscp, priority, onyx_default_priority(dscp))
                       for dscp, priority in sorted(wrong.items()))
    return (name + ": the design maps " + detail + "; rackform relies on Onyx's default DSCP map (DSCP / 8) "
            "and pushes no other: use the default map for Onyx switches")
