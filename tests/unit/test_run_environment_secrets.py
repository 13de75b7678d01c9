"""What a playbook run is given and what its artifacts keep: no secret of the caller's
environment, the switch password only as a private file, the site's host key checking.

Real ansible-runner runs of a local-connection playbook through `run_playbook`; afterwards
every file under the project (the run's artifacts, the fact cache) is searched.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from pathlib import Path

import pytest
import yaml

from rackform.paths import ROLES_DIR
from rackform.run import ansible
from rackform.run.ansible import RunResult, run_environment, run_playbook, site_host_key_checking

STACKS = Path(__file__).resolve().parents[2] / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.credentials import StageCredentials  # noqa: E402

ANSIBLE_CFG = """\
[defaults]
inventory = hosts
gathering = smart
fact_caching = jsonfile
fact_caching_connection = .cache/facts
{checking}
"""
INVENTORY = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"


def onyx_password_expression() -> str:
    """The password argument of roles/onyx_switch's task, as the role gives it to the module."""
    (task,) = yaml.safe_load((ROLES_DIR / "onyx_switch" / "tasks" / "main.yml").read_text())
    return task["rackform.site.onyx_config"]["password"]


def playbook(received: Path) -> str:
    """Facts gathered (the controller's ansible_env lands in job events and the fact cache), the
    switch password as the onyx_switch role resolves it, and the effective host key checking."""
    defaults = ROLES_DIR / "onyx_switch" / "defaults" / "main.yml"
    plays = [{
        "name": "What the run was given",
        "hosts": "all",
        "gather_facts": True,
        "vars_files": [str(defaults)],
        "tasks": [
            {"name": "Keep what the Onyx module would get as its password", "no_log": True,
             "ansible.builtin.copy": {"dest": str(received / "switch-password"), "mode": "0600",
                                      "content": onyx_password_expression().replace(" or omit", " or ''")}},
            {"name": "Keep the host key checking Ansible runs with",
             "ansible.builtin.copy": {"dest": str(received / "host-key-checking"), "mode": "0600",
                                      "content": "{{ lookup('ansible.builtin.config', 'HOST_KEY_CHECKING') }}"}},
            {"name": "Keep the variable ansible-runner passes",
             "ansible.builtin.copy": {"dest": str(received / "host-key-checking-env"), "mode": "0600",
                                      "content": "{{ lookup('ansible.builtin.env', 'ANSIBLE_HOST_KEY_CHECKING') }}"}},
        ],
    }]
    return yaml.safe_dump(plays, sort_keys=False)


def make_project(folder: Path, received: Path, checking: str = "host_key_checking = True") -> Path:
    project = folder / "project"
    project.mkdir(parents=True)
    received.mkdir(parents=True, exist_ok=True)
    (project / "ansible.cfg").write_text(ANSIBLE_CFG.format(checking=checking))
    (project / "hosts").write_text(INVENTORY)
    (project / "play.yml").write_text(playbook(received))
    return project


def files_holding(folder: Path, *needles: str) -> list[str]:
    """Every file under `folder` that holds one of `needles` (by content or name)."""
    found = []
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace") + str(path)
            found += [f"{path}: {needle[:12]}..." for needle in needles if needle in text]
    return found


def marker() -> tuple[str, str]:
    return f"RACKFORM_TEST_MARKER_{secrets.token_hex(4).upper()}", f"marker-secret-{secrets.token_hex(12)}"


def ran(result: RunResult) -> RunResult:
    assert result.ok, result.summary()
    return result


# ---------------------------------------------------------------- the caller's environment


def test_no_variable_of_the_callers_environment_lands_in_the_artifacts(tmp_path, monkeypatch):
    name, value = marker()
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", f"passphrase-{secrets.token_hex(8)}")
    received = tmp_path / "received"
    project = make_project(tmp_path, received)
    result = ran(run_playbook(project, "play.yml"))
    assert list(result.run_dir.rglob("job_events/*.json")), "the run recorded no events: nothing was searched"
    assert files_holding(project, "ansible_env"), "no environment facts recorded: nothing was searched"
    assert files_holding(project, name, value, "PULUMI_CONFIG_PASSPHRASE") == []


def test_the_run_record_keeps_the_command_but_no_values_of_the_environment(tmp_path):
    project = make_project(tmp_path, tmp_path / "received")
    result = ran(run_playbook(project, "play.yml"))
    (record,) = result.run_dir.rglob("command")
    data = json.loads(record.read_text())
    assert "env" not in data and "ansible-playbook" in data["command"][0]
    assert {"PATH", "HOME", "ANSIBLE_HOST_KEY_CHECKING"} <= set(data["env_names"])
    assert stat.S_IMODE(record.stat().st_mode) == 0o600


def test_a_run_inherits_only_the_allowed_variables(tmp_path, monkeypatch):
    name, value = marker()
    monkeypatch.setenv(name, value)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/user/1000/agent.sock")
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("ANSIBLE_GALAXY_TOKEN", "galaxy-token")
    monkeypatch.setenv("ANSIBLE_CONFIG", "/elsewhere/ansible.cfg")
    env = run_environment(make_project(tmp_path, tmp_path / "received"), {"RACKFORM_SWITCH_USER": "admin"})
    assert env["SSH_AUTH_SOCK"] == "/run/user/1000/agent.sock" and env["LC_TIME"] == "C.UTF-8"
    assert env["RACKFORM_SWITCH_USER"] == "admin"
    assert not {name, "AWS_SECRET_ACCESS_KEY", "ANSIBLE_GALAXY_TOKEN", "ANSIBLE_CONFIG"} & set(env)
    assert env["PATH"].startswith(str(Path(sys.executable).parent))


def test_a_proxy_is_passed_on_but_not_one_with_a_password(tmp_path, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    monkeypatch.setenv("https_proxy", "http://alice:proxy-pw@proxy.example:3128")
    monkeypatch.setenv("no_proxy", "localhost,10.0.0.0/8")
    env = run_environment(make_project(tmp_path, tmp_path / "received"))
    assert env["http_proxy"] == "http://proxy.example:3128" and env["no_proxy"] == "localhost,10.0.0.0/8"
    assert "https_proxy" not in env


# ---------------------------------------------------------------- the switch password


def test_the_stacks_switch_password_reaches_the_play_and_nothing_records_it(tmp_path):
    password = f"switch-{secrets.token_hex(10)}"
    received = tmp_path / "received"
    project = make_project(tmp_path, received)
    with StageCredentials(switch_password=password).environment() as envvars:
        ran(run_playbook(project, "play.yml", envvars=envvars))
    assert (received / "switch-password").read_text().strip() == password
    assert files_holding(project, password) == []


def test_the_switch_password_from_this_process_reaches_the_play_as_a_private_file(tmp_path, monkeypatch):
    """`RACKFORM_SWITCH_PASSWORD=... rackform deploy`: a file for the run, removed after it."""
    password = f"switch-{secrets.token_hex(10)}"
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD", password)
    received = tmp_path / "received"
    project = make_project(tmp_path, received)
    seen: list[str] = []
    handler = (lambda event: seen.append(json.dumps(event)))
    ran(run_playbook(project, "play.yml", event_handler=handler))
    assert (received / "switch-password").read_text().strip() == password
    assert files_holding(project, password) == [] and not any(password in event for event in seen)
    (record,) = project.rglob("command")
    assert "RACKFORM_SWITCH_PASSWORD" not in json.loads(record.read_text())["env_names"]


def test_the_switch_password_file_is_private_and_lasts_one_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD", "pw-7a1e")
    env = {}
    with ansible._secrets_as_files(dict(os.environ)) as files:
        env.update(files)
        path = Path(files["RACKFORM_SWITCH_PASSWORD_FILE"])
        assert path.read_text() == "pw-7a1e"
        assert (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode)) == (0o600, 0o700)
    assert not path.exists()
    assert "RACKFORM_SWITCH_PASSWORD" not in run_environment(make_project(tmp_path, tmp_path / "r"), env)


# ---------------------------------------------------------------- host key checking


@pytest.mark.parametrize(("setting", "expected"), [("host_key_checking = True", "True"),
                                                    ("host_key_checking = False", "False"),
                                                    ("", "True")])
def test_the_run_gets_the_sites_host_key_checking(tmp_path, setting, expected):
    assert run_environment(make_project(tmp_path, tmp_path / "received", setting))["ANSIBLE_HOST_KEY_CHECKING"] == \
        expected


def test_a_checking_site_runs_with_checking_on_whatever_this_process_says(tmp_path, monkeypatch):
    """ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False when it is not given; the site's value wins."""
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    received = tmp_path / "received"
    ran(run_playbook(make_project(tmp_path, received), "play.yml"))
    assert (received / "host-key-checking").read_text().strip() == "True"
    assert (received / "host-key-checking-env").read_text().strip() == "True"


def test_the_rendered_projects_carry_their_sites_setting(tmp_path, repo_root):
    """The lab turns checking off in its inventory; the reference site does not."""
    from rackform.model.loader import load_site
    from rackform.render.project import render_files

    for site, expected in (("lab", False), ("reference", True)):
        project = tmp_path / site
        project.mkdir()
        (project / "ansible.cfg").write_bytes(render_files(load_site(site, repo_root))["ansible.cfg"])
        assert site_host_key_checking(project) is expected, site
