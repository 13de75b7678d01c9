"""Cumulus Linux: configuration as files over SSH, reloaded in place.

Method: files (ifupdown2's /etc/network/interfaces, FRR's /etc/frr/frr.conf, the
datapath's qos_features.conf), not NVUE. The lab's switches are Debian nodes with
ifupdown2 and FRR and have no NVUE (nvued, `nv`); files work on both them and real
Cumulus Linux, and they are what the switch_baseline role installs. This driver
renders the role's own templates (`rackform.render.switch_configs`), so the Ansible
fabric stage and this driver write byte-identical files: after one, the other
finds nothing to change.

Applying: the changed files are written (atomically), then reloaded: `ifreload -a`
and the port settings script for interfaces, `systemctl reload frr` for FRR,
`systemctl reload switchd` for the datapath file where switchd exists. On a lab
node there is no switchd and no ASIC: the datapath file is written but nothing
applies it, and the driver says so. If a reload fails, the previous files are put
back and reloaded, and the driver says whether that worked. Files are the saved
configuration: `save()` has nothing to do.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from rackform.fabric.driver import ApplyFailed, Config, ConfigDiff, Connection, FabricError, SwitchDriver
from rackform.fabric.ssh import SshSession
from rackform.render.switch_configs import (
    CUMULUS_FILES,
    cumulus_file_text,
    cumulus_parts,
    cumulus_path,
    role_defaults,
)

INTERFACES = "/etc/network/interfaces"
FRR_DAEMONS = "/etc/frr/daemons"


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str
    content: str
    mode: int
    owner: str
    reload: str
    """What applies it: interfaces | ports | frr | frr-restart | qos."""


@dataclass(frozen=True, slots=True)
class EditedFile:
    """A file the role does not own but adds one line to (lineinfile)."""

    line: str
    mode: int
    owner: str
    reload: str


def edited_files(defaults: Mapping[str, Any]) -> dict[str, EditedFile]:
    folder = defaults["switch_baseline_interfaces_file"].rsplit("/", 1)[0]
    return {
        INTERFACES: EditedFile(f"source {folder}/*.intf", 0o644, "root", "interfaces"),
        FRR_DAEMONS: EditedFile("bgpd=yes", 0o640, "frr", "frr-restart"),
    }


def with_line(text: str | None, line: str) -> str:
    """`text` holding `line`, as the role's lineinfile leaves it: a `key=value` line replaces
    the last line setting that key, any other line is appended when missing."""
    lines = (text or "").splitlines()
    if line in lines:
        return text or ""
    if "=" in line:
        key = line.split("=", 1)[0] + "="
        setting = [index for index, existing in enumerate(lines) if existing.startswith(key)]
        if setting:
            lines[setting[-1]] = line
            return "\n".join(lines) + "\n"
    return "\n".join([*lines, line]) + "\n"


def _owned_files(defaults: Mapping[str, Any]) -> dict[str, FileChange]:
    """Path -> how the role installs it (content left empty)."""
    return {
        (part.fixed_path or defaults[part.path_default]): FileChange("", "", part.mode, part.owner, part.reload)
        for part in CUMULUS_FILES
    }


class CumulusDriver(SwitchDriver):
    os_name: ClassVar[str] = "cumulus"
    transport: ClassVar[str] = "files over SSH (ifupdown2, FRR, qos_features.conf), no NVUE"

    def __init__(self, connection: Connection, name: str | None = None):
        super().__init__(connection, name)
        self._ssh = SshSession(connection, self.name)

    def close(self) -> None:
        self._ssh.close()

    def render(self, context: Mapping[str, Any]) -> Config:
        return {cumulus_path(part, context): cumulus_file_text(part, context) for part in cumulus_parts(context)}

    def running(self) -> Config:
        defaults = role_defaults()
        contents = self._ssh.read_files([*_owned_files(defaults), *edited_files(defaults)])
        return {path: text for path, text in contents.items() if text is not None}

    def diff(self, desired: Config, running: Config) -> ConfigDiff:
        defaults = role_defaults()
        owned, edited = _owned_files(defaults), edited_files(defaults)
        changes: list[FileChange] = []
        text: list[str] = []
        wanted = dict(desired)
        for path, edit in edited.items():
            wanted[path] = with_line(running.get(path), edit.line)
        for path, content in wanted.items():
            before = running.get(path)
            if before == content:
                continue
            how = owned.get(path) or edited.get(path)
            if how is None:
                raise FabricError(f"{self.name}: {path} is not a file the Cumulus driver manages")
            changes.append(FileChange(path, content, how.mode, how.owner, how.reload))
            text += difflib.unified_diff((before or "").splitlines(), content.splitlines(),
                                         f"{self.name}:{path} (running)", f"{self.name}:{path} (desired)",
                                         lineterm="")
        notes = ()
        if any(change.reload == "qos" for change in changes):
            notes = ("the QoS datapath file is applied by switchd; where there is none (a lab node, no ASIC) "
                     "it is written and NOT applied",)
        return ConfigDiff(self.name, desired, running, tuple(changes), "\n".join(text), notes)

    def apply(self, diff: ConfigDiff) -> list[str]:
        if diff.empty:
            return []
        changes: list[FileChange] = list(diff.changes)
        try:
            for change in changes:
                self._ssh.write_file(change.path, change.content, change.mode, change.owner)
            notes = self._reload({change.reload for change in changes})
        except FabricError as error:
            raise self._rolled_back(diff, changes, error) from error
        return [f"{self.name}: {len(changes)} file(s) written and reloaded", *notes]

    def save(self) -> str:
        return f"{self.name}: the files are what the switch boots with: nothing else to save"

    # --- reloading and undoing ---------------------------------------------------------

    def _reload(self, what: set[str]) -> list[str]:
        notes = []
        if "interfaces" in what:
            self._ssh.check("ifreload -a")
        if what & {"interfaces", "ports"}:
            self._ssh.check(shlex.quote(role_defaults()["switch_baseline_port_settings_script"]))
        if "frr-restart" in what:
            self._ssh.check("systemctl restart frr")
        elif "frr" in what:
            self._ssh.check("systemctl reload-or-restart frr")
        if "qos" in what:
            unit = role_defaults()["switch_baseline_switchd_unit_file"]
            if self._ssh.run(f"test -e {shlex.quote(unit)}").status == 0:
                self._ssh.check("systemctl reload switchd.service")
            else:
                notes.append(f"{self.name}: the QoS datapath file is written but NOT applied: no switchd "
                             f"({unit} is missing; a lab node has no switch ASIC)")
        return notes

    def _rolled_back(self, diff: ConfigDiff, changes: list[FileChange], error: FabricError) -> ApplyFailed:
        failed = f"{self.name}: applying the configuration failed part-way: {_without_name(self.name, error)}"
        try:
            for change in changes:
                before = diff.running.get(change.path)
                if before is None:
                    self._ssh.remove_file(change.path)
                else:
                    self._ssh.write_file(change.path, before, change.mode, change.owner)
            self._reload({change.reload for change in changes})
        except FabricError as undo_error:
            return ApplyFailed(f"{failed}; restoring the previous files FAILED as well "
                               f"({_without_name(self.name, undo_error)})", rolled_back=False)
        return ApplyFailed(f"{failed}; the previous files are restored and reloaded", rolled_back=True)


def _without_name(name: str, error: Exception) -> str:
    return str(error).removeprefix(f"{name}: ")
