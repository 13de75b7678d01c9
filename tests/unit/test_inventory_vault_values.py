"""Ansible inline vault values in a site's inventory: read, never decrypted, rendered as they
came, and read back by Ansible from the rendered inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform.model.source import BadInput, VaultValue
from rackform.render.project import render_files
from rackform.render.writer import write_project

BIN = Path(sys.executable).parent
PROXY_PASSWORD = "proxy-Pw-5e0c"
NOTE = "rack 4 door code 2231"


def ansible_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}


@pytest.fixture()
def vault_password_file(tmp_path: Path) -> Path:
    path = tmp_path / "vault-password"
    path.write_text("the-site-vault-password\n")
    path.chmod(0o600)
    return path


def encrypt_string(name: str, value: str, password_file: Path, tmp_path: Path) -> str:
    """`name: !vault |` and its block, as ansible-vault encrypt_string prints them."""
    done = subprocess.run([str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password_file),
                           value, "--name", name], capture_output=True, text=True, check=True,
                          timeout=SUBPROCESS_HANG_S, env=ansible_env(tmp_path))
    assert done.stdout.startswith(f"{name}: !vault |\n"), done.stdout
    return done.stdout


def ciphertext(block: str) -> str:
    """The $ANSIBLE_VAULT text of an encrypt_string block, as YAML reads it."""
    return "".join(line.strip() + "\n" for line in block.splitlines()[1:])


@pytest.fixture()
def vaulted_site(lab_files, vault_password_file, tmp_path):
    """The lab with a vaulted group variable (group_vars/all.yml) and a vaulted host variable."""
    proxy = encrypt_string("proxy_password", PROXY_PASSWORD, vault_password_file, tmp_path)
    note = encrypt_string("rack_note", NOTE, vault_password_file, tmp_path)
    all_yml = "inventories/lab/group_vars/all.yml"
    lab_files.write(all_yml, lab_files.read(all_yml) + proxy)
    host_yml = "inventories/lab/host_vars/gpu-1.yml"
    lab_files.write(host_yml, lab_files.read(host_yml).rstrip("\n") + "\n" + note)
    return lab_files, proxy, note


@pytest.fixture()
def rendered(vaulted_site, tmp_path) -> Path:
    lab_files, _proxy, _note = vaulted_site
    project = tmp_path / "build" / "lab"
    write_project(render_files(lab_files.load()), project)
    return project


def test_a_vault_value_is_read_as_its_ciphertext(vaulted_site):
    lab_files, proxy, note = vaulted_site
    site = lab_files.load()
    value = site.user_inventory.group_vars["all"].values["proxy_password"]
    assert type(value) is VaultValue and value == ciphertext(proxy) and PROXY_PASSWORD not in value
    assert site.hosts["gpu-1"].user_vars["rack_note"] == ciphertext(note)
    assert "encrypted" in repr(value) and "$ANSIBLE_VAULT" not in repr(value)


def test_the_rendered_inventory_carries_the_vault_values_untouched(rendered, vaulted_site):
    _lab_files, proxy, note = vaulted_site
    inventory = "\n".join(path.read_text() for path in sorted((rendered / "inventory").rglob("*.yml")))
    for block in (proxy, note):
        assert "!vault |\n" in inventory and ciphertext(block).splitlines()[1] in inventory
    assert PROXY_PASSWORD not in inventory and NOTE not in inventory


def test_ansible_inventory_reads_the_rendered_values_as_vaulted(rendered, vaulted_site, tmp_path):
    _lab_files, proxy, note = vaulted_site
    listed = subprocess.run([str(BIN / "ansible-inventory"), "-i", "inventory", "--list"], cwd=rendered,
                            capture_output=True, text=True, timeout=SUBPROCESS_HANG_S, env=ansible_env(tmp_path))
    assert listed.returncode == 0, listed.stderr
    hostvars = json.loads(listed.stdout)["_meta"]["hostvars"]
    assert hostvars["gpu-1"]["proxy_password"] == {"__ansible_vault": ciphertext(proxy)}
    assert hostvars["gpu-1"]["rack_note"] == {"__ansible_vault": ciphertext(note)}


def test_ansible_decrypts_the_rendered_values_with_the_vault_password(rendered, vault_password_file, tmp_path):
    shown = subprocess.run([str(BIN / "ansible"), "-i", "inventory", "gpu-1", "-c", "local", "-m", "debug",
                            "-a", "msg={{ proxy_password }}|{{ rack_note }}",
                            "--vault-password-file", str(vault_password_file)],
                           cwd=rendered, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S,
                           env=ansible_env(tmp_path))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"{PROXY_PASSWORD}|{NOTE}" in shown.stdout


def test_a_second_render_changes_nothing(rendered, vaulted_site):
    lab_files, _proxy, _note = vaulted_site
    result = write_project(render_files(lab_files.load()), rendered)
    assert not (result.added or result.modified or result.removed)


def test_a_key_rackform_reads_cannot_be_vaulted(lab_files, vault_password_file, tmp_path):
    block = encrypt_string("timezone", "Etc/UTC", vault_password_file, tmp_path)
    all_yml = "inventories/lab/group_vars/all.yml"
    lab_files.write(all_yml, lab_files.read(all_yml).replace("timezone: Etc/UTC\n", block))
    with pytest.raises(BadInput) as refused:
        lab_files.load()
    (error,) = [error for error in refused.value.errors if error.key == "timezone"]
    assert error.loc.path.endswith("group_vars/all.yml") and "never decrypts" in error.message


def test_vault_on_a_mapping_is_a_clear_error(lab_files):
    all_yml = "inventories/lab/group_vars/all.yml"
    lab_files.write(all_yml, lab_files.read(all_yml) + "proxy: !vault\n  user: alice\n")
    with pytest.raises(BadInput) as refused:
        lab_files.load()
    assert any("marks one encrypted string" in str(error) and "group_vars/all.yml" in str(error)
               for error in refused.value.errors)


def test_vault_stays_refused_in_a_site_design(lab_files):
    """Only inventory variables pass on to Ansible: a site file has nothing to decrypt them."""
    lab_files.write("topologies/sites/lab.yaml", lab_files.read("topologies/sites/lab.yaml") +
                    "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n")
    with pytest.raises(BadInput, match="!vault"):
        lab_files.load()
