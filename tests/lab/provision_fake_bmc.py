"""A BMC that offers only what rackform must refuse: IPMI 1.5 alone, or cipher suite 0 alone.

ipmi_sim always offers IPMI 2.0 with suites 0-14, so the refusal tests need a BMC it
cannot be: this one answers the two session-less questions rackform asks before any
login (Get Channel Authentication Capabilities, Get Channel Cipher Suites) and turns
down every RMCP+ Open Session request ("no cipher suite match"). It knows no user and
stores no password. Standard library only; run it inside a lab BMC's network namespace:

    nsenter --net=/run/netns/NS python3 provision_fake_bmc.py --address 10.61.1.18 --mode suite0

Modes: `suite0` (IPMI 2.0, lists suite 0 only), `ipmi15` (IPMI 1.5 only, MD5),
`silent-list` (IPMI 2.0, does not list its suites, refuses suites 17 and 3 at login).
Each request is logged to stdout as one word (auth-capabilities, cipher-suites,
open-session, ...), so a test can tell whether a login was even tried.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading

RMCP_HEADER = bytes([0x06, 0x00, 0xFF, 0x07])
NETFN_APP_RESPONSE = 0x07
PAYLOAD_OPEN_SESSION_REQUEST = 0x10
PAYLOAD_OPEN_SESSION_RESPONSE = 0x11
NO_CIPHER_SUITE_MATCH = 0x11
SUITE_ZERO_RECORD = bytes([0xC0, 0x00, 0x00, 0x40, 0x80])  # suite 0: no auth, no integrity, no confidentiality
MODES = ("suite0", "ipmi15", "silent-list")


def _checksum(data: bytes) -> int:
    return (-sum(data)) & 0xFF


def _response(request: bytes, completion_code: int, data: bytes) -> bytes:
    """The IPMI 1.5 session-less response to the request message in `request`."""
    message = request[14:14 + request[13]]
    requester, sequence_lun, command = message[3], message[4], message[5]
    header = bytes([requester, NETFN_APP_RESPONSE << 2 | (sequence_lun & 0x03)])
    body = bytes([0x20, sequence_lun & 0xFC, command, completion_code]) + data
    reply = header + bytes([_checksum(header)]) + body + bytes([_checksum(body)])
    return RMCP_HEADER + bytes([0x00]) + bytes(8) + bytes([len(reply)]) + reply


def request_kind(packet: bytes) -> str:
    """A word for the log: what the client asked."""
    if len(packet) > 5 and packet[4] == 0x06 and packet[5] & 0x3F == PAYLOAD_OPEN_SESSION_REQUEST:
        return "open-session"
    if len(packet) > 19 and packet[4] == 0x00:
        return {0x38: "auth-capabilities", 0x54: "cipher-suites"}.get(packet[19], f"command-{packet[19]:#x}")
    return "other"


def answer(packet: bytes, mode: str) -> bytes | None:
    """What this BMC sends back to one packet, or None."""
    if len(packet) < 16 or packet[:4] != RMCP_HEADER:
        return None
    if packet[4] == 0x06 and packet[5] & 0x3F == PAYLOAD_OPEN_SESSION_REQUEST and mode != "ipmi15":
        tag = packet[16]
        console_session = packet[20:24]
        payload = bytes([tag, NO_CIPHER_SUITE_MATCH, 0x00, 0x00]) + console_session + bytes(4)
        return (RMCP_HEADER + bytes([0x06, PAYLOAD_OPEN_SESSION_RESPONSE]) + bytes(8)
                + len(payload).to_bytes(2, "little") + payload)
    if packet[4] != 0x00 or len(packet) < 20:
        return None  # only IPMI 1.5 session-less requests from here on
    command = packet[14 + 5]
    if command == 0x38:  # Get Channel Authentication Capabilities
        if mode == "ipmi15":
            return _response(packet, 0x00, bytes([0x01, 0x04, 0x04, 0x00, 0, 0, 0, 0]))  # MD5, no 2.0 bit
        return _response(packet, 0x00, bytes([0x01, 0x80, 0x04, 0x02, 0, 0, 0, 0]))  # IPMI 2.0 only
    if command == 0x54:  # Get Channel Cipher Suites
        if mode == "suite0":
            return _response(packet, 0x00, bytes([0x01]) + SUITE_ZERO_RECORD)
        return _response(packet, 0xC1, b"")  # "invalid command": the list is not offered
    return _response(packet, 0xC1, b"")


class FakeBmc:
    """Serves `answer` on a UDP socket in a thread; `stop()` ends it."""

    def __init__(self, address: str, port: int, mode: str, log=None):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
        self.mode = mode
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self.log = log
        self._running = True
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> FakeBmc:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while self._running:
            try:
                packet, peer = self.sock.recvfrom(1024)
            except socket.timeout:
                continue
            except OSError:
                return
            kind = request_kind(packet)
            self.requests.append(kind)
            if self.log is not None:
                print(kind, file=self.log, flush=True)
            reply = answer(packet, self.mode)
            if reply is not None:
                self.sock.sendto(reply, peer)

    def stop(self) -> None:
        self._running = False
        self._thread.join(timeout=2)
        self.sock.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, default=623)
    parser.add_argument("--mode", choices=MODES, required=True)
    args = parser.parse_args(argv)
    bmc = FakeBmc(args.address, args.port, args.mode, log=sys.stdout).start()
    print(f"listening on {args.address}:{bmc.port} ({args.mode})", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        bmc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
