"""The emitted provision stage: its play, its BMC roles' rules about passwords, and the
`rackform secrets` command."""

from __future__ import annotations

import argparse
import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from provision_support import load_ipmi_modules
from rackform import secrets, secrets_cli
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.digest import stage_files
from rackform.collection import PROJECT_DIR, short_name
from collection_support import ROLES_IN_PROJECT

REPO = Path(__file__).resolve().parents[2]
BMC_ROLES = ("bmc_ipmi", "bmc_harden", "bmc_power")
module = load_ipmi_modules()["rackform_ipmi"]


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", REPO))


def load(files: dict[str, bytes], path: str):
    return yaml.safe_load(files[path])


@pytest.fixture(scope="module")
def server_play(files) -> dict:
    return next(play for play in load(files, "provision.yml") if play["hosts"] == "servers")


def role_tasks(files, role: str) -> list[dict]:
    return load(files, f"{ROLES_IN_PROJECT}{role}/tasks/main.yml")


def ipmi_tasks(files) -> list[tuple[str, int, dict]]:
    return [(role, index, task) for role in BMC_ROLES for index, task in enumerate(role_tasks(files, role))
            if "rackform.site.ipmi" in task]


def test_server_play_runs_harden_then_power_then_the_ssh_wait(server_play):
    assert [short_name(entry["role"]) for entry in server_play["roles"]] == ["bmc_harden", "bmc_power", "bmc_reachable"]


def test_server_play_has_a_max_fail_percentage(server_play):
    assert "provision_max_fail_percentage | default(25)" in server_play["max_fail_percentage"]


def test_the_sites_max_fail_percentage_is_the_plays(lab_files):
    lab_files.edit_site("provisioning:\n", "provisioning:\n  max_fail_percentage: 10\n")
    rendered = render_files(load_site("lab", lab_files.root))
    play = load(rendered, "provision.yml")[1]
    assert play["max_fail_percentage"] == "{{ provision_max_fail_percentage | default(10) }}"


def test_server_play_reads_the_vault_named_by_the_environment(server_play):
    assert "lookup('ansible.builtin.env', 'RACKFORM_BMC_VAULT')" in server_play["vars_files"][0]


# A task handles a password when it templates one of the vault entry's secret fields.
_SECRET_FIELD = re.compile(r"credentials(\[[^\]]*\])?\.(password|previous|factory)")


def _literal_passwords(data) -> list:
    """Values of `password` keys that are not Jinja templates, anywhere in a YAML document."""
    if isinstance(data, dict):
        found = [value for key, value in data.items() if key == "password" and "{{" not in str(value)]
        return found + [item for value in data.values() for item in _literal_passwords(value)]
    if isinstance(data, list):
        return [item for value in data for item in _literal_passwords(value)]
    return []


def test_no_role_file_holds_a_literal_password(files):
    literal = {path: _literal_passwords(yaml.safe_load(content)) for path, content in files.items()
               if path.startswith(f"{ROLES_IN_PROJECT}") and path.endswith(".yml")}
    assert {path: values for path, values in literal.items() if values} == {}


def test_every_task_that_handles_a_password_is_no_log(files):
    handling = [(role, task["name"]) for role in BMC_ROLES for task in role_tasks(files, role)
                if _SECRET_FIELD.search(yaml.safe_dump({k: v for k, v in task.items() if k != "name"}))]
    assert len(handling) == 2 and [entry for entry in handling if not _task(files, *entry).get("no_log")] == []


def _task(files, role, name):
    return next(task for task in role_tasks(files, role) if task["name"] == name)


@pytest.mark.parametrize("key", ["delegate_to", "become", "no_log", "register", "failed_when"])
def test_ipmi_tasks_run_on_the_controller_hide_their_result_and_register_it(files, key):
    expected = {"delegate_to": "localhost", "become": False, "no_log": True, "failed_when": False}
    values = [task.get(key) for _, _, task in ipmi_tasks(files)]
    assert values and all(value == expected.get(key, value) and value is not None for value in values)


def test_each_ipmi_task_is_followed_by_a_failure_report(files):
    for role, index, task in ipmi_tasks(files):
        report = role_tasks(files, role)[index + 1]
        assert ("ansible.builtin.fail" in report and f"{task['register']}.rackform_error" in
                report["ansible.builtin.fail"]["msg"] and task["register"] in report["when"]), role


@pytest.mark.parametrize("role", BMC_ROLES)
def test_bmc_role_defaults_are_prefixed_with_the_role_name(files, role):
    assert [name for name in load(files, f"{ROLES_IN_PROJECT}{role}/defaults/main.yml") if not name.startswith(f"{role}_")] == []


@pytest.mark.parametrize("role", ["bmc_harden", "bmc_power"])
def test_bmc_roles_depend_on_the_module_role(files, role):
    assert load(files, f"{ROLES_IN_PROJECT}{role}/meta/main.yml")["dependencies"] == [{"role": "rackform.site.bmc_ipmi"}]


def test_the_provision_digest_covers_the_module_and_its_module_utils(files):
    covered = stage_files(files, "provision")
    plugins = f"{PROJECT_DIR}/plugins"
    assert {f"{plugins}/modules/ipmi.py", f"{plugins}/module_utils/rackform_ipmi_session.py",
            f"{plugins}/module_utils/rackform_ipmi_rmcp.py", f"{plugins}/filter/pxe_server.py"} <= set(covered)
    assert f"{plugins}/module_utils/rackform_onyx_lines.py" not in covered
    assert f"{plugins}/module_utils/rackform_onyx_lines.py" in stage_files(files, "fabric")
    assert not any(path.startswith(plugins) for path in stage_files(files, "verify"))


def test_the_module_documents_exactly_its_arguments():
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]
    assert sorted(documented) == sorted(module.ARGUMENT_SPEC)


def test_reimage_is_asked_for_with_a_tag(files):
    defaults = load(files, f"{ROLES_IN_PROJECT}bmc_power/defaults/main.yml")
    assert ("'reimage' in ansible_run_tags" in defaults["bmc_power_reimage"]
            and "'pxe' if bmc_power_reimage" in defaults["bmc_power_boot_device"])


# --- rackform secrets SITE ---------------------------------------------------------------------

@pytest.fixture
def secrets_env(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(secrets.ENV_SECRETS_DIR, str(tmp_path / "secrets"))
    monkeypatch.delenv(secrets.ENV_VAULT_PASSWORD_FILE, raising=False)
    return tmp_path / "secrets"


def run_secrets(*argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    secrets_cli.add_arguments(parser)
    output = io.StringIO()
    with redirect_stdout(output):
        code = secrets_cli.run(parser.parse_args([*argv, "--root", str(REPO)]))
    return code, output.getvalue()


def test_secrets_command_creates_the_lab_vault_and_prints_how_to_run(secrets_env):
    code, output = run_secrets("lab")
    assert (code, f"export RACKFORM_BMC_VAULT={secrets_env / 'lab' / 'bmc_vault.yml'}" in output) == (0, True)


def test_secrets_command_never_prints_a_password(secrets_env):
    _, output = run_secrets("lab")
    assert [c.password for c in secrets.SiteVault("lab").load().values() if c.password in output] == []


def test_secrets_command_rotates(secrets_env):
    run_secrets("lab")
    before = secrets.SiteVault("lab").load()["gpu-1"].password
    run_secrets("lab", "--rotate", "gpu-1")
    assert secrets.SiteVault("lab").load()["gpu-1"].previous == (before,)
