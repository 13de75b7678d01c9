"""An SSH emulator of the Mellanox/NVIDIA Onyx switch CLI, for the rackform lab.

THIS IS NOT ONYX. It is a stand-in written by the rackform project, because Onyx
switches have no image that runs on lab machines. It emulates just enough of the Onyx
CLI for netmiko's `mellanox_mlnxos` driver to drive it unchanged, and for the RoCE
fabric lines rackform pushes (docs/domain.md, "Onyx: the explicit DCB form"):

- modes and prompts: `<host> [standalone: master] >` (user), `enable` -> `... #`,
  `configure terminal` -> `... (config) #`, `interface ethernet 1/N` ->
  `... (config interface ethernet 1/N) #`, `exit`, `disable`, `quit`;
  keywords may be abbreviated (`conf t`, `sh run`) as on a real switch;
- paging (on by default; `no cli session paging enable`, `terminal length N`);
- `show version|running-config|roce|dcb priority-flow-control|interfaces ethernet 1/N`;
- `show lldp interfaces ethernet [1/N] remote`: the LLDP neighbours the emulator is told
  it sees (`set_lldp_neighbours`, kept in `lldp-neighbours.json`: an emulator has no cable),
  shown while `lldp` is configured, in the shape of Onyx's manual;
- the configuration lines below and their `no` forms, kept in a running config that
  renders Onyx style (`##` section headers, one line per setting, de-duplicated);
- `configuration write` (alias `write memory`) copies running to saved.

Every error starts with `% `; an unknown word answers `% Unrecognized command "word".`
Ports are Eth1/1..Eth1/N; a command naming any other port is rejected.

State, as files under `state_dir` (tests and the fabric stage read them):
    running-config.txt     the `show running-config` text, rewritten on every change
    saved-config.txt       written by `configuration write`; replayed at start, as a boot
    lldp-neighbours.json   port ("1/5") -> {"system": ..., "port": ...}: who each port sees
    ssh_host_ed25519_key   kept so a client that reconnects sees the same host key
    endpoint.json          host, port and pid of the listening emulator

Run it in-process (`OnyxEmulator(...).start()` / `.stop()`: asyncio in a background
thread) or detached: `python -m rackform.lab.onyx_emulator --state-dir DIR ...`.
A fault knob makes configuration lines fail after N accepted ones, to test a push that
breaks half-way.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import hmac
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import asyncssh

from rackform.lab import LabError
from rackform.process_environment import tool_environment

EMULATOR_NAME = "rackform Onyx CLI emulator"
NOT_ONYX = "a lab stand-in written by the rackform project, not NVIDIA Onyx"
# No '>' or '#' in the banner: netmiko would take that line for a prompt.
BANNER = f"{EMULATOR_NAME}: {NOT_ONYX}.\n\n"
EMULATED_RELEASE = "3.9-emulated (rackform emulator, not an Onyx release)"
PAGER_MARKER = "--More-- (emulator pager: space next page, enter next line, q quit)"
FAULT_MESSAGE = "% Fault injected by the rackform Onyx emulator: configuration line refused"

RUNNING_CONFIG_FILE = "running-config.txt"
SAVED_CONFIG_FILE = "saved-config.txt"
HOST_KEY_FILE = "ssh_host_ed25519_key"
ENDPOINT_FILE = "endpoint.json"
LLDP_NEIGHBOURS_FILE = "lldp-neighbours.json"

DEFAULT_MTU_BYTES = 1500
MAX_MTU_BYTES = 9216
DEFAULT_TERMINAL_LINES = 24
PRIORITY_COUNT = 8  # 802.1p priorities and traffic classes are both 0..7
HOSTNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
PORTS_RE = re.compile(r"(\d+)/(\d+)(?:-(\d+)/(\d+))?")

FaultMode = Literal["error", "disconnect"]


class CliError(Exception):
    """A line the emulated CLI refuses; str(error) is the `% ...` text the user sees."""


class FaultDisconnect(Exception):
    """The fault knob fired in `disconnect` mode: the SSH session must drop."""


# --- the configuration model ----------------------------------------------------------

@dataclass(slots=True)
class PortConfig:
    """One port's settings; None / False / empty means the Onyx default (not shown)."""

    mtu_bytes: int = DEFAULT_MTU_BYTES
    description: str | None = None
    shutdown: bool = False
    qos_trust: str | None = None  # L2 (the default) is never shown
    pfc_mode: str | None = None  # "on" or "on force"; auto (the default) is not shown
    ecn_by_traffic_class: dict[int, str] = field(default_factory=dict)
    pfc_watchdog: bool = False


PortChange = Callable[[PortConfig], None]


@dataclass(slots=True)
class RunningConfig:
    """What the emulated switch is configured with; a setting is stored once (de-duplicated)."""

    hostname: str
    roce_mode: str | None = None
    pfc_enable: str | None = None  # "enable" or "enable force"
    pfc_priorities: set[int] = field(default_factory=set)
    lldp: bool = False
    ports: dict[int, PortConfig] = field(default_factory=dict)

    def port(self, number: int) -> PortConfig:
        return self.ports.setdefault(number, PortConfig())


def _quote(text: str) -> str:
    return f'"{text}"' if re.search(r"\s", text) or not text else text


def _interface_lines(config: RunningConfig) -> list[str]:
    lines = []
    for number, port in sorted(config.ports.items()):
        prefix = f"interface ethernet 1/{number}"
        if port.mtu_bytes != DEFAULT_MTU_BYTES:
            lines.append(f"{prefix} mtu {port.mtu_bytes} force")
        if port.description is not None:
            lines.append(f"{prefix} description {_quote(port.description)}")
        if port.shutdown:
            lines.append(f"{prefix} shutdown")
    return lines


def _pfc_lines(config: RunningConfig) -> list[str]:
    lines = [f"dcb priority-flow-control {config.pfc_enable}"] if config.pfc_enable else []
    lines += [f"dcb priority-flow-control priority {p} enable" for p in sorted(config.pfc_priorities)]
    lines += [f"interface ethernet 1/{number} dcb priority-flow-control mode {port.pfc_mode}"
              for number, port in sorted(config.ports.items()) if port.pfc_mode]
    return lines


def _qos_lines(config: RunningConfig) -> list[str]:
    lines = []
    for number, port in sorted(config.ports.items()):
        prefix = f"interface ethernet 1/{number}"
        if port.qos_trust:
            lines.append(f"{prefix} qos trust {port.qos_trust}")
        lines += [f"{prefix} traffic-class {tc} congestion-control {ecn}"
                  for tc, ecn in sorted(port.ecn_by_traffic_class.items())]
    return lines


def render_running_config(config: RunningConfig) -> str:
    """The running config as Onyx prints it: `##` headed sections, settings indented."""
    sections = (
        ("Interface Ethernet configuration", _interface_lines(config)),
        ("LLDP configuration", ["lldp"] if config.lldp else []),
        ("RoCE configuration", [f"roce {config.roce_mode}"] if config.roce_mode else []),
        ("DCBX PFC configuration", _pfc_lines(config)),
        ("QoS switch configuration", _qos_lines(config)),
        ("PFC watchdog configuration",
         [f"interface ethernet 1/{n} pfc-wd" for n, p in sorted(config.ports.items()) if p.pfc_watchdog]),
        ("Network management configuration", [f"hostname {config.hostname}"]),
    )
    out = ["##", '## Running database "initial"', f"## Generated by the {EMULATOR_NAME} ({NOT_ONYX})", "##"]
    for title, lines in sections:
        if lines:
            out += ["", "##", f"## {title}", "##"] + [f"   {line}" for line in lines]
    return "\n".join(out) + "\n"


# --- the emulated switch: state shared by every SSH session -----------------------------

def _atomic_write(path: Path, text: str) -> None:
    """Readers (tests, the fabric stage) never see a half-written config."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


class EmulatedSwitch:
    """The one running/saved config behind all sessions, persisted under `state_dir`."""

    def __init__(self, hostname: str, port_count: int, state_dir: Path):
        if port_count < 1:
            raise ValueError(f"an emulated switch needs at least one port, got {port_count}")
        self.port_count = port_count
        self.state_dir = state_dir
        self.running = RunningConfig(hostname=hostname)
        self.lock = threading.RLock()  # sessions run on the loop thread; tests read from theirs
        self.started_monotonic = time.monotonic()
        self._fail_after_lines: int | None = None
        self._fault_mode: FaultMode = "error"
        self._lines_since_knob = 0

    @property
    def running_config_path(self) -> Path:
        return self.state_dir / RUNNING_CONFIG_FILE

    @property
    def saved_config_path(self) -> Path:
        return self.state_dir / SAVED_CONFIG_FILE

    @property
    def hostname(self) -> str:
        return self.running.hostname

    def parse_ports(self, token: str) -> list[int]:
        """`1/5` or `1/1-1/4` -> port numbers; a port this switch lacks is an error."""
        match = PORTS_RE.fullmatch(token)
        if not match:
            raise CliError(f'% Unrecognized command "{token}".')
        first_slot, first, last_slot, last = match.groups()
        last_slot, last = last_slot or first_slot, last or first
        numbers = range(int(first), int(last) + 1)
        if first_slot != "1" or last_slot != "1" or not numbers or numbers[0] < 1 or numbers[-1] > self.port_count:
            raise CliError(f"% Interface ethernet {token} does not exist on this emulated switch "
                           f"(it has Eth1/1-Eth1/{self.port_count})")
        return list(numbers)

    @property
    def lldp_neighbours_path(self) -> Path:
        return self.state_dir / LLDP_NEIGHBOURS_FILE

    def lldp_neighbours(self) -> dict[int, dict[str, str]]:
        """Port number -> {"system", "port"} of the neighbour it sees (none: no file)."""
        if not self.lldp_neighbours_path.is_file():
            return {}
        neighbours = json.loads(self.lldp_neighbours_path.read_text(encoding="utf-8"))
        return {self.parse_ports(port)[0]: dict(seen) for port, seen in neighbours.items()}

    def inject_config_failure(self, after_lines: int | None, mode: FaultMode = "error") -> None:
        """Refuse configuration lines once `after_lines` more were accepted (None: never)."""
        with self.lock:
            self._fail_after_lines, self._fault_mode, self._lines_since_knob = after_lines, mode, 0

    def configure(self, change: Callable[[RunningConfig], None]) -> None:
        """Apply one configuration line's change, then persist the running config."""
        with self.lock:
            if self._fail_after_lines is not None and self._lines_since_knob >= self._fail_after_lines:
                if self._fault_mode == "disconnect":
                    raise FaultDisconnect()
                raise CliError(FAULT_MESSAGE)
            change(self.running)
            self._lines_since_knob += 1
            self.persist_running()

    def running_config_text(self) -> str:
        with self.lock:
            return render_running_config(self.running)

    def persist_running(self) -> None:
        _atomic_write(self.running_config_path, self.running_config_text())

    def save(self) -> None:
        with self.lock:
            _atomic_write(self.saved_config_path, self.running_config_text())

    def boot(self) -> None:
        """Load the saved config into running, as a switch does when it starts."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.saved_config_path.exists():
            replay_config(self, self.saved_config_path)
        self.persist_running()


def replay_config(switch: EmulatedSwitch, path: Path) -> None:
    """Apply a saved config file's lines in config mode; a bad line -> `file:line: message`."""
    session = OnyxCliSession(switch, mode=Mode.CONFIG)
    for line_number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        output = session.execute(line).output
        if output.startswith("%"):
            raise LabError(f"{path}:{line_number}: {output.splitlines()[0]}")


# --- the command grammar ------------------------------------------------------------------

class Mode(enum.Enum):
    USER = "user"
    ENABLE = "enable"
    CONFIG = "config"
    INTERFACE = "interface"


ANY_MODE = frozenset(Mode)
PRIVILEGED = frozenset({Mode.ENABLE, Mode.CONFIG, Mode.INTERFACE})
CONFIGURING = frozenset({Mode.CONFIG, Mode.INTERFACE})

Handler = Callable[["OnyxCliSession", list[str]], str]
# Placeholders a command's words may hold; `<text>` takes the rest of the line.
ARGUMENT_CHECKS: dict[str, Callable[[str], bool]] = {
    "<int>": str.isdigit,
    "<ports>": lambda token: PORTS_RE.fullmatch(token) is not None,
    "<word>": lambda token: True,
}


@dataclass(frozen=True, slots=True)
class Command:
    words: tuple[str, ...]  # lower-case keywords and placeholders
    modes: frozenset[Mode]
    run: Handler


def _pick_keyword(token: str, keywords: set[str]) -> str | None:
    """Onyx accepts any unambiguous prefix of a keyword (`conf t`, `sh run`)."""
    lowered = token.lower()
    if lowered in keywords:
        return lowered
    candidates = [k for k in keywords if k.startswith(lowered)]
    if len(candidates) > 1:
        raise CliError(f'% Ambiguous command "{token}".')
    return candidates[0] if candidates else None


def _unrecognized(token: str) -> CliError:
    return CliError(f'% Unrecognized command "{token}".\nType "?" for help.')


def resolve(tokens: Sequence[str], commands: Sequence[Command]) -> tuple[Command, list[str]]:
    """Find the one command the tokens spell, with its arguments, or raise CliError."""
    alive: list[tuple[Command, list[str]]] = [(command, []) for command in commands]
    for index, token in enumerate(tokens):
        keywords = {c.words[index] for c, _ in alive if index < len(c.words) and not c.words[index].startswith("<")}
        keyword = _pick_keyword(token, keywords)
        survivors = []
        for command, args in alive:
            word = command.words[index] if index < len(command.words) else None
            if word == "<text>" and keyword is None:
                return command, args + [" ".join(tokens[index:])]
            if word is not None and (word == keyword if keyword else
                                     word in ARGUMENT_CHECKS and ARGUMENT_CHECKS[word](token)):
                survivors.append((command, args if keyword else args + [token]))
        if not survivors:
            raise _unrecognized(token)
        alive = survivors
    complete = [(command, args) for command, args in alive if len(command.words) == len(tokens)]
    if not complete:
        raise CliError("% Incomplete command.")
    return complete[0]


def _expand(spec: str) -> list[tuple[str, ...]]:
    """`mtu <int> [force]` -> the word lists with and without the optional keyword."""
    variants: list[tuple[str, ...]] = [()]
    for word in spec.split():
        if word.startswith("[") and word.endswith("]"):
            variants = variants + [v + (word[1:-1],) for v in variants]
        else:
            variants = [v + (word,) for v in variants]
    return variants


def commands(spec: str, modes: frozenset[Mode], run: Handler) -> list[Command]:
    return [Command(words, modes, run) for words in _expand(spec)]


# --- configuration lines: each parser checks its arguments, then returns the change ------

def _number(token: str, low: int, high: int, what: str) -> int:
    value = int(token)
    if not low <= value <= high:
        raise CliError(f"% {what} {value} is out of range ({low}-{high})")
    return value


def _set_port(**settings: object) -> Callable[[list[str]], PortChange]:
    """A parser for a setting that takes no arguments (`shutdown`, `pfc-wd`, `no mtu`)."""
    def change(port: PortConfig) -> None:
        for name, value in settings.items():
            setattr(port, name, value)
    return lambda args: change


def _mtu(args: list[str]) -> PortChange:
    mtu_bytes = _number(args[0], DEFAULT_MTU_BYTES, MAX_MTU_BYTES, "MTU")
    return lambda port: setattr(port, "mtu_bytes", mtu_bytes)


def _description(args: list[str]) -> PortChange:
    text = args[0]
    return lambda port: setattr(port, "description", text)


def _ecn(kind: str, high: int) -> Callable[[list[str]], PortChange]:
    """traffic-class T congestion-control ecn minimum-KIND A maximum-KIND B."""
    def parse(args: list[str]) -> PortChange:
        traffic_class = _number(args[0], 0, PRIORITY_COUNT - 1, "traffic-class")
        minimum, maximum = (_number(a, 0, high, f"ECN {kind} threshold") for a in args[1:3])
        if minimum > maximum:
            raise CliError(f"% ECN minimum-{kind} {minimum} is above maximum-{kind} {maximum}")
        setting = f"ecn minimum-{kind} {minimum} maximum-{kind} {maximum}"
        return lambda port: port.ecn_by_traffic_class.__setitem__(traffic_class, setting)
    return parse


def _no_ecn(args: list[str]) -> PortChange:
    traffic_class = _number(args[0], 0, PRIORITY_COUNT - 1, "traffic-class")

    def change(port: PortConfig) -> None:
        port.ecn_by_traffic_class.pop(traffic_class, None)
    return change


# Words after `interface ethernet <ports>` (or typed inside interface mode), and their parsers.
PORT_SETTINGS: tuple[tuple[str, Callable[[list[str]], PortChange]], ...] = (
    ("mtu <int> [force]", _mtu),
    ("description <text>", _description),
    ("shutdown", _set_port(shutdown=True)),
    ("qos trust l2", _set_port(qos_trust=None)),
    ("qos trust l3", _set_port(qos_trust="L3")),
    ("qos trust both", _set_port(qos_trust="both")),
    ("dcb priority-flow-control mode on", _set_port(pfc_mode="on")),
    ("dcb priority-flow-control mode on force", _set_port(pfc_mode="on force")),
    ("dcb priority-flow-control mode auto", _set_port(pfc_mode=None)),
    ("traffic-class <int> congestion-control ecn minimum-absolute <int> maximum-absolute <int>",
     _ecn("absolute", 100_000)),
    ("traffic-class <int> congestion-control ecn minimum-relative <int> maximum-relative <int>",
     _ecn("relative", 100)),
    ("pfc-wd", _set_port(pfc_watchdog=True)),
)
PORT_RESETS: tuple[tuple[str, Callable[[list[str]], PortChange]], ...] = (
    ("mtu", _set_port(mtu_bytes=DEFAULT_MTU_BYTES)),
    ("description", _set_port(description=None)),
    ("shutdown", _set_port(shutdown=False)),
    ("qos trust", _set_port(qos_trust=None)),
    ("dcb priority-flow-control mode", _set_port(pfc_mode=None)),
    ("traffic-class <int> congestion-control", _no_ecn),
    ("pfc-wd", _set_port(pfc_watchdog=False)),
)


def _port_handler(parse: Callable[[list[str]], PortChange], *, ports_in_line: bool) -> Handler:
    def run(session: OnyxCliSession, args: list[str]) -> str:
        if ports_in_line:
            numbers, args = session.switch.parse_ports(args[0]), args[1:]
        else:
            numbers = session.interface_ports
        change = parse(args)  # checked once, before anything is applied

        def change_ports(config: RunningConfig) -> None:
            for number in numbers:
                change(config.port(number))
        session.switch.configure(change_ports)
        return ""
    return run


GlobalChange = Callable[[RunningConfig], None]


def _global_handler(parse: Callable[[list[str]], GlobalChange]) -> Handler:
    def run(session: OnyxCliSession, args: list[str]) -> str:
        session.switch.configure(parse(args))
        return ""
    return run


def _hostname(args: list[str]) -> GlobalChange:
    name = args[0]
    if not HOSTNAME_RE.fullmatch(name):
        raise CliError(f"% Invalid hostname {name!r}: letters, digits, '.' and '-', up to 63")
    return lambda config: setattr(config, "hostname", name)


def _setting(name: str, value: object) -> Callable[[list[str]], GlobalChange]:
    return lambda args: (lambda config: setattr(config, name, value))


def _pfc_priority(enabled: bool) -> Callable[[list[str]], GlobalChange]:
    def parse(args: list[str]) -> GlobalChange:
        priority = _number(args[0], 0, PRIORITY_COUNT - 1, "priority")
        if enabled:
            return lambda config: config.pfc_priorities.add(priority)
        return lambda config: config.pfc_priorities.discard(priority)
    return parse


GLOBAL_SETTINGS: tuple[tuple[str, Callable[[list[str]], GlobalChange]], ...] = (
    ("hostname <word>", _hostname),
    ("roce", _setting("roce_mode", "lossless")),  # Onyx's `roce` means the lossless profile
    ("roce lossless", _setting("roce_mode", "lossless")),
    ("roce lossy", _setting("roce_mode", "lossy")),
    ("roce semi-lossless", _setting("roce_mode", "semi-lossless")),
    ("no roce", _setting("roce_mode", None)),
    ("dcb priority-flow-control enable", _setting("pfc_enable", "enable")),
    ("dcb priority-flow-control enable force", _setting("pfc_enable", "enable force")),
    ("no dcb priority-flow-control enable [force]", _setting("pfc_enable", None)),
    ("dcb priority-flow-control priority <int> enable", _pfc_priority(enabled=True)),
    ("no dcb priority-flow-control priority <int> enable", _pfc_priority(enabled=False)),
    ("lldp", _setting("lldp", True)),
    ("no lldp", _setting("lldp", False)),
)


# --- session commands -----------------------------------------------------------------

def _enable(session: OnyxCliSession, args: list[str]) -> str:
    if session.mode is Mode.USER:
        session.mode = Mode.ENABLE
    return ""


def _disable(session: OnyxCliSession, args: list[str]) -> str:
    session.mode = Mode.USER
    return ""


def _configure_terminal(session: OnyxCliSession, args: list[str]) -> str:
    session.mode = Mode.CONFIG
    return ""


def _exit(session: OnyxCliSession, args: list[str]) -> str:
    """exit climbs one mode: interface -> config -> enable; from enable or user, log out."""
    if session.mode is Mode.INTERFACE:
        session.mode = Mode.CONFIG
    elif session.mode is Mode.CONFIG:
        session.mode = Mode.ENABLE
    else:
        session.logged_out = True
    return ""


def _quit(session: OnyxCliSession, args: list[str]) -> str:
    session.logged_out = True
    return ""


def _enter_interface(session: OnyxCliSession, args: list[str]) -> str:
    session.interface_ports = session.switch.parse_ports(args[0])
    session.interface_label = args[0]
    session.mode = Mode.INTERFACE
    return ""


def _paging(enabled: bool) -> Handler:
    def run(session: OnyxCliSession, args: list[str]) -> str:
        session.paging = enabled
        return ""
    return run


def _terminal_length(session: OnyxCliSession, args: list[str]) -> str:
    session.terminal_lines = _number(args[0], 0, 999, "terminal length")
    return ""


def _accept(session: OnyxCliSession, args: list[str]) -> str:
    return ""


def _configuration_write(session: OnyxCliSession, args: list[str]) -> str:
    session.switch.save()
    return ""


# --- show commands (outputs imitate Onyx's shape; values are the emulator's) ---------------

def _uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h {minutes}m {secs}s"


def _show_version(session: OnyxCliSession, args: list[str]) -> str:
    switch = session.switch
    return "\n".join((
        f"Product name:      {EMULATOR_NAME} ({NOT_ONYX})",
        f"Product release:   {EMULATED_RELEASE}",
        "Build ID:          rackform-emulator",
        "Target arch:       x86_64",
        f"Product model:     emulated switch, {switch.port_count} Ethernet ports",
        f"Host ID:           {switch.hostname}",
        f"Uptime:            {_uptime(time.monotonic() - switch.started_monotonic)}",
    ))


def _show_running_config(session: OnyxCliSession, args: list[str]) -> str:
    return session.switch.running_config_text()


def _ecn_summary(port: PortConfig) -> str:
    return ", ".join(f"tc {tc}: {ecn}" for tc, ecn in sorted(port.ecn_by_traffic_class.items())) or "none"


def _show_interfaces(session: OnyxCliSession, args: list[str]) -> str:
    switch = session.switch
    blocks = []
    with switch.lock:
        for number in switch.parse_ports(args[0]):
            port = switch.running.ports.get(number, PortConfig())
            blocks.append("\n".join((
                f"Eth1/{number}:",
                f"  Admin state                      : {'Disabled' if port.shutdown else 'Enabled'}",
                "  Operational state                : Up (emulated: there is no real link)",
                f"  Description                      : {port.description or 'N/A'}",
                f"  MTU                              : {port.mtu_bytes} bytes",
                f"  QoS trust mode                   : {port.qos_trust or 'L2'}",
                f"  PFC mode                         : {port.pfc_mode or 'auto'}",
                f"  PFC watchdog                     : {'enabled' if port.pfc_watchdog else 'disabled'}",
                f"  ECN                              : {_ecn_summary(port)}",
            )))
    return "\n\n".join(blocks)


def _show_roce(session: OnyxCliSession, args: list[str]) -> str:
    switch = session.switch
    with switch.lock:
        config = switch.running
        lines = [
            f"RoCE mode                : {config.roce_mode or 'disabled'}",
            f"LLDP                     : {'enabled' if config.lldp else 'disabled'}",
            f"PFC                      : {_pfc_state(config)}",
            f"PFC priorities           : {' '.join(map(str, sorted(config.pfc_priorities))) or 'none'}",
            f"Source                   : {EMULATOR_NAME} summary, not Onyx output",
            "",
            f"{'Port':<9} {'Trust':<6} {'PFC mode':<10} {'PFC-WD':<7} {'MTU':<6} ECN",
        ]
        for number, port in sorted(config.ports.items()):
            lines.append(f"{'Eth1/' + str(number):<9} {port.qos_trust or 'L2':<6} {port.pfc_mode or 'auto':<10} "
                         f"{'on' if port.pfc_watchdog else 'off':<7} {port.mtu_bytes:<6} {_ecn_summary(port)}")
    return "\n".join(lines)


def _pfc_state(config: RunningConfig) -> str:
    if not config.pfc_enable:
        return "disabled"
    return "enabled (force)" if "force" in config.pfc_enable else "enabled"


def _show_pfc(session: OnyxCliSession, args: list[str]) -> str:
    switch = session.switch
    with switch.lock:
        config = switch.running
        enabled = sorted(config.pfc_priorities)
        disabled = [p for p in range(PRIORITY_COUNT) if p not in config.pfc_priorities]
        lines = [
            f"PFC                    : {_pfc_state(config)}",
            f"Priority Enabled List  : {' '.join(map(str, enabled))}",
            f"Priority Disabled List : {' '.join(map(str, disabled))}",
            "",
            "-" * 40,
            f"{'Interface':<12}{'PFC admin':<14}PFC oper",
            "-" * 40,
        ]
        for number in range(1, switch.port_count + 1):
            mode = (config.ports.get(number) or PortConfig()).pfc_mode
            oper = "Enabled" if mode and config.pfc_enable else "Disabled"
            lines.append(f"{'Eth1/' + str(number):<12}{(mode or 'auto').split()[0].capitalize():<14}{oper}")
    return "\n".join(lines)


def _lldp_remote_block(number: int, seen: dict[str, str] | None) -> str:
    """One port's block, as Onyx's manual shows `show lldp interfaces ethernet 1/1 remote`."""
    lines = [f"Ethernet 1/{number}"]
    if seen:
        lines += [
            "Remote Index: 1",
            f"Remote chassis id: {seen['system']} ; chassis id subtype: local",
            f"Remote port-id: {seen['port']}; port id subtype: local",
            f"Remote port description: {seen['port']}",
            f"Remote system name: {seen['system']}",
            "Remote system description: (emulated neighbour)",
        ]
    return "\n".join(lines)


def _show_lldp_remote(session: OnyxCliSession, args: list[str]) -> str:
    """Every port with a neighbour, or the ports named; nothing is learned while LLDP is off."""
    switch = session.switch
    with switch.lock:
        neighbours = switch.lldp_neighbours() if switch.running.lldp else {}
        numbers = switch.parse_ports(args[0]) if args else sorted(neighbours)
    return "\n\n".join(_lldp_remote_block(number, neighbours.get(number)) for number in numbers)


def _build_commands() -> list[Command]:
    table = [
        *commands("enable", frozenset({Mode.USER, Mode.ENABLE}), _enable),
        *commands("disable", frozenset({Mode.ENABLE}), _disable),
        *commands("configure terminal", frozenset({Mode.ENABLE}), _configure_terminal),
        *commands("exit", ANY_MODE, _exit),
        *commands("quit", ANY_MODE, _quit),
        *commands("no cli session paging enable", ANY_MODE, _paging(False)),
        *commands("cli session paging enable", ANY_MODE, _paging(True)),
        *commands("terminal length <int>", ANY_MODE, _terminal_length),
        *commands("terminal width <int>", ANY_MODE, _accept),  # no wrapping is emulated
        *commands("show version", ANY_MODE, _show_version),
        *commands("show interfaces ethernet <ports>", ANY_MODE, _show_interfaces),
        *commands("show running-config", PRIVILEGED, _show_running_config),
        *commands("show lldp interfaces ethernet remote", ANY_MODE, _show_lldp_remote),
        *commands("show lldp interfaces ethernet <ports> remote", ANY_MODE, _show_lldp_remote),
        *commands("show roce", PRIVILEGED, _show_roce),
        *commands("show dcb priority-flow-control", PRIVILEGED, _show_pfc),
        *commands("configuration write", CONFIGURING, _configuration_write),
        *commands("write memory", CONFIGURING, _configuration_write),
        *commands("interface ethernet <ports>", CONFIGURING, _enter_interface),
    ]
    for spec, parse in GLOBAL_SETTINGS:
        table += commands(spec, CONFIGURING, _global_handler(parse))
    for spec, parse in PORT_SETTINGS:
        table += commands(f"interface ethernet <ports> {spec}", CONFIGURING, _port_handler(parse, ports_in_line=True))
        table += commands(spec, frozenset({Mode.INTERFACE}), _port_handler(parse, ports_in_line=False))
    for spec, parse in PORT_RESETS:
        table += commands(f"no interface ethernet <ports> {spec}", CONFIGURING,
                          _port_handler(parse, ports_in_line=True))
        table += commands(f"no {spec}", frozenset({Mode.INTERFACE}), _port_handler(parse, ports_in_line=False))
    return table


COMMANDS_BY_MODE: dict[Mode, list[Command]] = {}
for _command in _build_commands():
    for _mode in _command.modes:
        COMMANDS_BY_MODE.setdefault(_mode, []).append(_command)


# --- one CLI session (no SSH here: the SSH layer feeds it lines) --------------------------

@dataclass(frozen=True, slots=True)
class CommandResult:
    output: str = ""
    logged_out: bool = False


class OnyxCliSession:
    """Mode, prompt and terminal settings of one login; executes one line at a time."""

    def __init__(self, switch: EmulatedSwitch, mode: Mode = Mode.USER):
        self.switch = switch
        self.mode = mode
        self.paging = True
        self.terminal_lines = DEFAULT_TERMINAL_LINES
        self.interface_ports: list[int] = []
        self.interface_label = ""
        self.logged_out = False

    @property
    def prompt(self) -> str:
        suffix = {
            Mode.USER: ">",
            Mode.ENABLE: "#",
            Mode.CONFIG: "(config) #",
            Mode.INTERFACE: f"(config interface ethernet {self.interface_label}) #",
        }[self.mode]
        return f"{self.switch.hostname} [standalone: master] {suffix} "

    @property
    def page_lines(self) -> int | None:
        """Lines per page, or None when output is not paged."""
        return self.terminal_lines - 1 if self.paging and self.terminal_lines > 1 else None

    def execute(self, line: str) -> CommandResult:
        """Run one line; CLI errors come back as output. FaultDisconnect propagates."""
        try:
            tokens = shlex.split(line)
        except ValueError:
            return CommandResult(output="% Unbalanced quotes in command line")
        if not tokens:
            return CommandResult()
        try:
            command, args = resolve(tokens, COMMANDS_BY_MODE[self.mode])
            output = command.run(self, args)
        except CliError as error:
            output = str(error)
        return CommandResult(output=output, logged_out=self.logged_out)


# --- SSH ----------------------------------------------------------------------------------

class _Terminal(asyncssh.SSHServerSession):
    """Character-at-a-time terminal: echo, line editing, pager; lines go to OnyxCliSession."""

    def __init__(self, switch: EmulatedSwitch):
        self._cli = OnyxCliSession(switch)
        self._line: list[str] = []
        self._after_cr = False
        self._escape_state = 0  # 0 none, 1 after ESC, 2 inside an ESC [ sequence
        self._paged_rest: list[str] | None = None
        self._closed = False
        self._chan: asyncssh.SSHServerChannel | None = None

    def connection_made(self, chan: asyncssh.SSHServerChannel) -> None:
        self._chan = chan

    def pty_requested(self, term_type: str, term_size: object, term_modes: object) -> bool:
        return True

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        return False  # Onyx's CLI is interactive only here

    def session_started(self) -> None:
        self._write(BANNER)
        self._write(self._cli.prompt)

    def data_received(self, data: str, datatype: int | None) -> None:
        for char in data:
            if self._closed:
                return
            if self._paged_rest is not None:
                self._pager_key(char)
            elif not self._skip_escape(char):
                self._key(char)

    def _write(self, text: str) -> None:
        assert self._chan is not None
        self._chan.write(text.replace("\n", "\r\n"))

    def _skip_escape(self, char: str) -> bool:
        """Swallow arrow keys and other escape sequences instead of echoing them."""
        if self._escape_state == 1:
            self._escape_state = 2 if char in "[O" else 0
            return True
        if self._escape_state == 2:
            self._escape_state = 0 if "@" <= char <= "~" else 2
            return True
        if char == "\x1b":
            self._escape_state = 1
            return True
        return False

    def _key(self, char: str) -> None:
        if char == "\n" and self._after_cr:  # "\r\n" is one Enter
            self._after_cr = False
            return
        self._after_cr = char == "\r"
        if char in "\r\n":
            self._enter()
        elif char in "\x7f\x08":
            if self._line:
                self._line.pop()
                self._write("\b \b")
        elif char == "\x03":  # Ctrl-C drops the line
            self._line.clear()
            self._write("\n" + self._cli.prompt)
        elif char.isprintable():
            self._line.append(char)
            self._write(char)

    def _enter(self) -> None:
        line, self._line = "".join(self._line), []
        self._write("\n")
        try:
            result = self._cli.execute(line)
        except FaultDisconnect:
            self._closed = True
            assert self._chan is not None
            self._chan.get_extra_info("connection").abort()
            return
        if result.logged_out:
            self._closed = True
            assert self._chan is not None
            self._chan.exit(0)
            return
        if result.output:
            self._show(result.output.rstrip("\n").split("\n"))
        if self._paged_rest is None:
            self._write(self._cli.prompt)

    def _show(self, lines: list[str]) -> None:
        page = self._cli.page_lines
        if page is None or len(lines) <= page:
            self._write("\n".join(lines) + "\n")
            return
        self._write("\n".join(lines[:page]) + "\n" + PAGER_MARKER)
        self._paged_rest = lines[page:]

    def _pager_key(self, char: str) -> None:
        assert self._paged_rest is not None
        if char == "\n" and self._after_cr:  # "\r\n" is one Enter here too
            self._after_cr = False
            return
        self._after_cr = char == "\r"
        self._write("\r" + " " * len(PAGER_MARKER) + "\r")
        page = self._cli.page_lines or 1
        count = 0 if char in "qQ\x03" else 1 if char in "\r\n" else page
        shown, rest = self._paged_rest[:count], self._paged_rest[count:]
        if shown:
            self._write("\n".join(shown) + "\n")
        if rest and count:
            self._paged_rest = rest
            self._write(PAGER_MARKER)
        else:
            self._paged_rest = None
            self._write(self._cli.prompt)


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str | None = None
    authorized_keys: asyncssh.SSHAuthorizedKeys | None = None


class _SshServer(asyncssh.SSHServer):
    """Authenticates the one configured user, by password and/or authorized key."""

    def __init__(self, switch: EmulatedSwitch, credentials: Credentials, connections: set):
        self._switch = switch
        self._credentials = credentials
        self._connections = connections
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        keys = self._credentials.authorized_keys
        if keys is not None and username == self._credentials.username and self._conn is not None:
            self._conn.set_authorized_keys(keys)
        return True  # always authenticate

    def password_auth_supported(self) -> bool:
        return self._credentials.password is not None

    def validate_password(self, username: str, password: str) -> bool:
        expected = self._credentials.password
        return (expected is not None and username == self._credentials.username
                and hmac.compare_digest(password.encode(), expected.encode()))

    def public_key_auth_supported(self) -> bool:
        return self._credentials.authorized_keys is not None

    def session_requested(self) -> _Terminal:
        return _Terminal(self._switch)


def _host_key(state_dir: Path) -> asyncssh.SSHKey:
    path = state_dir / HOST_KEY_FILE
    if path.exists():
        return asyncssh.read_private_key(path)
    key = asyncssh.generate_private_key("ssh-ed25519", comment=f"{EMULATOR_NAME} host key")
    key.write_private_key(path)
    path.chmod(0o600)
    return key


class OnyxEmulator:
    """An emulated Onyx switch (not Onyx) answering SSH on host:port.

    `ports` is the number of Ethernet ports (Eth1/1..Eth1/ports); `port` is the TCP port
    (0 picks a free one; read `.port` after start). Give a password, an authorized_keys
    file, or both.
    """

    def __init__(self, hostname: str, ports: int, state_dir: Path | str, host: str = "127.0.0.1",
                 port: int = 0, username: str = "admin", password: str | None = None,
                 authorized_keys: Path | str | None = None,
                 fail_after_config_lines: int | None = None, fault_mode: FaultMode = "error"):
        if password is None and authorized_keys is None:
            raise ValueError("OnyxEmulator needs a password or an authorized_keys file")
        self.switch = EmulatedSwitch(hostname, ports, Path(state_dir))
        self.host = host
        self.port = port
        keys = asyncssh.read_authorized_keys(str(authorized_keys)) if authorized_keys else None
        self._credentials = Credentials(username, password, keys)
        self._fault = (fail_after_config_lines, fault_mode)
        self._server: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def state_dir(self) -> Path:
        return self.switch.state_dir

    @property
    def running_config_path(self) -> Path:
        return self.switch.running_config_path

    @property
    def saved_config_path(self) -> Path:
        return self.switch.saved_config_path

    def running_config(self) -> str:
        return self.switch.running_config_text()

    def scanned_known_hosts(self) -> Path:
        """A known_hosts holding the host key this emulator presents, read with ssh-keyscan
        (what an inventory's ssh_host_keys would render), kept under state_dir. Call after start."""
        path = self.state_dir / "scanned_known_hosts"
        if not path.is_file():
            found = subprocess.run(["ssh-keyscan", "-p", str(self.port), self.host], capture_output=True, text=True,
                                   timeout=30, check=True, env=tool_environment("ssh-keyscan")).stdout
            if not found.strip():
                raise LabError(f"ssh-keyscan read no host key from the Onyx emulator at {self.host}:{self.port}")
            path.write_text(found)
        return path

    def set_lldp_neighbours(self, neighbours: dict[str, tuple[str, str]]) -> None:
        """Who each port sees over LLDP: {"1/5": ("gpu-1", "fab1")} (an emulator has no cable)."""
        for port in neighbours:
            self.switch.parse_ports(port)
        _atomic_write(self.switch.lldp_neighbours_path, json.dumps(
            {port: {"system": system, "port": far} for port, (system, far) in sorted(neighbours.items())},
            indent=2) + "\n")

    def inject_config_failure(self, after_lines: int | None, mode: FaultMode = "error") -> None:
        """After `after_lines` more accepted configuration lines, refuse the rest
        (`error`: answer with a `%` error; `disconnect`: drop the SSH session). None clears it."""
        self.switch.inject_config_failure(after_lines, mode)

    async def listen(self) -> None:
        """Boot (replay the saved config) and start accepting SSH connections."""
        self.switch.boot()
        self.switch.inject_config_failure(*self._fault)
        self._server = await asyncssh.create_server(
            lambda: _SshServer(self.switch, self._credentials, self._connections),
            self.host, self.port, server_host_keys=[_host_key(self.state_dir)],
            line_editor=False,  # _Terminal echoes and edits itself, as the Onyx CLI does
            server_version="rackform_onyx_emulator")
        self.port = self._server.get_port()
        endpoint = {"host": self.host, "port": self.port, "pid": os.getpid(),
                    "hostname": self.switch.hostname, "emulator": f"{EMULATOR_NAME} ({NOT_ONYX})"}
        _atomic_write(self.state_dir / ENDPOINT_FILE, json.dumps(endpoint, indent=2) + "\n")

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in list(self._connections):
            conn.close()
            await conn.wait_closed()

    def start(self) -> OnyxEmulator:
        """Listen from a background thread's event loop; returns once connections are accepted."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"onyx-emulator-{self.switch.hostname}",
                                        daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.listen(), self._loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self._loop, self._thread = None, None

    def __enter__(self) -> OnyxEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- detached entry point ---------------------------------------------------------------

def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rackform.lab.onyx_emulator",
        description=f"{EMULATOR_NAME}: an SSH server imitating the Onyx switch CLI ({NOT_ONYX}).")
    parser.add_argument("--state-dir", type=Path, required=True, help="running/saved config, host key, endpoint.json")
    parser.add_argument("--hostname", default="switch-emulated")
    parser.add_argument("--ports", type=int, default=32, help="Ethernet port count (Eth1/1..Eth1/N)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: a free one, see endpoint.json)")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password-file", type=Path,
                        help="file holding the password (or set ONYX_EMULATOR_PASSWORD); never on the command line")
    parser.add_argument("--authorized-keys", type=Path, help="OpenSSH authorized_keys file")
    parser.add_argument("--fail-after-config-lines", type=int, help="fault knob: refuse config lines after N")
    parser.add_argument("--fault-mode", choices=("error", "disconnect"), default="error")
    return parser.parse_args(argv)


async def _serve_until_signalled(emulator: OnyxEmulator) -> None:
    await emulator.listen()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"{EMULATOR_NAME} ({NOT_ONYX}): {emulator.switch.hostname} listening on "
          f"{emulator.host}:{emulator.port}", file=sys.stderr, flush=True)
    await stop.wait()
    await emulator.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    password = (args.password_file.read_text(encoding="utf-8").strip() if args.password_file
                else os.environ.get("ONYX_EMULATOR_PASSWORD"))
    try:
        emulator = OnyxEmulator(args.hostname, args.ports, args.state_dir, args.host, args.port, args.username,
                                password, args.authorized_keys, args.fail_after_config_lines, args.fault_mode)
        asyncio.run(_serve_until_signalled(emulator))
    except (ValueError, LabError, OSError) as error:
        print(f"{EMULATOR_NAME}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
