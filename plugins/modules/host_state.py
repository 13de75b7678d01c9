#!/usr/bin/python
"""rackform.site.host_state: is this host already as a role would leave it? One read-only look.

A role's tasks cost one module start each per host (on a re-run that changes nothing,
that start is nearly all the time). A role first asks this module, in one round trip,
whether every piece of state its tasks set is already there; when it is, the role
skips its tasks for the host. Anything that differs, or cannot be read, answers
"not converged" and the role runs as it always did, so a wrong answer here can only
cost time, never skip a needed change. The module never changes anything.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import stat
import subprocess

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: host_state
short_description: Compare a host with the state a role sets, without changing it
description:
  - Reads files, directories, kernel settings, values under /proc or /sys and systemd unit states;
    returns C(converged) (all as wanted) and C(differences) (what is not, one line each).
options:
  files:
    description: Files with their exact content and, where given, mode, owner and group.
    type: list
    elements: dict
    default: []
  directories:
    description: Directories that must exist, with mode, owner and group where given.
    type: list
    elements: dict
    default: []
  paths_exist:
    description: Paths that must exist.
    type: list
    elements: str
    default: []
  values:
    description: Files (e.g. under /proc/sys or /sys/class/net) whose content, with whitespace runs
      read as one space, must equal the value.
    type: dict
    default: {}
  sysctl_files:
    description: sysctl.d files (path -> key -> value) that must hold each key with that value.
    type: dict
    default: {}
  units_enabled:
    description: systemd units that `systemctl is-enabled` must call enabled.
    type: list
    elements: str
    default: []
  symlinks:
    description: Symbolic links (path -> text the link target must end with).
    type: dict
    default: {}
  units_active:
    description: systemd units that `systemctl is-active` must call active.
    type: list
    elements: str
    default: []
  lines:
    description: Lines as ansible.builtin.lineinfile keeps them (path, line, optional regexp). With a
      regexp, the last line that matches it must be the line; without, the line must be there.
    type: list
    elements: dict
    default: []
  packages_installed:
    description: Debian packages that dpkg must list as "install ok installed".
    type: list
    elements: str
    default: []
"""

RETURN = r"""
converged:
  description: True when every item is as wanted.
  type: bool
differences:
  description: One line per item that differs or could not be read.
  type: list
  elements: str
"""


def _words(text: str) -> str:
    return " ".join(str(text).split())


def _owner_mode(path: str, spec: dict, found: os.stat_result) -> list[str]:
    differences = []
    if spec.get("mode") is not None and stat.S_IMODE(found.st_mode) != int(str(spec["mode"]), 8):
        differences.append(f"{path}: mode {stat.S_IMODE(found.st_mode):04o}, want {spec['mode']}")
    if spec.get("owner") is not None and pwd.getpwuid(found.st_uid).pw_name != spec["owner"]:
        differences.append(f"{path}: owner differs, want {spec['owner']}")
    if spec.get("group") is not None and grp.getgrgid(found.st_gid).gr_name != spec["group"]:
        differences.append(f"{path}: group differs, want {spec['group']}")
    return differences


def _file(spec: dict) -> list[str]:
    path = spec["path"]
    try:
        found = os.lstat(path)
        if not stat.S_ISREG(found.st_mode):
            return [f"{path}: not a regular file"]
        with open(path, "rb") as handle:
            if handle.read() != spec["content"].encode():
                return [f"{path}: content differs"]
    except (OSError, KeyError) as error:
        return [f"{path}: {error}"]
    return _owner_mode(path, spec, found)


def _directory(spec: dict) -> list[str]:
    path = spec["path"]
    try:
        found = os.stat(path)
        if not stat.S_ISDIR(found.st_mode):
            return [f"{path}: not a directory"]
        return _owner_mode(path, spec, found)
    except (OSError, KeyError) as error:
        return [f"{path}: {error}"]


def _value(path: str, wanted) -> list[str]:
    try:
        with open(path) as handle:
            found = handle.read()
    except OSError as error:
        return [f"{path}: {error}"]
    return [] if _words(found) == _words(wanted) else [f"{path}: {_words(found)!r}, want {_words(wanted)!r}"]


def _sysctl_file(path: str, wanted: dict) -> list[str]:
    """The keys as ansible.posix.sysctl reads them: `key = value` lines, # and ; comments."""
    found = {}
    try:
        with open(path) as handle:
            for line in handle:
                line = line.strip()
                if line and not line.startswith(("#", ";")) and "=" in line:
                    key, value = line.split("=", 1)
                    found[key.strip()] = _words(value)
    except OSError as error:
        return [f"{path}: {error}"]
    return [f"{path}: {key} is {found.get(key)!r}, want {_words(value)!r}"
            for key, value in wanted.items() if found.get(key) != _words(value)]


def _line(spec: dict) -> list[str]:
    path, wanted = spec["path"], spec["line"]
    try:
        with open(path) as handle:
            found = [line.rstrip("\r\n") for line in handle]
    except (OSError, KeyError) as error:
        return [f"{path}: {error}"]
    if spec.get("regexp"):
        matching = [line for line in found if re.search(spec["regexp"], line)]
        return [] if matching and matching[-1] == wanted else [f"{path}: {spec['regexp']!r} is not {wanted!r}"]
    return [] if wanted in found else [f"{path}: no line {wanted!r}"]


def _unit_state(unit: str, question: str, wanted: str) -> list[str]:
    """`systemctl is-enabled` or `is-active`, as ansible.builtin.systemd_service asks."""
    try:
        result = subprocess.run(["systemctl", question, unit], capture_output=True, text=True, check=False)
    except OSError as error:
        return [f"{unit}: {error}"]
    state = result.stdout.strip()
    return [] if state == wanted else [f"{unit}: {state or result.stderr.strip()}, want {wanted}"]


def _packages(names: list[str]) -> list[str]:
    if not names:
        return []
    try:
        result = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *names],
                                capture_output=True, text=True, check=False)
    except OSError as error:
        return [f"dpkg-query: {error}"]
    installed = {line.split(" ", 1)[0] for line in result.stdout.splitlines() if line.endswith(" install ok installed")}
    return [f"package {name}: not installed" for name in names if name not in installed]


def _symlink(path: str, ending: str) -> list[str]:
    try:
        target = os.readlink(path)
    except OSError as error:
        return [f"{path}: {error}"]
    return [] if target.endswith(ending) else [f"{path}: points to {target}, want ...{ending}"]


def host_differences(params: dict) -> list[str]:
    differences: list[str] = []
    for spec in params["files"]:
        differences += _file(spec)
    for spec in params["directories"]:
        differences += _directory(spec)
    differences += [f"{path}: missing" for path in params["paths_exist"] if not os.path.exists(path)]
    for path, wanted in params["values"].items():
        differences += _value(path, wanted)
    for path, wanted in params["sysctl_files"].items():
        differences += _sysctl_file(path, wanted)
    for spec in params["lines"]:
        differences += _line(spec)
    for unit in params["units_enabled"]:
        differences += _unit_state(unit, "is-enabled", "enabled")
    for unit in params["units_active"]:
        differences += _unit_state(unit, "is-active", "active")
    differences += _packages(params["packages_installed"])
    for path, ending in params["symlinks"].items():
        differences += _symlink(path, ending)
    return differences


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": []},
            "directories": {"type": "list", "elements": "dict", "default": []},
            "paths_exist": {"type": "list", "elements": "str", "default": []},
            "values": {"type": "dict", "default": {}},
            "sysctl_files": {"type": "dict", "default": {}},
            "units_enabled": {"type": "list", "elements": "str", "default": []},
            "symlinks": {"type": "dict", "default": {}},
            "units_active": {"type": "list", "elements": "str", "default": []},
            "packages_installed": {"type": "list", "elements": "str", "default": []},
            "lines": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    differences = host_differences(module.params)
    module.exit_json(changed=False, converged=not differences, differences=differences)


if __name__ == "__main__":
    main()
