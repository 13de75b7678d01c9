"""What the day-2 commands ask of BMCs and of the lab's switches, through rackform's own clients."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rackform.ipmi.client import BmcClient
from rackform.ipmi.discovery import neighbour_mac
from rackform.ipmi.fleet import BmcTarget, Fleet, NodeResult


@dataclass(frozen=True, slots=True)
class NewBmc:
    address: str
    serial: str | None
    manufacturer: str | None
    product: str | None
    bmc_mac: str | None
    power: str

    @property
    def fru(self) -> str:
        return " ".join(part for part in (self.manufacturer, self.product) if part)


def read_new_bmc(client: BmcClient) -> NewBmc:
    inventory = client.inventory()
    return NewBmc(client.address, inventory.serial, inventory.manufacturer, inventory.product,
                  client.lan_mac() or neighbour_mac(client.address), client.power_state())


def read_bmcs(fleet: Fleet, targets: Iterable[BmcTarget]) -> list[NodeResult[NewBmc]]:
    return fleet.run(list(targets), read_new_bmc)


def power(fleet: Fleet, targets: Iterable[BmcTarget], action: str, boot: str | None = None) -> list[NodeResult]:
    def act(client: BmcClient):
        if boot is not None:
            client.set_boot_device(boot)
        return client.set_power(action)

    return fleet.run(list(targets), act)


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 2.0):
    """The first truthy value of `predicate` within `timeout_s`, else None."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)
