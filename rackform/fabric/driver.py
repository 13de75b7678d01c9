"""The one interface every switch OS driver implements, and what it passes around.

    driver = driver_class(switch_os)(connection)
    desired = driver.render(context)       # from the site: part name -> text
    running = driver.running()             # read from the switch, same parts
    change = driver.diff(desired, running) # what would change, for people and for apply
    driver.apply(change)                   # rolls back to `running` if it fails part-way
    driver.save()                          # make it survive a reboot

A configuration is a mapping of part name -> text: one part per file on a
Cumulus switch, one part (`running-config`) on an Onyx switch. Drivers are looked
up by switch OS in `rackform.fabric.dispatch`, as netmiko looks up platforms.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar

Config = dict[str, str]
"""Part name -> text (Cumulus: path on the switch -> file content; Onyx: `running-config` -> CLI lines)."""


class FabricError(Exception):
    """A switch could not be configured as designed; the message says which switch and why."""


class UnsupportedSwitchOs(FabricError):
    """No driver for the switch OS; the message lists the supported ones."""


class ApplyFailed(FabricError):
    """Applying a diff failed part-way; `rolled_back` says whether the previous configuration is back."""

    def __init__(self, message: str, *, rolled_back: bool):
        super().__init__(message)
        self.rolled_back = rolled_back


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach a switch over SSH. Secrets stay out of repr and never reach a file."""

    host: str
    username: str
    port: int = 22
    password: str | None = field(default=None, repr=False)
    key_file: str | None = None
    known_hosts: str | None = None
    """OpenSSH known_hosts to check the switch's host key against (None: accept it, as the
    emitted project's `host_key_checking = False` does)."""
    become: bool = False
    """Run commands through `sudo -n` (a Cumulus login that is not root)."""
    timeout_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ConfigDiff:
    """What applying `desired` over `running` changes on one switch."""

    switch: str
    desired: Config
    running: Config
    """The configuration the diff was computed against: what a failed apply restores."""
    changes: tuple[Any, ...]
    """What `apply` acts on, in the driver's terms (CLI lines, files to write)."""
    text: str
    """The difference for people: `-`/`+` lines, or a unified diff per file."""
    notes: tuple[str, ...] = ()
    """What a person must know beyond the diff (a setting written but not applied)."""

    @property
    def empty(self) -> bool:
        return not self.changes


class SwitchDriver(ABC):
    """One switch OS. Subclasses set `os_name` and implement the five steps."""

    os_name: ClassVar[str]
    transport: ClassVar[str]
    """How configuration reaches the switch, for people (`netmiko mellanox_mlnxos`, `files over SSH`)."""

    def __init__(self, connection: Connection, name: str | None = None):
        self.connection = connection
        self.name = name or connection.host
        """The switch's name in the site, for messages."""

    @abstractmethod
    def render(self, context: Mapping[str, Any]) -> Config:
        """The desired configuration of the switch whose variables are `context`."""

    @abstractmethod
    def running(self) -> Config:
        """What the switch runs now, as the same parts `render` returns."""

    @abstractmethod
    def diff(self, desired: Config, running: Config) -> ConfigDiff:
        """The changes that make `running` into `desired` (empty when they match)."""

    @abstractmethod
    def apply(self, diff: ConfigDiff) -> list[str]:
        """Apply the changes; on failure restore `diff.running` and raise ApplyFailed.

        Returns notes for people (what was applied, what could not be).
        """

    @abstractmethod
    def save(self) -> str:
        """Make the running configuration the one the switch boots with; says how, for people."""

    def close(self) -> None:
        """Drop the connection, if one is open."""

    def __enter__(self) -> SwitchDriver:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
