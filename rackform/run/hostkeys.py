"""Machines' SSH host keys as they present them now: ssh-keyscan, fingerprints, comparison.

`ssh-keyscan` asks for the keys without logging in and without a prompt; each key it prints
is checked with the same rule the rendered known_hosts applies (rackform.render.known_hosts),
so what is recorded always renders. Fingerprints are OpenSSH's (`ssh-keygen -lf`): SHA-256 of
the key blob, base64 without padding, with the key's size and type, so an operator can hold
them against what the machine's console shows.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rackform.process_environment import tool_environment
from rackform.render.known_hosts import key_problem

KEYSCAN_TYPES = "ed25519,ecdsa,rsa"
"""What is asked for: each type is one connection, so the slowest case is three timeouts."""
TYPE_ORDER = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")
"""Order keys are recorded in, so a second scan writes the same list."""
_DISPLAY = {  # key type -> (ssh-keygen's name, size in bits where the type fixes it)
    "ssh-ed25519": ("ED25519", 256),
    "ecdsa-sha2-nistp256": ("ECDSA", 256),
    "ecdsa-sha2-nistp384": ("ECDSA", 384),
    "ecdsa-sha2-nistp521": ("ECDSA", 521),
    "ssh-rsa": ("RSA", None),
    "sk-ssh-ed25519@openssh.com": ("ED25519-SK", 256),
    "sk-ecdsa-sha2-nistp256@openssh.com": ("ECDSA-SK", 256),
}


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True, slots=True)
class Scan:
    target: Target
    keys: tuple[str, ...]
    """`TYPE BASE64`, in TYPE_ORDER; empty when the machine did not answer."""
    error: str | None = None


def keyscan_argv(target: Target, timeout_s: int) -> list[str]:
    return ["ssh-keyscan", "-T", str(timeout_s), "-t", KEYSCAN_TYPES, "-p", str(target.port), target.address]


def _order(key: str) -> tuple[int, str]:
    kind = key.split()[0]
    return (TYPE_ORDER.index(kind) if kind in TYPE_ORDER else len(TYPE_ORDER), key)


def scan_one(target: Target, timeout_s: int) -> Scan:
    argv = keyscan_argv(target, timeout_s)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
                              env=tool_environment("ssh-keyscan"),
                              timeout=3 * timeout_s + 5)
    except subprocess.TimeoutExpired:
        return Scan(target, (), f"ssh-keyscan gave no answer within {3 * timeout_s + 5} s")
    keys = set()
    for line in done.stdout.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        key = " ".join(fields[1:3])
        problem = key_problem(key)
        if problem:
            return Scan(target, (), f"ssh-keyscan printed a key rackform cannot record: {problem}")
        keys.add(key)
    if not keys:
        said = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("#")]
        return Scan(target, (), said[-1].strip() if said else _why_silent(target, timeout_s))
    return Scan(target, tuple(sorted(keys, key=_order)))


def _why_silent(target: Target, timeout_s: int) -> str:
    """ssh-keyscan says nothing about a machine it could not scan: one TCP connect tells the
    operator whether anything listens there."""
    try:
        with socket.create_connection((target.address, target.port), timeout=timeout_s):
            return f"port {target.port} accepts connections but no SSH host key came back within {timeout_s} s"
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on port {target.port}"
    except TimeoutError:
        return f"no answer within {timeout_s} s"
    except OSError as error:
        return error.strerror or str(error)


def scan(targets: list[Target], *, timeout_s: int, parallel: int) -> list[Scan]:
    """Each target's keys, in the order given; at most `parallel` scans at a time."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        return list(pool.map(lambda target: scan_one(target, timeout_s), targets))


def fingerprint(key: str) -> str:
    """`256 SHA256:... (ED25519)`, as `ssh-keygen -lf` prints it (without the comment)."""
    kind, blob = key.split()[:2]
    raw = base64.b64decode(blob)
    digest = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    name, bits = _DISPLAY.get(kind, (kind, None))
    if bits is None and kind == "ssh-rsa":
        bits = _rsa_bits(raw)
    return f"{bits or '?'} SHA256:{digest} ({name})"


def _rsa_bits(raw: bytes) -> int:
    """Size of the modulus: the blob is string type, mpint e, mpint n (RFC 4253 6.6)."""
    offset = 0
    fields = []
    for _ in range(3):
        (length,) = struct.unpack(">I", raw[offset:offset + 4])
        fields.append(raw[offset + 4:offset + 4 + length])
        offset += 4 + length
    return int.from_bytes(fields[2], "big").bit_length()


def changed(recorded: list[str], presented: tuple[str, ...]) -> bool:
    """True when ssh would see a different machine: a recorded type now shows another key, or
    none of the recorded keys is presented. A type the machine adds is no change (ssh prefers
    the types it knows)."""
    recorded_keys = {" ".join(key.split()[:2]) for key in recorded}
    if not recorded_keys & set(presented):
        return True
    now = {key.split()[0]: key for key in presented}
    return any(key.split()[0] in now and now[key.split()[0]] != key for key in recorded_keys)
