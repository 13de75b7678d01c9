"""Onyx (Mellanox/NVIDIA SN2xxx-SN4xxx): configuration pushed over SSH with netmiko.

netmiko's `mellanox_mlnxos` driver does the login, `enable`, `no cli session paging
enable` and `config term`; this driver decides what to send. It pushes the explicit
DCB form of lossless RoCE (docs/domain.md, "Onyx: the explicit DCB form"), never the `roce lossless` profile: the
profile hides which priority and thresholds a switch runs, and the consistency
check compares exactly those.

Onyx answers a refused line with a `% ...` message and carries on; netmiko does not
treat that as an error unless told, hence `error_pattern=r"^% "` on every push. A push
that fails part-way (a refused line, a dropped session) is undone: the driver reads
what the switch runs now and sends the commands that return it to the configuration
the diff was computed against. Nothing is saved until a push has succeeded, so the
saved (boot) configuration is the previous one even if undoing fails as well.

DSCP -> priority: Onyx classifies by DSCP / 8 once a port trusts L3, which gives the
usual map (26 -> 3, 48 -> 6). This driver pushes no other map: a design with another
map is refused with a message, not approximated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

import paramiko
from netmiko import BaseConnection, ConnectHandler
from netmiko.exceptions import ConfigInvalidException, NetmikoBaseException, ReadException, ReadTimeout

from rackform.fabric import onyx_lines
from rackform.fabric.driver import ApplyFailed, Config, ConfigDiff, Connection, FabricError, SwitchDriver
from rackform.render.switch_configs import onyx_config_text

PART = "running-config"
ERROR_PATTERN = r"^% .*$"
"""How Onyx marks a refused line (`% Unrecognized command`, `% ... out of range`); the
whole line, so the message netmiko raises quotes it."""
_REFUSED = re.compile(r"Invalid input detected at command: (?P<line>.*), matched error: (?P<error>.*)", re.S)

# What a push can die of: a refused line, a prompt that never came, a dropped session.
PUSH_ERRORS = (ConfigInvalidException, NetmikoBaseException, ReadException, ReadTimeout,
               paramiko.SSHException, OSError, EOFError)


def onyx_default_priority(dscp: int) -> int:
    """Onyx's default DSCP -> switch priority map under `qos trust L3`."""
    return dscp // 8


def check_dscp_map(name: str, context: Mapping[str, Any]) -> None:
    wrong = {
        dscp: priority
        for dscp, priority in dict(context.get("fabric_switch_dscp_to_priority", {})).items()
        if onyx_default_priority(int(dscp)) != int(priority)
    }
    if wrong:
        detail = ", ".join(f"DSCP {d} -> {p} (Onyx's default gives {onyx_default_priority(int(d))})"
                           for d, p in sorted(wrong.items()))
        raise FabricError(f"{name}: the design maps {detail}; the Onyx driver relies on Onyx's default "
                          "DSCP map (DSCP / 8) and pushes no other: use the default map for Onyx switches")


class OnyxDriver(SwitchDriver):
    os_name: ClassVar[str] = "onyx"
    transport: ClassVar[str] = "netmiko mellanox_mlnxos over SSH"
    device_type: ClassVar[str] = "mellanox_mlnxos"

    def __init__(self, connection: Connection, name: str | None = None):
        super().__init__(connection, name)
        self._session: BaseConnection | None = None

    # --- connection ---------------------------------------------------------------

    def _connect(self) -> BaseConnection:
        if self._session is None:
            link = self.connection
            # Onyx logins are password logins; a key is offered only when there is no password
            # (a server that takes passwords only may drop a client that offers a key first).
            key_file = None if link.password else link.key_file
            try:
                self._session = ConnectHandler(
                    device_type=self.device_type, host=link.host, port=link.port, username=link.username,
                    password=link.password or "", key_file=key_file, use_keys=key_file is not None,
                    allow_agent=False, ssh_strict=link.known_hosts is not None,
                    system_host_keys=False, alt_host_keys=link.known_hosts is not None,
                    alt_key_file=link.known_hosts or "", conn_timeout=link.timeout_s,
                )
                self._session.enable()
            except PUSH_ERRORS as error:
                self._session = None
                reason = (str(error).strip() or type(error).__name__).splitlines()[0]
                raise FabricError(f"{self.name}: cannot log in to {link.host}:{link.port} as {link.username}: "
                                  f"{reason}") from error
        return self._session

    def close(self) -> None:
        if self._session is not None:
            try:
                self._session.disconnect()
            except PUSH_ERRORS:
                pass  # a dropped session has nothing left to close
            self._session = None

    # --- the five steps --------------------------------------------------------------

    def render(self, context: Mapping[str, Any]) -> Config:
        check_dscp_map(context["inventory_hostname"], context)
        return {PART: "\n".join(onyx_lines.config_lines(onyx_config_text(context))) + "\n"}

    def running(self) -> Config:
        try:
            shown = self._connect().send_command("show running-config")
        except PUSH_ERRORS as error:
            self.close()
            raise FabricError(f"{self.name}: cannot read the running config: {error}") from error
        return {PART: "\n".join(onyx_lines.managed(onyx_lines.config_lines(shown))) + "\n"}

    def diff(self, desired: Config, running: Config) -> ConfigDiff:
        wanted = onyx_lines.config_lines(desired[PART])
        present = onyx_lines.config_lines(running.get(PART, ""))
        scope = onyx_lines.ports_and_globals(wanted)
        return ConfigDiff(
            switch=self.name, desired=desired, running=running,
            changes=tuple(onyx_lines.commands(wanted, present, scope)),
            text=onyx_lines.diff_text(wanted, present, scope),
        )

    def apply(self, diff: ConfigDiff) -> list[str]:
        if diff.empty:
            return []
        try:
            self._push(list(diff.changes))
        except PUSH_ERRORS as error:
            raise self._rolled_back(diff, error) from error
        return [f"{self.name}: {len(diff.changes)} line(s) applied (not saved yet)"]

    def save(self) -> str:
        try:
            self._connect().save_config()
        except PUSH_ERRORS as error:
            self.close()
            raise FabricError(f"{self.name}: `configuration write` failed: {error}") from error
        return f"{self.name}: saved (`configuration write`): the switch boots with this configuration"

    # --- pushing and undoing ---------------------------------------------------------

    def _push(self, lines: list[str]) -> None:
        session = self._connect()
        renames = [line for line in lines if line.startswith("hostname ")]
        body = [line for line in lines if line not in renames]
        if body:
            session.send_config_set(body, error_pattern=ERROR_PATTERN, exit_config_mode=not renames)
        for line in renames:
            # The prompt changes with the hostname: netmiko must not wait for the old one.
            session.send_config_set([line], cmd_verify=False, exit_config_mode=False)
            session.exit_config_mode()
            session.set_base_prompt()

    def _rolled_back(self, diff: ConfigDiff, error: BaseException) -> ApplyFailed:
        """Restore `diff.running`; an ApplyFailed saying what happened either way."""
        failed = f"{self.name}: applying the configuration failed part-way: {_first_line(error)}"
        self.close()  # the failed session may be dead or stuck in a mode: start afresh
        try:
            previous = onyx_lines.config_lines(diff.running.get(PART, ""))
            now = onyx_lines.config_lines(self.running()[PART])
            undo = onyx_lines.commands(previous, now, onyx_lines.everything)
            self._push(undo)
            restored = set(onyx_lines.config_lines(self.running()[PART])) == set(previous)
        except (FabricError, *PUSH_ERRORS) as undo_error:
            self.close()
            return ApplyFailed(
                f"{failed}; restoring the previous configuration FAILED as well ({_first_line(undo_error)}): "
                "the running config is half-applied; the saved config is still the previous one "
                "(nothing was saved), a reload returns the switch to it", rolled_back=False)
        if not restored:
            return ApplyFailed(f"{failed}; the previous configuration could not be restored exactly: "
                               "the saved config is still the previous one (nothing was saved)", rolled_back=False)
        return ApplyFailed(f"{failed}; the previous configuration is restored ({len(undo)} line(s) undone) "
                           "and nothing was saved", rolled_back=True)


def _first_line(error: BaseException) -> str:
    """What went wrong, in one line: the refused line and the switch's answer, or the session's fate."""
    text = str(error).strip()
    refused = _REFUSED.fullmatch(text)
    if refused:
        return f"the switch refused `{refused['line']}`: {refused['error'].strip()}"
    if isinstance(error, ConfigInvalidException | FabricError):
        return text.splitlines()[0] if text else type(error).__name__
    return f"the SSH session dropped or stopped answering ({type(error).__name__})"
