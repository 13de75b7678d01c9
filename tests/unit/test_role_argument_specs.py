"""Every role of the collection states what it reads in meta/argument_specs.yml: one option
per variable of its defaults/main.yml, with that default, a type the default fits and, where
the role accepts only some values, their choices. Ansible checks a role's variables against
its spec before the role's first task, so a wrong value stops the role with the variable
named. The roles' min_ansible_version is the collection's requires_ansible, which is
rackform's own ansible-core bound.

The last test runs a role with a wrong value through ansible-playbook (slow).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from collection_support import install_collection
from hang_limit import SUBPROCESS_HANG_S
from rackform.paths import ROLES_DIR, TEMPLATES_DIR

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "defaults" / "main.yml").exists())
TYPES = {"str", "list", "dict", "bool", "int", "float", "path", "raw"}
# A role entry point other than main, as a playbook names it: include_role's name, then tasks_from.
_INCLUDED_ROLE = re.compile(r"^\s*name:\s*rackform\.site\.(\w+)\s*\n\s*tasks_from:\s*(\S+)\s*$", re.MULTILINE)


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def _defaults(role: str) -> dict:
    return _yaml(ROLES_DIR / role / "defaults" / "main.yml") or {}


def _entry_points(role: str) -> dict:
    path = ROLES_DIR / role / "meta" / "argument_specs.yml"
    assert path.is_file(), f"roles/{role}/meta/argument_specs.yml is missing"
    return (_yaml(path) or {}).get("argument_specs") or {}


def _templated(value) -> bool:
    """A default Ansible works out per host ("{{ ... }}"), anywhere inside the value."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_templated(item) for item in value.values())
    if isinstance(value, list):
        return any(_templated(item) for item in value)
    return False


@pytest.mark.parametrize("role", ROLES)
def test_every_default_has_an_option_with_the_same_default(role):
    defaults = _defaults(role)
    for name, entry_point in _entry_points(role).items():
        options = entry_point.get("options") or {}
        assert sorted(set(defaults) - set(options)) == [], f"roles/{role}: entry point {name} lacks these defaults"
        assert sorted(set(options) - set(defaults)) == [], f"roles/{role}: entry point {name} names no such default"
        differing = {option: (spec.get("default"), defaults[option]) for option, spec in options.items()
                     if spec.get("default") != defaults[option]}
        assert differing == {}, f"roles/{role}: entry point {name}: spec default vs defaults/main.yml"


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_type_and_a_description(role):
    for name, entry_point in _entry_points(role).items():
        assert entry_point.get("short_description"), f"roles/{role}: entry point {name}"
        for option, spec in (entry_point.get("options") or {}).items():
            assert spec.get("type") in TYPES, f"roles/{role}: {option}: type {spec.get('type')!r}"
            assert str(spec.get("description") or "").strip(), f"roles/{role}: {option} has no description"
            if spec["type"] == "list":
                assert spec.get("elements") in TYPES, f"roles/{role}: {option}: a list names its elements"


@pytest.mark.parametrize("role", ROLES)
def test_the_literal_defaults_pass_their_own_spec(role):
    """Ansible's own validator, on every default that is not worked out per host: the type
    and choices a spec states are those the role ships with."""
    for name, entry_point in _entry_points(role).items():
        options = entry_point.get("options") or {}
        literal = {option: value for option, value in _defaults(role).items() if not _templated(value)}
        result = ArgumentSpecValidator({option: options[option] for option in literal}).validate(literal)
        assert result.error_messages == [], f"roles/{role}: entry point {name}"


def test_every_entry_point_a_playbook_names_has_a_spec():
    """`tasks_from: upgrade` runs the spec `upgrade`; under a name the spec lacks (`upgrade.yml`),
    Ansible checks nothing."""
    named = {(role, entry) for playbook in (TEMPLATES_DIR / "playbooks").glob("*.j2")
             for role, entry in _INCLUDED_ROLE.findall(playbook.read_text())}
    assert named, "the playbooks include another entry point of a role (kubeadm's upgrade): the test reads them"
    assert sorted((role, entry) for role, entry in named if entry not in _entry_points(role)) == []


def _lower_bound(specifier: str) -> Version:
    (bound,) = [Version(item.version) for item in SpecifierSet(specifier) if item.operator == ">="]
    return bound


def test_the_roles_need_the_ansible_core_the_collection_and_rackform_need():
    runtime = _yaml(TEMPLATES_DIR / "collection" / "meta" / "runtime.yml")
    required = _lower_bound(runtime["requires_ansible"])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = next(entry for entry in pyproject["project"]["dependencies"] if entry.startswith("ansible-core"))
    assert _lower_bound(core.removeprefix("ansible-core")) == required
    versions = {role: str(_yaml(ROLES_DIR / role / "meta" / "main.yml")["galaxy_info"]["min_ansible_version"])
                for role in ROLES}
    assert {role: version for role, version in versions.items() if Version(version) != required} == {}


# ---------------------------------------------------------------- a run checks its arguments

PLAYBOOK = """\
---
- name: Check a GPU node
  hosts: localhost
  gather_facts: false
  roles: [rackform.site.gpu_node]
"""


def _gpu_node(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    collections = install_collection(tmp_path / "collections")
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"),
                "ANSIBLE_NOCOLOR": "1"})
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
               # No nvidia-smi here: the role skips its GPU checks, so its run is short.
               "-e", f"gpu_node_nvidia_smi={tmp_path / 'no-nvidia-smi'}", "site.yml", *extra]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)


@pytest.mark.slow
@pytest.mark.parametrize("wrong, refused", [
    ("gpu_node_expected_count=eight", "gpu_node_expected_count"),
    ("gpu_node_dcgm_diag_level=9", "gpu_node_dcgm_diag_level must be one of"),
])
def test_a_run_refuses_a_wrong_value_before_the_first_task(tmp_path, wrong, refused):
    done = _gpu_node(tmp_path, "-e", wrong)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "Validation of arguments failed" in output and refused in output, output
    assert "ok=0" in output, output  # not one task of the role ran


@pytest.mark.slow
def test_a_run_with_the_defaults_passes_the_check(tmp_path):
    done = _gpu_node(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validating arguments against arg spec 'main'" in done.stdout
