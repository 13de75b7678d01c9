"""What a stage run needs to log in, from the stack's configuration (never from resource state).

Secrets are set with `pulumi config set --secret` (rackform:vaultPassword,
rackform:switchPassword) and reach a dynamic provider only through
`ResourceProvider.configure(req)`, which the engine calls in the provider process after
unpickling it. A provider keeps the `StageCredentials` made from `req.config` and, per
operation, enters `environment()`:

    RACKFORM_VAULT_PASSWORD_FILE  a 0600 file holding the vault password, in a 0700
                                  folder of its own, removed when the block ends
    RACKFORM_SWITCH_PASSWORD      the Onyx switches' password
    ANSIBLE_PRIVATE_KEY_FILE      rackform:privateKeyFile (a path, not a secret)

A key that is not set is left out of the environment, so the CLI's own defaults apply
(the site's vault-password file, the lab's SSH key). No secret appears in repr(), in
the pickled provider, or in an exception message.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

VAULT_PASSWORD_KEY = "rackform:vaultPassword"
SWITCH_PASSWORD_KEY = "rackform:switchPassword"
PRIVATE_KEY_FILE_KEY = "rackform:privateKeyFile"
SECRET_KEYS = (VAULT_PASSWORD_KEY, SWITCH_PASSWORD_KEY)
"""Declared `secret: true` in Pulumi.yaml: the engine refuses them in plaintext."""

ENV_VAULT_PASSWORD_FILE = "RACKFORM_VAULT_PASSWORD_FILE"  # read by rackform.secrets.SiteVault
ENV_SWITCH_PASSWORD = "RACKFORM_SWITCH_PASSWORD"  # read by rackform.fabric (Onyx logins)
ENV_PRIVATE_KEY_FILE = "ANSIBLE_PRIVATE_KEY_FILE"  # read by Ansible and rackform.fabric


class StackConfig(Protocol):
    """`pulumi.dynamic.Config` (what `ConfigureRequest.config` is): get by full key."""

    def get(self, key: str) -> Any: ...


class CredentialsError(ValueError):
    """A credential key of the stack config is unusable; the message names the key, never its value."""


@dataclass(frozen=True, slots=True)
class StageCredentials:
    """The stack's credentials for stage runs (secrets hidden from repr)."""

    vault_password: str | None = field(default=None, repr=False)
    switch_password: str | None = field(default=None, repr=False)
    private_key_file: str | None = None

    @classmethod
    def from_config(cls, config: StackConfig | Mapping[str, Any]) -> StageCredentials:
        """Read the keys from a ConfigureRequest's config (or a plain mapping of full keys)."""
        vault, switch, key_file = (_text(config, key) for key in (VAULT_PASSWORD_KEY, SWITCH_PASSWORD_KEY,
                                                                   PRIVATE_KEY_FILE_KEY))
        if key_file is not None and not Path(key_file).expanduser().is_absolute():
            raise CredentialsError(f"stack config {PRIVATE_KEY_FILE_KEY}: {key_file!r} is not an absolute path "
                                   f"(the provider process runs in stacks/, so a relative path is ambiguous)")
        return cls(vault, switch, str(Path(key_file).expanduser()) if key_file is not None else None)

    @contextlib.contextmanager
    def environment(self) -> Iterator[dict[str, str]]:
        """The variables for one stage run; the vault password file exists only inside the block."""
        env: dict[str, str] = {}
        if self.private_key_file is not None:
            if not Path(self.private_key_file).is_file():
                raise CredentialsError(f"stack config {PRIVATE_KEY_FILE_KEY}: {self.private_key_file}: no such file")
            env[ENV_PRIVATE_KEY_FILE] = self.private_key_file
        if self.switch_password is not None:
            env[ENV_SWITCH_PASSWORD] = self.switch_password
        if self.vault_password is None:
            yield env
            return
        with tempfile.TemporaryDirectory(prefix="rackform-vault-") as folder:  # mode 0700
            path = Path(folder) / "vault-password"
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(self.vault_password + "\n")
            yield env | {ENV_VAULT_PASSWORD_FILE: str(path)}


def _text(config: StackConfig | Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise CredentialsError(f"stack config {key}: expected a string, got a {type(value).__name__}")
    return value
