"""Both front doors open the same BMC vault: one made through the Pulumi stack's
rackform:vaultPassword opens from the CLI once the CLI is given that password, and the
CLI's error says exactly how; nothing makes a new password for a vault that exists."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

import pytest

from rackform import secrets_cli
from rackform.secrets import SecretsError, SiteVault, bmc_credentials
from rackform.run.environment import stage_environment

STACKS = Path(__file__).resolve().parents[2] / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.credentials import StageCredentials  # noqa: E402

STACK_PASSWORD = "stack-vault-Pw-0b7d"


@pytest.fixture()
def secrets_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "secrets"
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(folder))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("RACKFORM_BMC_VAULT", raising=False)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    return folder


def made_by_the_stack(site) -> dict:
    """What a Pulumi stage run of the provision stage does: the stack's password as a file for
    the operation, the site's vault made with it. Returns the credentials it holds."""
    with StageCredentials(vault_password=STACK_PASSWORD).environment() as envvars:
        env = stage_environment(site, {"provision"}, given=envvars)
        made = SiteVault(site.name, environ={**os.environ, **env.envvars}).load()
    assert made
    return made


def secrets_command(site_root: Path, capsys) -> tuple[int, str]:
    code = secrets_cli.run(argparse.Namespace(site="lab", root=site_root, rotate=None, rotate_all=False,
                                              forget_previous=None, rotate_encryption_key=False,
                                              forget_old_encryption_keys=False))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_stack_leaves_no_password_on_disk(lab_files, secrets_dir):
    made_by_the_stack(lab_files.load())
    site_folder = secrets_dir / "lab"
    assert (site_folder / "bmc_vault.yml").exists() and not (site_folder / "vault-password").exists()
    assert not any(STACK_PASSWORD in path.read_bytes().decode("utf-8", "replace")
                   for path in site_folder.rglob("*") if path.is_file())


def test_the_cli_says_how_to_open_a_vault_the_stack_made(lab_files, secrets_dir, capsys):
    made_by_the_stack(lab_files.load())
    before = (secrets_dir / "lab" / "bmc_vault.yml").read_bytes()
    code, said = secrets_command(lab_files.root, capsys)
    password_file = secrets_dir / "lab" / "vault-password"
    assert code == 1
    assert f"no vault password file at {password_file} for {secrets_dir / 'lab' / 'bmc_vault.yml'}" in said
    assert f"pulumi config get rackform:vaultPassword -s STACK > {password_file}" in said
    assert "RACKFORM_VAULT_PASSWORD_FILE" in said and "Traceback" not in said
    assert not password_file.exists(), "no new password may be made for a vault that exists"
    assert (secrets_dir / "lab" / "bmc_vault.yml").read_bytes() == before


def test_doing_what_the_error_says_opens_the_same_vault(lab_files, secrets_dir, capsys):
    made = made_by_the_stack(lab_files.load())
    password_file = secrets_dir / "lab" / "vault-password"
    password_file.write_text(STACK_PASSWORD + "\n")  # what `pulumi config get ... >` writes
    password_file.chmod(0o600)
    code, said = secrets_command(lab_files.root, capsys)
    assert code == 0, said
    lookup = bmc_credentials("lab")
    assert {host: lookup(host).password for host in made} == {host: entry.password for host, entry in made.items()}


def test_rackform_vault_password_file_opens_it_too(lab_files, secrets_dir, tmp_path, monkeypatch, capsys):
    made = made_by_the_stack(lab_files.load())
    given = tmp_path / "stack-password"
    given.write_text(STACK_PASSWORD + "\n")
    given.chmod(0o600)
    monkeypatch.setenv("RACKFORM_VAULT_PASSWORD_FILE", str(given))
    code, said = secrets_command(lab_files.root, capsys)
    assert code == 0, said
    host = next(iter(made))
    assert bmc_credentials("lab")(host).password == made[host].password


def test_a_missing_named_password_file_is_named(lab_files, secrets_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("RACKFORM_VAULT_PASSWORD_FILE", str(tmp_path / "nope"))
    named = r"no vault password file at .*/nope \(named by RACKFORM_VAULT_PASSWORD_FILE\)"
    with pytest.raises(SecretsError, match=named):
        SiteVault(lab_files.load().name).ensure(["gpu-1"])


def test_a_stack_password_other_than_the_clis_says_which_to_align(lab_files, secrets_dir):
    """The CLI made the vault first (its own random password); the stack was given another one."""
    site = lab_files.load()
    own = SiteVault(site.name)
    own.ensure(["gpu-1"])
    assert stat.S_IMODE(own.password_file.stat().st_mode) == 0o600
    with pytest.raises(SecretsError) as refused, StageCredentials(vault_password=STACK_PASSWORD).environment() as env:
        SiteVault(site.name, environ={**os.environ, **env}).load()
    message = str(refused.value)
    assert f"pulumi config set --secret rackform:vaultPassword < {own.password_file}" in message
    assert STACK_PASSWORD not in message
