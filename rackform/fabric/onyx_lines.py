"""Onyx CLI lines: read a running config, name each setting, and compute the commands
that turn one configuration into another.

A setting's *key* names what a line sets (`1/5 mtu`, `pfc priority 3`), so a line
that replaces a value (`mtu 9000` -> `mtu 9216`) is one command, and a setting that
must go gets its `no` form. Lines this module does not know (users, SNMP, anything
else a real switch runs) have no key: they are never touched.

Both the switch (`show running-config`) and rackform's template write each setting
on one line, the way Onyx prints it, so comparing lines compares settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

SAVE_COMMAND = "configuration write"
_PORT = r"(?P<port>\d+/\d+)"


@dataclass(frozen=True, slots=True)
class LineRule:
    pattern: re.Pattern[str]
    key: str
    """Format string over the pattern's groups: what the line sets."""
    undo: str | None
    """Format string of the command that returns the setting to its default (None: cannot)."""
    port_setting: bool

    def match(self, line: str) -> re.Match[str] | None:
        return self.pattern.fullmatch(line)


def _rule(pattern: str, key: str, undo: str | None) -> LineRule:
    return LineRule(re.compile(pattern), key, undo, "(?P<port>" in pattern)


# Every line rackform pushes, and the neighbours it must be able to undo.
RULES: tuple[LineRule, ...] = (
    _rule(r"hostname (?P<name>\S+)", "hostname", None),
    _rule(r"lldp", "lldp", "no lldp"),
    _rule(r"roce(?: (?P<mode>\S+))?", "roce", "no roce"),
    _rule(r"dcb priority-flow-control enable(?: force)?", "pfc", "no dcb priority-flow-control enable"),
    _rule(r"dcb priority-flow-control priority (?P<priority>\d) enable", "pfc priority {priority}",
          "no dcb priority-flow-control priority {priority} enable"),
    _rule(rf"interface ethernet {_PORT} mtu \d+(?: force)?", "{port} mtu", "no interface ethernet {port} mtu"),
    _rule(rf"interface ethernet {_PORT} description .+", "{port} description",
          "no interface ethernet {port} description"),
    _rule(rf"interface ethernet {_PORT} shutdown", "{port} shutdown", "no interface ethernet {port} shutdown"),
    _rule(rf"interface ethernet {_PORT} qos trust \S+", "{port} trust", "no interface ethernet {port} qos trust"),
    _rule(rf"interface ethernet {_PORT} dcb priority-flow-control mode .+", "{port} pfc mode",
          "no interface ethernet {port} dcb priority-flow-control mode"),
    _rule(rf"interface ethernet {_PORT} traffic-class (?P<tc>\d) congestion-control .+", "{port} ecn tc {tc}",
          "no interface ethernet {port} traffic-class {tc} congestion-control"),
    _rule(rf"interface ethernet {_PORT} pfc-wd", "{port} pfc-wd", "no interface ethernet {port} pfc-wd"),
)


@dataclass(frozen=True, slots=True)
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
        f"- {line}"
        for line in running
        if line not in wanted and (found := setting(line)) is not None and scope(found)
        and (found.key in desired_keys or found.undo is not None)
    ]
    came = [f"+ {line}" for line in dict.fromkeys(desired) if line not in present]
    return "\n".join(gone + came)
