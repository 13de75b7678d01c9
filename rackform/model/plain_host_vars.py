"""`plain_host_vars`: a host's facts in the one plain spelling, read without pydantic.

Validating `schema.HostVars` with pydantic cost about 75 us per host (most of it
`ipaddress` parsing the addresses from text), a third of loading a 10,000-node site.
Nearly every host_vars file spells its facts one way: dotted-quad addresses, MACs in the
stored form (`aa:bb:cc:dd:ee:ff`), a string serial, fabric ports as mappings of those.
For exactly that spelling this module builds the same values directly: an address from
its four octets as an integer (what `ipaddress` makes of the text, in a tenth of the time).

Anything else (a missing or unknown key, another MAC spelling, an address `ipaddress`
would read differently or refuse, a leading zero, a `!vault` value, a number) returns
None, and the caller validates with pydantic as before: its values, its errors.
`tests/unit/test_plain_host_vars.py` holds both to the same answers.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Interface
from socket import inet_aton
from typing import Any, NamedTuple

from rackform.model.schema import HostVars

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_QUAD = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}")
"""Four decimal octets up to 255, no leading zero, nothing around them: what `ipaddress` reads
as exactly these octets. Other spellings it may accept or refuse are left to pydantic."""
_QUAD_PREFIX = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}/(?:3[0-2]|[12][0-9]|[0-9])")
"""A quad and a prefix length of 0-32 without a leading zero (not a netmask)."""
_STORED_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
"""The form `schema.normalise_mac` stores, which it returns as it is."""

_HOST_KEYS = frozenset(HostVars.model_fields)
_PORT_KEYS = frozenset(("mac", "address"))


class PlainFabricPort(NamedTuple):
    mac: str | None
    address: IPv4Interface | None


class PlainHostVars(NamedTuple):
    """The fields of `schema.HostVars`, with the values pydantic would give them."""

    management_address: IPv4Address
    management_mac: str | None
    bmc_address: IPv4Address | None
    bmc_mac: str | None
    serial: str | None
    fabric_ports: dict[str, PlainFabricPort]


def _address(value: Any) -> IPv4Address | None:
    if type(value) is not str or _QUAD.fullmatch(value) is None:
        return None
    # inet_aton of a strict quad is its four octets: the integer ipaddress reads from the text.
    return IPv4Address(int.from_bytes(inet_aton(value)))


def _interface(value: Any) -> IPv4Interface | None:
    if type(value) is not str or _QUAD_PREFIX.fullmatch(value) is None:
        return None
    quad, _, length = value.partition("/")
    return IPv4Interface((int.from_bytes(inet_aton(quad)), int(length)))


def _mac(value: Any) -> bool:
    return type(value) is str and _STORED_MAC.fullmatch(value) is not None


class _NotPlain(Exception):
    """A value outside the plain spelling: pydantic decides."""


def _optional(value: Any, read) -> Any:
    if value is None:
        return None
    result = read(value)
    if result is None:
        raise _NotPlain
    return result


def _optional_mac(value: Any) -> str | None:
    if value is None or _mac(value):
        return value
    raise _NotPlain


def _fabric_ports(value: Any) -> dict[str, PlainFabricPort]:
    if not isinstance(value, dict):
        raise _NotPlain
    ports: dict[str, PlainFabricPort] = {}
    for name, port in value.items():
        if type(name) is not str or not isinstance(port, dict) or not _PORT_KEYS.issuperset(port):
            raise _NotPlain
        ports[name] = PlainFabricPort(_optional_mac(port.get("mac")), _optional(port.get("address"), _interface))
    return ports


_SAME_FIELDS = set(PlainHostVars._fields) == _HOST_KEYS
"""A field added to HostVars and not here leaves every host to pydantic (and fails a unit test)."""


def plain_host_vars(data: dict) -> PlainHostVars | None:
    """`schema.HostVars.model_validate(data)`'s values when `data` is in the plain spelling, else None."""
    if not _SAME_FIELDS or not _HOST_KEYS.issuperset(data):
        return None
    management_address = _address(data.get("management_address"))
    if management_address is None:
        return None
    serial = data.get("serial")
    if serial is not None and type(serial) is not str:
        return None
    try:
        return PlainHostVars(
            management_address=management_address,
            management_mac=_optional_mac(data.get("management_mac")),
            bmc_address=_optional(data.get("bmc_address"), _address),
            bmc_mac=_optional_mac(data.get("bmc_mac")),
            serial=serial,
            fabric_ports=_fabric_ports(data["fabric_ports"]) if "fabric_ports" in data else {},
        )
    except _NotPlain:
        return None
