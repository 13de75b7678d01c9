"""The collection rackform.site used outside rackform: built into a tarball with
`ansible-galaxy collection build`, installed with `ansible-galaxy collection install` into
a temp collections path, and a role of it run from a five-line playbook by
ansible-playbook against localhost: nothing of rackform's render. Also: every role names
its inputs in defaults/main.yml, every module's documentation is what ansible-doc reads,
and the emitted project's requirements.yml pins the collections the roles use at the
releases the installed `ansible` package bundles.

Slow (each test starts ansible-playbook): `pytest -m slow`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import ansible_collections
import pytest
import yaml

from collection_support import install_collection
from hang_limit import SUBPROCESS_HANG_S
from rackform import __version__
from rackform.collection import PROJECT_DIR
from rackform.paths import PLUGINS_DIR, ROLES_DIR, TEMPLATES_DIR
from rackform.render.collection_files import collection_files

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "meta" / "main.yml").exists())
MODULES = sorted(path.stem for path in (PLUGINS_DIR / "modules").glob("*.py"))
PLAYBOOK = """\
---
- name: Use one rackform role
  hosts: localhost
  gather_facts: false
  roles: [rackform.site.{role}]
"""


def _environment(collections: Path, scratch: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_LOCAL_TEMP": str(scratch / ".ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    })
    return env


def _galaxy(*arguments: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run([str(Path(sys.executable).with_name("ansible-galaxy")), "collection", *arguments],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    """rackform-site-<version>.tar.gz, built by ansible-galaxy from the collection as projects carry it."""
    work = tmp_path_factory.mktemp("collection-build")
    source = install_collection(work / "source") / "ansible_collections" / "rackform" / "site"
    _galaxy("build", str(source), "--output-path", str(work / "dist"), cwd=work, env=_environment(work / "none", work))
    return work / "dist" / f"rackform-site-{__version__}.tar.gz"


@pytest.fixture(scope="module")
def installed(tarball: Path, tmp_path_factory) -> Path:
    """A collections path holding rackform.site as ansible-galaxy installs it from the tarball
    (--no-deps: the collections it depends on come with the `ansible` package, nothing is fetched)."""
    target = tmp_path_factory.mktemp("collections")
    _galaxy("install", "--no-deps", "-p", str(target), str(tarball), cwd=target, env=_environment(target, target))
    return target


def plain_project(tmp_path: Path, role: str) -> Path:
    """site.yml naming only the collection's role: nothing of rackform's render."""
    project = tmp_path / "plain"
    project.mkdir()
    (project / "site.yml").write_text(PLAYBOOK.format(role=role))
    return project


def playbook(project: Path, collections: Path, *arguments: str) -> subprocess.CompletedProcess:
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local",
               "-e", f"ansible_python_interpreter={sys.executable}", "site.yml", *arguments]
    return subprocess.run(command, cwd=project, env=_environment(collections, project), capture_output=True,
                          text=True, timeout=SUBPROCESS_HANG_S)


@pytest.mark.slow
def test_the_tarball_holds_the_collection_at_rackforms_version(tarball):
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]
    requirements = {name: f">={version}" for name, version in _requirements().items()}
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("rackform", "site", __version__)
    assert manifest["dependencies"] == requirements
    assert {"roles/kubeadm/tasks/main.yml", "plugins/modules/ipmi.py", "plugins/module_utils/rackform_ipmi_lan.py",
            "plugins/filter/pxe_server.py", "meta/runtime.yml", "CHANGELOG.md", "README.md", "LICENSE"} <= names


def test_the_collection_carries_rackforms_licence():
    """In every rendered project too, so a collection built from one has it."""
    assert collection_files()[f"{PROJECT_DIR}/LICENSE"] == (ROOT / "LICENSE").read_bytes()


@pytest.mark.slow
def test_the_tarball_carries_the_licence_its_manifest_names(tarball):
    """Apache-2.0 asks that a copy of the licence go with the work: the tarball's LICENSE is the repo's."""
    with tarfile.open(tarball) as archive:
        licence = archive.extractfile("LICENSE").read()
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]
    assert licence == (ROOT / "LICENSE").read_bytes()
    assert manifest["license"] == ["Apache-2.0"]


@pytest.mark.slow
def test_ansible_doc_reads_every_module_of_the_installed_collection(installed, tmp_path):
    names = [f"rackform.site.{module}" for module in MODULES]
    done = subprocess.run([str(Path(sys.executable).with_name("ansible-doc")), "-t", "module", "--json", *names],
                          env=_environment(installed, tmp_path), capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stderr
    documented = json.loads(done.stdout)
    assert sorted(documented) == names
    assert all(entry["doc"]["short_description"] for entry in documented.values())


def test_the_collection_needs_the_ansible_core_rackform_needs():
    runtime = yaml.safe_load((TEMPLATES_DIR / "collection" / "meta" / "runtime.yml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    core = next(entry for entry in pyproject["project"]["dependencies"] if entry.startswith("ansible-core"))
    lower, upper = re.fullmatch(r"ansible-core>=([\d.]+),<([\d.]+)", core).groups()
    assert runtime["requires_ansible"] == f">={lower}.0,<{upper}.0"


@pytest.mark.slow
def test_k8s_prereqs_from_a_plain_playbook_checks_without_changing(installed, tmp_path):
    project = plain_project(tmp_path, "k8s_prereqs")
    defaults = yaml.safe_load((ROLES_DIR / "k8s_prereqs" / "defaults" / "main.yml").read_text())
    written = [Path(defaults["k8s_prereqs_modules_file"]), Path(defaults["k8s_prereqs_sysctl_file"])]
    before = {path: path.exists() for path in written}

    syntax = playbook(project, installed, "--syntax-check")
    checked = playbook(project, installed, "--check")

    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(r"localhost\s*: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", checked.stdout), checked.stdout
    assert {path: path.exists() for path in written} == before


@pytest.mark.slow
def test_base_os_from_a_plain_playbook_passes_the_syntax_check(installed, tmp_path):
    """Syntax only: its handlers restart systemd units, which a container without systemd
    (this test's machine) cannot answer for, even in check mode."""
    project = plain_project(tmp_path, "base_os")
    (project / "files").mkdir()
    (project / "files" / "etc_hosts").write_text("127.0.0.1 localhost\n")

    syntax = playbook(project, installed, "--syntax-check")

    assert syntax.returncode == 0, syntax.stdout + syntax.stderr


@pytest.mark.slow
def test_gpu_node_from_a_plain_playbook_runs_for_real(installed, tmp_path):
    project = plain_project(tmp_path, "gpu_node")
    absent = f"gpu_node_nvidia_smi={tmp_path / 'no-nvidia-smi'}"

    skipped = playbook(project, installed, "-e", absent)
    required = playbook(project, installed, "-e", absent, "-e", "gpu_node_require_gpus=true")

    assert skipped.returncode == 0 and "GPU checks SKIPPED on localhost" in skipped.stdout, skipped.stdout + skipped.stderr
    assert required.returncode == 2 and "gpu_node_require_gpus is set" in required.stdout, required.stdout


@pytest.mark.slow
def test_validate_inventory_from_a_plain_playbook_refuses_a_former_kube_name(installed, tmp_path):
    project = plain_project(tmp_path, "validate_inventory")
    machine = {"ansible_host": "127.0.0.1", "management_address": "127.0.0.1", "rack_name": "r1", "rack_position_u": 1,
               "site_name": "plain", "site_domain": "plain.test", "site_timezone": "Etc/UTC",
               "site_etc_hosts_block": "", "fabric_roce_priority": 3, "fabric_roce_dscp": 26}
    (project / "machine.yml").write_text(yaml.safe_dump(machine))

    valid = playbook(project, installed, "-e", "@machine.yml")
    renamed = playbook(project, installed, "-e", "@machine.yml", "-e", "kube_cni=calico")

    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert renamed.returncode == 2 and "renamed: kube_cni: use kube_network_plugin" in renamed.stdout, renamed.stdout


@pytest.mark.parametrize("role", ROLES)
def test_every_role_names_its_settings_in_defaults(role):
    text = (ROLES_DIR / role / "defaults" / "main.yml").read_text()

    assert text.startswith("---\n# "), f"roles/{role}/defaults/main.yml must open with a comment saying what the role does"
    assert isinstance(yaml.safe_load(text), dict)


def _requirements() -> dict[str, str]:
    data = yaml.safe_load((TEMPLATES_DIR / "project" / "requirements.yml.j2").read_text())
    return {entry["name"]: entry["version"] for entry in data["collections"]}


def test_requirements_pin_the_collections_the_installed_ansible_bundles():
    bundled = Path(next(iter(ansible_collections.__path__)))
    installed = {}
    for name in _requirements():
        manifest = json.loads((bundled / name.replace(".", "/") / "MANIFEST.json").read_text())
        installed[name] = manifest["collection_info"]["version"]

    assert _requirements() == installed


def test_requirements_name_every_collection_the_roles_use():
    used = set()
    for path in ROLES_DIR.rglob("*"):
        if path.suffix in (".yml", ".j2") and path.is_file():
            used |= set(re.findall(r"\b(community\.[a-z_]+|ansible\.(?!builtin\b|module_utils\b)[a-z_]+)\.[a-z_]+", path.read_text()))

    assert used and used <= set(_requirements()), sorted(used - set(_requirements()))
