"""What a stage run needs to log in, from the stack's configuration (never from resource state).

Secrets are set with `pulumi config set --secret` (rackform:vaultPassword,
rackform:switchPassword) and reach a dynamic provider only through
`ResourceProvider.configure(req)`, which the engine calls in the provider process after
unpickling it. A provider keeps the `StageCredentials` made from `req.config` and, per
operation, enters `environment()`:

    RACKFORM_VAULT_PASSWORD_FILE   a 0600 file holding the vault password
    RACKFORM_SWITCH_PASSWORD_FILE  a 0600 file holding the Onyx switches' password
    ANSIBLE_PRIVATE_KEY_FILE       rackform:privateKeyFile (a path, not a secret)

Both files lie in a 0700 folder of their own outside the repository, removed when the
block ends. The environment holds paths only, never a password: it is passed on to
ansible-runner, which records a run's environment. A key that is not set is left out of
the environment, so the CLI's own defaults apply (the site's vault-password file, the
lab's SSH key). No secret appears in repr(), in the pickled provider, or in an
exception message.

The stack writes no lasting copy of the vault password: a vault it made opens from the
CLI too once the CLI is given the same password (rackform.secrets says how in its error:
$RACKFORM_VAULT_PASSWORD_FILE, or the site's own vault-password file).
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
ENV_SWITCH_PASSWORD_FILE = "RACKFORM_SWITCH_PASSWORD_FILE"  # read by roles/onyx_switch (Onyx logins)
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
        """The variables for one stage run; the password files exist only inside the block."""
        env: dict[str, str] = {}
        if self.private_key_file is not None:
            if not Path(self.private_key_file).is_file():
                raise CredentialsError(f"stack config {PRIVATE_KEY_FILE_KEY}: {self.private_key_file}: no such file")
            env[ENV_PRIVATE_KEY_FILE] = self.private_key_file
        secrets = {variable: (name, value) for variable, name, value in (
            (ENV_VAULT_PASSWORD_FILE, "vault-password", self.vault_password),
            (ENV_SWITCH_PASSWORD_FILE, "switch-password", self.switch_password)) if value is not None}
        if not secrets:
            yield env
            return
        with tempfile.TemporaryDirectory(prefix="rackform-stack-") as folder:  # mode 0700
            for variable, (name, value) in secrets.items():
                path = Path(folder) / name
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(value + "\n")
                env[variable] = str(path)
            yield env


def _text(config: StackConfig | Mapping[str, Any], key: str) -> str | None:
    value = config.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise CredentialsError(f"stack config {key}: expected a string, got a {type(value).__name__}")
    return value
