"""`address_text`: an IPv4 address or interface as `str()` writes it, without ipaddress's Python.

`str(IPv4Address)` joins the four octets in Python (about 1 us); a 10,000-node site's
host_vars write some 50,000 addresses. `socket.inet_ntoa` writes the same dotted quad
(decimal octets, no leading zeros) in C. Anything but a plain IPv4Address or IPv4Interface
(a subclass might write itself otherwise) goes through `str()`.
tests/unit/test_address_text.py holds both to the same text.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface
from socket import inet_ntoa


def address_text(value: object) -> str:
    kind = type(value)
    if kind is IPv4Address:
        return inet_ntoa(int(value).to_bytes(4, "big"))  # type: ignore[call-overload]
    if kind is IPv4Interface:
        return f"{inet_ntoa(int(value).to_bytes(4, 'big'))}/{value.network.prefixlen}"  # type: ignore[attr-defined, call-overload]
    return str(value)
