"""Find BMCs on an out-of-band address range and read what identifies them.

`sweep` sends one sessionless Get Channel Authentication Capabilities to every address
from a single socket and collects the answers (resending to the silent ones): the cost is
a few reply timeouts whatever the range's size, with no credential on the wire. `identify`
then logs in to each answering BMC (through the Fleet, so retries and the one-command-
per-BMC rule hold) and reads its serial (FRU, where offered), MAC, firmware and device id.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import select
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rackform.ipmi import prelogin, wire
from rackform.ipmi.client import BmcClient
from rackform.ipmi.errors import IpmiError, ipmi15_only
from rackform.ipmi.fleet import BmcTarget, Fleet, NodeResult
from rackform.ipmi.session import IPMI_PORT, Timeouts

MAX_SWEEP_ADDRESSES = 4096
"""A /20 at most per scan: an OOB range is a rack row, not the internet."""
ARP_TABLE = Path("/proc/net/arp")


class RangeError(ValueError):
    """An address range that cannot be scanned (malformed, too large, outside the OOB network)."""


def parse_range(text: str, within: ipaddress.IPv4Network | None = None) -> list[ipaddress.IPv4Address]:
    """Addresses of `10.0.1.0/24`, `10.0.1.10-10.0.1.50`, `10.0.1.10-50` or one address.

    A network's own and broadcast addresses are left out; every address must lie in
    `within` (the site's OOB network) when given.
    """
    text = text.strip()
    try:
        if "/" in text:
            network = ipaddress.IPv4Network(text, strict=False)
            if network.num_addresses > MAX_SWEEP_ADDRESSES + 2:
                raise RangeError(f"range {text!r} has {network.num_addresses} addresses; scan at most "
                                 f"{MAX_SWEEP_ADDRESSES} at once")
            addresses = list(network.hosts()) if network.prefixlen < 31 else list(network)
        elif "-" in text:
            first_text, last_text = (part.strip() for part in text.split("-", 1))
            first = ipaddress.IPv4Address(first_text)
            last = (ipaddress.IPv4Address(last_text) if "." in last_text
                    else ipaddress.IPv4Address(f"{first_text.rsplit('.', 1)[0]}.{last_text}"))
            if last < first:
                raise RangeError(f"range {text!r} ends before it starts")
            if int(last) - int(first) + 1 > MAX_SWEEP_ADDRESSES:
                raise RangeError(f"range {text!r} has more than {MAX_SWEEP_ADDRESSES} addresses")
            addresses = [ipaddress.IPv4Address(n) for n in range(int(first), int(last) + 1)]
        else:
            addresses = [ipaddress.IPv4Address(text)]
    except ValueError as error:
        if isinstance(error, RangeError):
            raise
        raise RangeError(f"{text!r} is not an address range ({error}); use a.b.c.d/nn, a.b.c.d-a.b.c.e "
                         f"or a.b.c.d-e") from None
    if len(addresses) > MAX_SWEEP_ADDRESSES:
        raise RangeError(f"range {text!r} has {len(addresses)} addresses; scan at most {MAX_SWEEP_ADDRESSES} at once")
    if within is not None:
        outside = [address for address in addresses if address not in within]
        if outside:
            raise RangeError(f"{outside[0]} is outside the site's OOB network {within}: discovery scans the "
                             f"out-of-band network only")
    return addresses


@dataclass(frozen=True, slots=True)
class SweepAnswer:
    address: str
    capabilities: prelogin.AuthCapabilities | None
    """None when the answer was an IPMI error (the BMC is there but refused the question)."""


def sweep(addresses: Iterable[ipaddress.IPv4Address | str], *, port: int = IPMI_PORT,
          timeouts: Timeouts = Timeouts(), send_gap_s: float = 0.0005) -> dict[str, SweepAnswer]:
    """Who answers IPMI at these addresses: one socket, every address asked at once, silent ones again."""
    pending = {str(address) for address in addresses}
    answers: dict[str, SweepAnswer] = {}
    datagram = prelogin.auth_capabilities_request(wire.PRIVILEGE_ADMIN)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for _ in range(1 + timeouts.resends):
            if not pending:
                break
            for address in sorted(pending, key=lambda a: ipaddress.IPv4Address(a)):
                try:
                    sock.sendto(datagram, (address, port))
                except OSError:
                    pass  # no route to it: it stays silent
                if send_gap_s:
                    time.sleep(send_gap_s)  # pace the ARP requests a sweep sets off
            deadline = time.monotonic() + timeouts.reply_s
            while pending and (left := deadline - time.monotonic()) > 0:
                readable, _, _ = select.select([sock], [], [], left)
                if not readable:
                    break
                _drain(sock, pending, answers)
    return answers


def _drain(sock: socket.socket, pending: set[str], answers: dict[str, SweepAnswer]) -> None:
    while True:
        try:
            reply, (address, _port) = sock.recvfrom(1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            continue  # an ICMP error for one address: it is simply not a BMC
        if address not in pending:
            continue
        answer = prelogin.response_data(reply, prelogin.CMD_GET_CHANNEL_AUTH_CAPABILITIES)
        if answer is None:
            continue
        code, data = answer
        capabilities = None
        if code == 0:
            try:
                capabilities = prelogin.parse_auth_capabilities(data)
            except ValueError:
                pass
        answers[address] = SweepAnswer(address, capabilities)
        pending.discard(address)


@dataclass(frozen=True, slots=True)
class BmcFacts:
    """What a freshly found BMC tells about itself."""

    address: str
    serial: str | None
    product: str | None
    manufacturer_id: int
    product_id: int
    firmware: str
    bmc_mac: str | None
    guid: str | None


GET_DEVICE_GUID = (0x06, 0x08)


def read_facts(client: BmcClient) -> BmcFacts:
    device = client.device_id()
    inventory = client.inventory()
    return BmcFacts(address=client.address, serial=inventory.serial, product=inventory.product,
                    manufacturer_id=device.manufacturer_id, product_id=device.product_id, firmware=device.firmware,
                    bmc_mac=client.lan_mac() or neighbour_mac(client.address), guid=_device_guid(client))


def _device_guid(client: BmcClient) -> str | None:
    response = client.session.request(*GET_DEVICE_GUID)
    if response.completion_code or len(response.data) != 16:
        return None
    return response.data[::-1].hex()  # sent least significant byte first


def neighbour_mac(address: str, arp_table: Path = ARP_TABLE) -> str | None:
    """The MAC this machine's neighbour table holds for an on-link address (after talking to it)."""
    try:
        lines = arp_table.read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[0] == address and fields[2] != "0x0":
            mac = fields[3].lower()
            return None if mac == "00:00:00:00:00:00" else mac
    return None


def identify(fleet: Fleet, addresses: Iterable[str]) -> list[NodeResult[BmcFacts]]:
    """Log in to each address (the fleet's credentials, asked for by address) and read its facts."""
    results = fleet.run([BmcTarget(address, address) for address in addresses], read_facts)
    # The facts are filed under the address that was scanned.
    return [dataclasses.replace(result, value=dataclasses.replace(result.value, address=result.address))
            if result.ok else result for result in results]


def refusal(answer: SweepAnswer) -> IpmiError | None:
    """Why a swept BMC will not be logged in to (IPMI 1.5 only), or None."""
    if answer.capabilities is not None and not answer.capabilities.ipmi20:
        return ipmi15_only(answer.address)
    return None
