"""providers.credentials: the stack's credentials as a stage run's environment."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

STACKS = Path(__file__).resolve().parents[2] / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.credentials import CredentialsError, StageCredentials  # noqa: E402
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402

VAULT = "vault-Pw-31c9"
SWITCH = "switch-Pw-8d2a"


def from_request(config: dict) -> StageCredentials:
    """As a provider's configure gets it: a ConfigureRequest over the namespaced stack config."""
    return StageCredentials.from_config(ConfigureRequest(Config(raw_config=config, project_name="rackform")).config)


def test_the_vault_password_is_a_private_file_only_inside_the_block():
    with from_request({"rackform:vaultPassword": VAULT}).environment() as env:
        path = Path(env["RACKFORM_VAULT_PASSWORD_FILE"])
        assert path.read_text() == VAULT + "\n"
        assert (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode)) == (0o600, 0o700)
    assert not path.exists() and not path.parent.exists()


def test_the_vault_password_file_is_removed_when_the_run_fails():
    with pytest.raises(RuntimeError), from_request({"rackform:vaultPassword": VAULT}).environment() as env:
        path = Path(env["RACKFORM_VAULT_PASSWORD_FILE"])
        raise RuntimeError("stage failed")
    assert not path.exists()


def test_switch_password_and_key_file(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("key\n")
    config = {"rackform:switchPassword": SWITCH, "rackform:privateKeyFile": str(key)}
    with from_request(config).environment() as env:
        path = Path(env["RACKFORM_SWITCH_PASSWORD_FILE"])
        assert env == {"RACKFORM_SWITCH_PASSWORD_FILE": str(path), "ANSIBLE_PRIVATE_KEY_FILE": str(key)}
        assert path.read_text() == SWITCH + "\n"
        assert (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode)) == (0o600, 0o700)
    assert not path.exists()


def test_no_password_is_in_the_environment_of_a_stage_run():
    """The environment is passed on to ansible-runner, which records it: paths only."""
    config = {"rackform:vaultPassword": VAULT, "rackform:switchPassword": SWITCH}
    with from_request(config).environment() as env:
        assert not any(secret in value for value in env.values() for secret in (VAULT, SWITCH))
        assert set(env) == {"RACKFORM_VAULT_PASSWORD_FILE", "RACKFORM_SWITCH_PASSWORD_FILE"}


def test_unset_keys_leave_the_cli_defaults():
    with from_request({"rackform:site": "lab"}).environment() as env:
        assert env == {}


def test_a_relative_key_file_is_refused_by_name():
    with pytest.raises(CredentialsError, match="rackform:privateKeyFile: 'keys/id' is not an absolute path"):
        from_request({"rackform:privateKeyFile": "keys/id"})


def test_a_missing_key_file_is_refused_by_name(tmp_path):
    with pytest.raises(CredentialsError, match="rackform:privateKeyFile: .*/nope: no such file"):
        with from_request({"rackform:privateKeyFile": str(tmp_path / "nope")}).environment():
            pass


def test_a_structured_secret_is_refused_without_showing_it():
    with pytest.raises(CredentialsError, match="rackform:switchPassword: expected a string, got a dict") as refused:
        from_request({"rackform:switchPassword": {"password": SWITCH}})
    assert SWITCH not in str(refused.value)


def test_no_secret_in_repr():
    credentials = from_request({"rackform:vaultPassword": VAULT, "rackform:switchPassword": SWITCH})
    assert VAULT not in repr(credentials) and SWITCH not in repr(credentials)
