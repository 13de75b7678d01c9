"""Bring one switch to its desired configuration: read, show the difference, apply, save.

The same steps serve `rackform fabric apply` and the Pulumi SwitchConfig resource.
A switch that already runs its configuration is not touched (nothing is pushed,
nothing saved).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rackform.fabric.driver import Config, ConfigDiff, SwitchDriver

Show = Callable[[str], None]


@dataclass(slots=True)
class SyncResult:
    switch: str
    os: str
    diff: ConfigDiff
    applied: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        """The switch ran its desired configuration before (nothing to do)."""
        return self.diff.empty


def diff_report(driver: SwitchDriver, change: ConfigDiff) -> str:
    """What a person reads before anything is applied."""
    if change.empty:
        return f"{change.switch}: runs its designed configuration; nothing to change"
    header = f"{change.switch} ({driver.os_name}, {driver.transport}): {len(change.changes)} change(s)"
    return "\n".join([header, change.text, *change.notes]).rstrip()


def sync(driver: SwitchDriver, desired: Config, *, dry_run: bool = False, show: Show = print) -> SyncResult:
    """Show the difference between `desired` and what the switch runs; unless `dry_run`,
    apply it (ApplyFailed when that fails: the driver has restored what it could) and save."""
    change = driver.diff(desired, driver.running())
    show(diff_report(driver, change))
    result = SyncResult(driver.name, driver.os_name, change)
    if change.empty or dry_run:
        return result
    result.notes = driver.apply(change)
    result.notes.append(driver.save())
    result.applied = True
    for note in result.notes:
        show(note)
    return result
