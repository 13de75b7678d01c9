"""Small helpers the checks and their fixtures share: parsing what machines print,
and failure messages that say what differs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Link:
    mtu: int
    up: bool
    """Administratively up with a carrier (flags UP and LOWER_UP)."""
    alias: str


def parse_sysctl_lines(text: str) -> dict[str, str]:
    """`key = value` or `key=value` lines (sysctl's output, /etc/sysctl.d files) -> {key: value}."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if "=" in line and not line.startswith(("#", ";")):
            key, value = line.split("=", 1)
            values[key.strip()] = " ".join(value.split())
    return values


def sysctl_text(value: Any) -> str:
    """A sysctl value from the inventory as the kernel prints it (`1`, `4096 87380 ...`)."""
    if isinstance(value, bool):
        return str(int(value))
    return " ".join(str(value).split())


def mismatches(live: Mapping[str, Any], want: Mapping[str, Any]) -> str:
    """`key: VALUE, want WANT` for each key whose live value differs (or is missing),
    joined with `; `: empty when everything matches. The failure message of a check."""
    return "; ".join(
        f"{key}: {live[key] if key in live else 'missing'}, want {expected}"
        for key, expected in want.items()
        if live.get(key) != expected
    )


def bgp_peer_states(summary_json: str) -> dict[str, str]:
    """Peer -> session state from FRR's `show bgp summary json`, all address families
    merged (an Established session in any of them counts). Unnumbered peers are
    named by their interface (`swp31`). No BGP process, or output that is not JSON
    (`% No BGP process is configured`), gives no peers."""
    try:
        summary = json.loads(summary_json)
    except ValueError:
        return {}
    states: dict[str, str] = {}
    families = summary.values() if isinstance(summary, dict) else ()
    for family in families:
        peers = family.get("peers") if isinstance(family, dict) else None
        for peer, facts in (peers or {}).items():
            if states.get(peer) != "Established":
                states[peer] = facts.get("state", "unknown")
    return states


@dataclass(frozen=True, slots=True)
class CertificateExpiry:
    """One certificate as `kubeadm certs check-expiration -o json` reports it."""

    name: str
    """kubeadm's name: `apiserver`, `etcd-server`, `admin.conf` (the client certificate a kubeconfig embeds)."""
    expires: str
    """The day it expires (UTC, YYYY-MM-DD); empty when missing."""
    days_left: int
    """Whole days until it expires (negative: expired), by the node's clock."""
    authority: bool
    missing: bool


def kubeadm_certificates(output: str) -> list[CertificateExpiry]:
    """kubeadm's CertificateExpirationInfo (output.kubeadm.k8s.io/v1alpha3; residualTime in
    seconds) -> the certificates, then the certificate authorities, in kubeadm's order."""
    info = json.loads(output[output.find("{"):] if "{" in output else output)
    found = []
    for authority, key in ((False, "certificates"), (True, "certificateAuthorities")):
        for item in info.get(key) or ():
            missing = bool(item.get("missing"))
            found.append(CertificateExpiry(
                name=item["name"], expires="" if missing else str(item.get("expirationDate", ""))[:10],
                days_left=0 if missing else int(item.get("residualTime", 0)) // 86400,
                authority=authority, missing=missing))
    return found


def certificate_summary(certificates: list[CertificateExpiry]) -> str:
    """One line: each certificate's expiry and days left, CAs marked, missing ones named."""
    def one(cert: CertificateExpiry) -> str:
        name = f"{cert.name} (CA)" if cert.authority else cert.name
        return f"{name} missing" if cert.missing else f"{name} {cert.expires} ({cert.days_left} d)"
    return ", ".join(one(cert) for cert in certificates)


def certificates_inside(certificates: list[CertificateExpiry], margin_days: int) -> list[str]:
    """The present certificates that expire within `margin_days`, each with its days left. A
    missing one is not counted: kubeadm lists super-admin.conf on every control-plane node but
    writes it only on the first."""
    return [f"{cert.name}: {cert.days_left} days left (expires {cert.expires})" for cert in certificates
            if not cert.missing and cert.days_left < margin_days]
