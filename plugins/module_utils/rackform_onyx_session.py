# -*- coding: utf-8 -*-
"""One Onyx switch over SSH with netmiko (`mellanox_mlnxos`): read what it runs, push the
difference to its rendered configuration, roll back a push that fails part-way, save.

netmiko does the login, `enable`, `no cli session paging enable` and `config term`; this
file decides what to send. Onyx answers a refused line with a `% ...` message and carries
on, and netmiko does not treat that as an error unless told, hence `error_pattern` on
every push. A push that fails part-way (a refused line, a dropped session) is undone: a
fresh session reads what the switch runs now and sends the commands that return it to
the configuration the difference was computed against. `configuration write` runs only
after a push has succeeded, so the saved (boot) configuration is the previous one even if
undoing fails as well.

Standard library, netmiko and paramiko (netmiko's own SSH library) only: the emitted
project runs without rackform installed.
"""

from __future__ import absolute_import, annotations, division, print_function

import re
from dataclasses import dataclass, field

from ansible_collections.rackform.site.plugins.module_utils.rackform_onyx_lines import (
    ERROR_PATTERN,
    commands,
    config_lines,
    diff_text,
    everything,
    managed,
    ports_and_globals,
)

try:
    import paramiko
    from netmiko import ConnectHandler
    from netmiko.exceptions import ConfigInvalidException, NetmikoBaseException, ReadException, ReadTimeout
except ImportError:  # the module reports it with missing_required_lib
    HAS_NETMIKO = False
    PUSH_ERRORS = (OSError, EOFError)
else:
    HAS_NETMIKO = True
    # What a push can die of: a refused line, a prompt that never came, a dropped session.
    PUSH_ERRORS = (ConfigInvalidException, NetmikoBaseException, ReadException, ReadTimeout,
                   paramiko.SSHException, OSError, EOFError)

__metaclass__ = type

DEVICE_TYPE = "mellanox_mlnxos"
_REFUSED = re.compile(r"Invalid input detected at command: (?P<line>.*), matched error: (?P<error>.*)", re.S)


class OnyxError(Exception):
    """The switch could not be read or configured; the message says which switch and why.
    `rolled_back`: after a failed push, whether the previous configuration is back (None:
    nothing was pushed)."""

    def __init__(self, message: str, rolled_back: bool | None = None):
        super().__init__(message)
        self.rolled_back = rolled_back


@dataclass(frozen=True)
class Login:
    """How to reach the switch. The password stays out of repr."""

    host: str
    username: str
    port: int = 22
    password: str | None = field(default=None, repr=False)
    key_file: str | None = None
    known_hosts: str | None = None
    """OpenSSH known_hosts to check the switch's host key against (None: the controller
    user's ~/.ssh/known_hosts). An unknown or changed key always refuses the login."""
    timeout_s: float = 30.0


class OnyxSession:
    """A netmiko session to one switch, opened on first use."""

    def __init__(self, login: Login, name: str):
        self.login = login
        self.name = name
        self._connection = None

    def _connect(self):
        if self._connection is None:
            link = self.login
            # Onyx logins are password logins; a key is offered only when there is no password
            # (a server that takes passwords only may drop a client that offers a key first).
            key_file = None if link.password else (link.key_file or None)
            try:
                self._connection = ConnectHandler(
                    device_type=DEVICE_TYPE, host=link.host, port=link.port, username=link.username,
                    password=link.password or "", key_file=key_file, use_keys=key_file is not None,
                    allow_agent=False, ssh_strict=True,
                    system_host_keys=link.known_hosts is None, alt_host_keys=link.known_hosts is not None,
                    alt_key_file=link.known_hosts or "", conn_timeout=link.timeout_s,
                )
                self._connection.enable()
            except PUSH_ERRORS as error:
                self._connection = None
                reason = (str(error).strip() or type(error).__name__).splitlines()[0]
                raise OnyxError("%s: cannot log in to %s:%s as %s: %s"
                                % (self.name, link.host, link.port, link.username, reason)) from error
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.disconnect()
            except PUSH_ERRORS:
                pass  # a dropped session has nothing left to close
            self._connection = None

    def running(self) -> list[str]:
        """The managed lines of `show running-config`, in the switch's order."""
        try:
            shown = self._connect().send_command("show running-config")
        except PUSH_ERRORS as error:
            self.close()
            raise OnyxError("%s: cannot read the running config: %s" % (self.name, first_line(error))) from error
        return managed(config_lines(shown))

    def show(self, command: str) -> str:
        """What the switch prints for one command (paging is off: the whole output)."""
        try:
            return self._connect().send_command(command)
        except PUSH_ERRORS as error:
            self.close()
            raise OnyxError("%s: `%s` failed: %s" % (self.name, command, first_line(error))) from error

    def push(self, lines: list[str]) -> None:
        """Send configuration lines; a refused line raises (netmiko's ConfigInvalidException)."""
        connection = self._connect()
        renames = [line for line in lines if line.startswith("hostname ")]
        body = [line for line in lines if line not in renames]
        if body:
            connection.send_config_set(body, error_pattern=ERROR_PATTERN, exit_config_mode=not renames)
        for line in renames:
            # The prompt changes with the hostname: netmiko must not wait for the old one.
            connection.send_config_set([line], cmd_verify=False, exit_config_mode=False)
            connection.exit_config_mode()
            connection.set_base_prompt()

    def save(self) -> None:
        try:
            self._connect().save_config()
        except PUSH_ERRORS as error:
            self.close()
            raise OnyxError("%s: `configuration write` failed: %s" % (self.name, first_line(error))) from error


@dataclass(frozen=True)
class Plan:
    """What pushing `desired` over `running` sends, and the difference for people."""

    running: list[str]
    commands: list[str]
    diff: str


def plan(desired_text: str, running: list[str]) -> Plan:
    wanted = config_lines(desired_text)
    scope = ports_and_globals(wanted)
    return Plan(running, commands(wanted, running, scope), diff_text(wanted, running, scope))


def apply(session: OnyxSession, change: Plan) -> None:
    """Push `change`, then save; a push that fails part-way is undone and raises OnyxError."""
    if not change.commands:
        return
    try:
        session.push(change.commands)
    except PUSH_ERRORS as error:
        raise roll_back(session, change.running, error) from error
    session.save()


def roll_back(session: OnyxSession, previous: list[str], error: BaseException) -> OnyxError:
    """Restore `previous`; an OnyxError saying what happened either way, outcome first (a
    summary that cuts long lines keeps it)."""
    failed = "applying the configuration failed part-way: %s" % first_line(error)
    session.close()  # the failed session may be dead or stuck in a mode: start afresh
    try:
        undo = commands(previous, session.running(), everything)
        session.push(undo)
        restored = set(session.running()) == set(previous)
    except (OnyxError,) + PUSH_ERRORS as undo_error:
        session.close()
        return OnyxError(
            "%s: the running config is half-applied: restoring the previous configuration FAILED as well (%s); "
            "the saved config is still the previous one (nothing was saved), a reload returns the switch to it; %s"
            % (session.name, first_line(undo_error), failed), rolled_back=False)
    if not restored:
        return OnyxError("%s: the previous configuration could not be restored exactly; the saved config is still "
                         "the previous one (nothing was saved); %s" % (session.name, failed), rolled_back=False)
    return OnyxError("%s: the previous configuration is restored (%d line(s) undone) and nothing was saved; %s"
                     % (session.name, len(undo), failed), rolled_back=True)


def first_line(error: BaseException) -> str:
    """What went wrong, in one line: the refused line and the switch's answer, or the session's fate."""
    text = str(error).strip()
    refused = _REFUSED.fullmatch(text)
    if refused:
        return "the switch refused `%s`: %s" % (refused.group("line"), refused.group("error").strip())
    if isinstance(error, OnyxError) or (HAS_NETMIKO and isinstance(error, ConfigInvalidException)):
        return text.splitlines()[0] if text else type(error).__name__
    return "the SSH session dropped or stopped answering (%s)" % type(error).__name__
