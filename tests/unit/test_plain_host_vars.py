"""rackform.model.plain_host_vars: the values pydantic gives, or None where it must decide."""

from __future__ import annotations

import random
from ipaddress import IPv4Address, IPv4Interface

import pytest

from rackform.model.plain_host_vars import PlainFabricPort, PlainHostVars, plain_host_vars
from rackform.model.schema import FabricPort
from rackform.model.schema import HostVars
from rackform.model.source import VaultValue

PLAIN = {
    "management_address": "10.0.1.98",
    "management_mac": "02:00:00:00:00:62",
    "bmc_address": "10.1.1.98",
    "bmc_mac": "02:01:00:00:00:62",
    "serial": "SN-CMP-0001-N1",
    "fabric_ports": {
        "fab0": {"mac": "02:10:00:00:00:62", "address": "10.128.1.98/16"},
        "fab1": {"address": "10.129.1.98/31"},
        "fab2": {"mac": "0a:bb:cc:dd:ee:ff"},
        "fab3": {},
    },
}


def _fields(values) -> tuple:
    """Every field as (type, value), fabric ports by name: what the loader copies onto a host."""
    ports = {name: ((type(port.mac), port.mac), (type(port.address), port.address))
             for name, port in values.fabric_ports.items()}
    plain = (values.management_address, values.management_mac, values.bmc_address, values.bmc_mac, values.serial)
    return tuple((type(value), value) for value in plain), ports


def _same_as_pydantic(data: dict) -> None:
    fast = plain_host_vars(data)
    assert fast is not None
    assert _fields(fast) == _fields(HostVars.model_validate(data))
    for port, checked in zip(fast.fabric_ports.values(), HostVars.model_validate(data).fabric_ports.values()):
        if checked.address is not None:  # the interface's network and text too, not only equality
            assert (port.address.network, str(port.address), hash(port.address)) == (
                checked.address.network, str(checked.address), hash(checked.address))


def test_the_plain_spelling_gives_pydantics_values():
    _same_as_pydantic(PLAIN)
    _same_as_pydantic({"management_address": "192.168.0.1"})  # a switch: the rest left out
    _same_as_pydantic({**PLAIN, "management_mac": None, "bmc_address": None, "serial": None, "fabric_ports": {}})


def test_addresses_at_every_octet_edge_match_ipaddress():
    rng = random.Random(26)
    octets = [0, 1, 9, 10, 99, 100, 199, 200, 249, 250, 254, 255]
    for _ in range(500):
        quad = ".".join(str(rng.choice(octets + [rng.randrange(256)])) for _ in range(4))
        length = rng.randrange(33)
        fast = plain_host_vars({"management_address": quad, "fabric_ports": {"p": {"address": f"{quad}/{length}"}}})
        assert fast is not None
        assert fast.management_address == IPv4Address(quad)
        assert fast.fabric_ports["p"].address == IPv4Interface(f"{quad}/{length}")
        assert fast.fabric_ports["p"].address.network == IPv4Interface(f"{quad}/{length}").network


@pytest.mark.parametrize("change", [
    {"management_address": "010.0.1.98"},  # a leading zero: ipaddress refuses it
    {"management_address": "10.0.1.256"},
    {"management_address": " 10.0.1.98"},
    {"management_address": "10.0.1"},
    {"management_address": 167772161},  # a number: pydantic decides
    {"management_address": None},
    {"bmc_address": "10.1.1.98/24"},
    {"management_mac": "02:AA:00:00:00:62"},  # other MAC spellings: pydantic normalises them
    {"management_mac": "02-00-00-00-00-62"},
    {"bmc_mac": "0200.0000.0062"},
    {"bmc_mac": " 02:01:00:00:00:62"},
    {"bmc_mac": 12},
    {"serial": 1234},
    {"serial": VaultValue("$ANSIBLE_VAULT;1.1;AES256\n6162")},
    {"fabric_ports": None},
    {"fabric_ports": {"fab0": None}},
    {"fabric_ports": {"fab0": {"address": "10.128.1.98/016"}}},  # ipaddress reads 016 as 16: pydantic's call
    {"fabric_ports": {"fab0": {"address": "10.128.1.98/255.255.0.0"}}},
    {"fabric_ports": {"fab0": {"address": "10.128.1.98/33"}}},
    {"fabric_ports": {"fab0": {"address": "10.128.1.98"}}},
    {"fabric_ports": {"fab0": {"speed": 25}}},
    {"fabric_ports": {1: {"address": "10.128.1.98/16"}}},
    {"ansible_port": 22},  # a pass-through variable: the keys are sorted out first
])
def test_any_other_spelling_is_left_to_pydantic(change):
    assert plain_host_vars({**PLAIN, **change}) is None


def test_a_missing_management_address_is_left_to_pydantic():
    assert plain_host_vars({key: value for key, value in PLAIN.items() if key != "management_address"}) is None


def test_the_plain_values_have_every_field_of_the_schemas():
    assert set(PlainHostVars._fields) == set(HostVars.model_fields)
    assert set(PlainFabricPort._fields) == set(FabricPort.model_fields)
