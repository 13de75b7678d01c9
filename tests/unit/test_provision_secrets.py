"""Per-site BMC secrets (rackform.secrets): generated, encrypted, private, outside any repo."""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform import secrets
from rackform.secrets import SecretsError, SiteVault

HOSTS = ["node-1", "node-2", "node-3"]


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "secrets"


@pytest.fixture
def vault(root) -> SiteVault:
    made = SiteVault("provtest", root, environ={})
    made.ensure(HOSTS)
    return made


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_host_gets_a_credential(vault):
    assert sorted(vault.load()) == HOSTS


def test_passwords_are_20_letters_and_digits(vault):
    assert all(re.fullmatch(r"[A-Za-z0-9]{20}", c.password) for c in vault.load().values())


def test_passwords_differ_per_bmc(vault):
    assert len({c.password for c in vault.load().values()}) == len(HOSTS)


def test_the_site_admin_is_rackform(vault):
    assert {c.user for c in vault.load().values()} == {secrets.ADMIN_USER}


def test_new_entries_carry_the_factory_login(vault):
    assert {c.factory for c in vault.load().values()} == {secrets.DEFAULT_FACTORY_LOGINS}


def test_the_vault_file_is_encrypted(vault):
    text = vault.vault_file.read_text()
    assert text.startswith("$ANSIBLE_VAULT;1.1;AES256") and not any(
        c.password in text for c in vault.load().values())


@pytest.mark.parametrize("name", [secrets.VAULT_FILE, secrets.VAULT_PASSWORD_FILE])
def test_secret_files_are_private(vault, name):
    assert mode(vault.directory / name) == 0o600


def test_the_site_folder_is_private(vault):
    assert mode(vault.directory) == 0o700


def test_ensure_again_keeps_every_password(vault):
    before = {host: c.password for host, c in vault.load().items()}
    assert (vault.ensure(HOSTS), {host: c.password for host, c in vault.load().items()}) == ([], before)


def test_ensure_adds_only_new_hosts(vault):
    before = vault.load()
    added = vault.ensure([*HOSTS, "node-4"])
    after = vault.load()
    assert (added, all(after[h].password == before[h].password for h in HOSTS)) == (["node-4"], True)


def test_rotate_keeps_the_old_password_as_previous(vault):
    old = vault.load()["node-2"].password
    vault.rotate(["node-2"])
    new = vault.load()["node-2"]
    assert (new.previous, new.password != old) == ((old,), True)


def test_forget_previous_drops_them(vault):
    vault.rotate(["node-2"])
    vault.forget_previous(["node-2"])
    assert vault.load()["node-2"].previous == ()


def test_rotating_an_unknown_host_is_refused(vault):
    with pytest.raises(SecretsError, match="no BMC credentials to rotate for node-9"):
        vault.rotate(["node-9"])


def test_a_secrets_root_inside_a_git_work_tree_is_refused(tmp_path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    with pytest.raises(SecretsError, match="inside the git work tree"):
        SiteVault("provtest", tmp_path / "repo" / "secrets", environ={})


def test_a_vault_password_file_readable_by_others_is_refused(root, tmp_path):
    password_file = tmp_path / "vault-pass"
    password_file.write_text("not so secret\n")
    password_file.chmod(0o644)
    with pytest.raises(SecretsError, match="readable by others"):
        SiteVault("provtest", root, environ={secrets.ENV_VAULT_PASSWORD_FILE: str(password_file)}).ensure(HOSTS)


def test_a_given_vault_password_file_is_used_and_never_created(root, tmp_path):
    with pytest.raises(SecretsError, match="no vault password file"):
        SiteVault("provtest", root, environ={secrets.ENV_VAULT_PASSWORD_FILE: str(tmp_path / "missing")}).ensure(HOSTS)


def test_a_wrong_vault_password_is_a_clear_error(vault):
    vault.password_file.write_text("another password\n")
    with pytest.raises(SecretsError, match="cannot decrypt"):
        vault.load()


def test_runner_envvars_name_the_vault_and_its_password_file(vault):
    assert vault.runner_envvars() == {"RACKFORM_BMC_VAULT": str(vault.vault_file),
                                      "ANSIBLE_VAULT_PASSWORD_FILE": str(vault.password_file)}


def test_secrets_root_comes_from_the_environment(tmp_path):
    assert secrets.secrets_root({secrets.ENV_SECRETS_DIR: str(tmp_path)}) == tmp_path


def test_secrets_root_defaults_to_the_xdg_state_folder(tmp_path):
    assert secrets.secrets_root({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "rackform" / "secrets"


def test_credential_repr_hides_the_password(vault):
    credential = vault.load()["node-1"]
    assert credential.password not in repr(credential)


def test_bmc_credentials_lookup(vault, monkeypatch):
    monkeypatch.setenv(secrets.ENV_SECRETS_DIR, str(vault.directory.parent))
    lookup = secrets.bmc_credentials("provtest")
    assert lookup("node-1") == vault.load()["node-1"]


def test_bmc_credentials_lookup_of_an_unknown_node_names_the_vault(vault, monkeypatch):
    monkeypatch.setenv(secrets.ENV_SECRETS_DIR, str(vault.directory.parent))
    with pytest.raises(SecretsError, match=r"no BMC credentials for node-9 in .*bmc_vault.yml"):
        secrets.bmc_credentials("provtest")("node-9")


@pytest.mark.slow
def test_ansible_reads_the_vault_with_the_password_file(vault, tmp_path):
    """The playbook side: vars_files + ANSIBLE_VAULT_PASSWORD_FILE decrypt what rackform wrote."""
    playbook = tmp_path / "read.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  vars_files: [\"{{ lookup('env', 'RACKFORM_BMC_VAULT') }}\"]\n"
        "  tasks:\n    - ansible.builtin.assert:\n        that: rackform_bmc_credentials['node-1'].password"
        " | length == 20\n")
    environment = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", **vault.runner_envvars(),
                   "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "HOME": str(tmp_path)}
    result = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(playbook)],
                            capture_output=True, text=True, env=environment, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr
