"""rackform.render.address_text writes what str() writes."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from rackform.render.address_text import address_text


def test_addresses_and_interfaces_read_as_str_writes_them():
    rng = random.Random(26)
    edges = [0, 1, 9, 10, 99, 100, 127, 128, 199, 200, 254, 255]
    for _ in range(2000):
        number = int.from_bytes(bytes(rng.choice(edges + [rng.randrange(256)]) for _ in range(4)), "big")
        assert address_text(IPv4Address(number)) == str(IPv4Address(number))
        interface = IPv4Interface((number, rng.randrange(33)))
        assert address_text(interface) == str(interface)
    assert address_text(IPv4Address("0.0.0.0")) == "0.0.0.0"
    assert address_text(IPv4Interface("255.255.255.255/32")) == "255.255.255.255/32"


class _Shown(IPv4Address):
    def __str__(self) -> str:
        return "shown its own way"


def test_anything_else_is_str():
    assert address_text(_Shown("10.0.0.1")) == "shown its own way"
    assert address_text(IPv4Network("10.0.0.0/8")) == "10.0.0.0/8"
    assert address_text("10.0.0.1") == "10.0.0.1"
