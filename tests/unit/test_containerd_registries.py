"""The containerd role's registry folders, written for real: its `registries` tasks run by
ansible-playbook on this machine into a temporary folder standing in for
/etc/containerd/certs.d (slow: a few playbook runs).

What it proves: each registry name gets its folder and hosts.toml, a second run changes
nothing, a name dropped later (a connected site made air-gapped) loses its folder, and a
folder the role did not write (an operator's own registry) is left alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from collection_support import install_collection
from hang_limit import SUBPROCESS_HANG_S

pytestmark = pytest.mark.slow

MIRROR = "10.1.0.11:5000"
PLAYBOOK = """\
- name: The registries containerd is told about
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Registry folders
      ansible.builtin.include_role:
        name: rackform.site.containerd
        tasks_from: registries
"""


def run_registries(tmp_path: Path, certs_d: Path, *, air_gapped: bool) -> str:
    collections = tmp_path / "collections"
    if not collections.exists():
        install_collection(collections)
        (tmp_path / "site.yml").write_text(PLAYBOOK)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"),
                "ANSIBLE_NOCOLOR": "1"})
    variables = ["-e", f"containerd_hosts_dir={certs_d}", "-e", f"containerd_config_dir={tmp_path}",
                 "-e", f"site_mirror_registry={MIRROR}", "-e", f"site_mirror_air_gapped={air_gapped}",
                 "-e", '{"site_mirror_upstream_registries": ["registry.example", "images.example"]}',
                 "-e", "group_names=[]"]
    done = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", *variables, "site.yml"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def changed(output: str) -> int:
    return int(re.search(r"changed=(\d+)", output).group(1))


def folders(certs_d: Path) -> list[str]:
    return sorted(path.name for path in certs_d.iterdir() if path.is_dir())


def test_registry_folders_are_written_kept_and_pruned(tmp_path):
    certs_d = tmp_path / "certs.d"
    operators_own = certs_d / "own.example" / "hosts.toml"
    operators_own.parent.mkdir(parents=True)
    operators_own.write_text('server = "https://own.example"\n')

    first = run_registries(tmp_path, certs_d, air_gapped=False)
    assert folders(certs_d) == sorted([MIRROR, "images.example", "own.example", "registry.example"])
    assert tomllib.loads((certs_d / MIRROR / "hosts.toml").read_text()) == {
        "server": f"http://{MIRROR}", "capabilities": ["pull", "resolve"]}
    assert tomllib.loads((certs_d / "registry.example" / "hosts.toml").read_text()) == {
        "host": {f"http://{MIRROR}": {"capabilities": ["pull", "resolve"]}}}
    assert changed(first) > 0

    assert changed(run_registries(tmp_path, certs_d, air_gapped=False)) == 0

    run_registries(tmp_path, certs_d, air_gapped=True)
    assert folders(certs_d) == sorted([MIRROR, "own.example"])
    assert operators_own.read_text() == 'server = "https://own.example"\n'
    assert (certs_d / ".rackform-registries").read_text().splitlines()[1:] == [MIRROR]
