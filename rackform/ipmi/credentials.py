"""BMC credentials and where they come from.

A fleet operation asks a *credential source* for each node's login: any callable
`(node name) -> Credentials`. Rotated per-BMC passwords come from the site's secret store
(rackform.secrets); a factory-state site uses `factory_credentials()`. The password is
kept out of every repr, str and log line: printing a Credentials shows the user only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

FACTORY_USER = "ADMIN"
FACTORY_PASSWORD = "ADMIN"  # the well-known factory default (public knowledge, not a secret)
MAX_NAME_BYTES = 16
MAX_PASSWORD_BYTES = 20  # IPMI 2.0 passwords are at most 20 bytes
IPMI15_PASSWORD_BYTES = 16


@dataclass(frozen=True, slots=True)
class Credentials:
    """One BMC login. No password appears in repr() or str()."""

    user: str
    password: str = field(repr=False)
    previous: tuple[str, ...] = field(default=(), repr=False)
    """Earlier passwords, tried after `password`: a rotation that has not reached every BMC yet."""

    def __post_init__(self) -> None:
        if len(self.user.encode()) > MAX_NAME_BYTES:
            raise ValueError(f"BMC user name {self.user!r} is longer than {MAX_NAME_BYTES} bytes")
        if any(len(password.encode()) > MAX_PASSWORD_BYTES for password in (self.password, *self.previous)):
            raise ValueError(f"a password for BMC user {self.user!r} is longer than "
                             f"{MAX_PASSWORD_BYTES} bytes (the IPMI 2.0 limit)")

    def __str__(self) -> str:
        return f"{self.user} (password hidden)"

    def logins(self) -> list[Credentials]:
        """The single logins to try, in order: the password, then the previous ones, each
        followed by its first 16 bytes (IPMI 1.5-era firmware, and ipmi_sim, keep only 16
        bytes of a 20-byte password)."""
        passwords: list[str] = []
        for password in (self.password, *self.previous):
            short = password.encode()[:IPMI15_PASSWORD_BYTES].decode(errors="ignore")
            for candidate in (password, short):
                if candidate not in passwords:
                    passwords.append(candidate)
        return [Credentials(self.user, password) for password in passwords]


CredentialSource = Callable[[str], Credentials]
"""Node name -> its BMC login."""


def factory_credentials(user: str = FACTORY_USER, password: str = FACTORY_PASSWORD) -> CredentialSource:
    """The same login for every node: racked servers fresh from the factory (or the lab)."""
    credentials = Credentials(user, password)
    return lambda _node: credentials


def from_mapping(logins: Mapping[str, Credentials]) -> CredentialSource:
    """A fixed node -> login table (tests, or a store read once up front)."""

    def lookup(node: str) -> Credentials:
        try:
            return logins[node]
        except KeyError:
            raise KeyError(f"no BMC credentials for {node}") from None

    return lookup


class CredentialsUnavailable(RuntimeError):
    """No credential source could be set up (no secret store, unreadable password file)."""


def site_credentials(site_name: str, root) -> CredentialSource:
    """The rotated per-BMC logins of a site, from its secret store (`rackform.secrets`).

    The store is asked once for a lookup, `rackform.secrets.bmc_credentials(site_name,
    root)`, that maps a node name to its login (a Credentials, a (user, password) pair,
    or anything with `user` and `password` attributes, and optionally `previous`).
    """
    try:
        from rackform import secrets
    except ImportError:
        raise CredentialsUnavailable("this checkout has no secret store (rackform.secrets); for BMCs still "
                                     "in factory state use the factory login") from None
    store_lookup = getattr(secrets, "bmc_credentials", None)
    if store_lookup is None:
        raise CredentialsUnavailable("rackform.secrets has no bmc_credentials(site, root)")
    try:
        lookup = store_lookup(site_name, root)
    except Exception as error:  # noqa: BLE001 - the store's own error (no vault yet, ...) says what to do
        raise CredentialsUnavailable(f"the site's secret store: {error}") from None

    def credentials(node: str) -> Credentials:
        found = lookup(node)
        if isinstance(found, Credentials):
            return found
        if isinstance(found, tuple):
            return Credentials(*found)
        return Credentials(found.user, found.password, tuple(getattr(found, "previous", ())))

    return credentials


def password_file_credentials(user: str, path) -> CredentialSource:
    """One login for every node, the password read from a file (never from the command line)."""
    from pathlib import Path

    try:
        password = Path(path).read_text(encoding="utf-8").rstrip("\n")
    except OSError as error:
        raise CredentialsUnavailable(f"cannot read the password file {path}: {error.strerror}") from None
    credentials = Credentials(user, password)
    return lambda _node: credentials
