"""Switch OS -> configuration driver, as netmiko's dispatcher maps platforms to classes."""

from __future__ import annotations

from rackform.fabric.cumulus import CumulusDriver
from rackform.fabric.driver import Connection, SwitchDriver, UnsupportedSwitchOs
from rackform.fabric.onyx import OnyxDriver

DRIVERS: dict[str, type[SwitchDriver]] = {driver.os_name: driver for driver in (CumulusDriver, OnyxDriver)}


def driver_class(switch_os: str) -> type[SwitchDriver]:
    try:
        return DRIVERS[switch_os]
    except KeyError:
        raise UnsupportedSwitchOs(
            f"no configuration driver for switch OS '{switch_os}'; supported: {', '.join(sorted(DRIVERS))}"
        ) from None


def connect(switch_os: str, connection: Connection, name: str | None = None) -> SwitchDriver:
    """A driver for the switch OS, bound to one switch (it logs in on first use)."""
    return driver_class(switch_os)(connection, name)
