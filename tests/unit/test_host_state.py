"""rackform.site.host_state (plugins/modules/host_state.py): the read-only look that lets a converged
host skip a role's tasks. Every kind of item must report a difference when the host
differs (a missed difference would skip a needed change), and the module must change
nothing, also when Ansible runs it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collection_support import install_collection
from hang_limit import SUBPROCESS_HANG_S

ROOT = Path(__file__).resolve().parents[2]
MODULE_FILE = ROOT / "plugins" / "modules" / "host_state.py"
GUARDED_ROLES = ("base_os", "roce_host", "k8s_prereqs", "containerd", "switch_baseline")


def _load_module():
    spec = importlib.util.spec_from_file_location("rackform_host_state", MODULE_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


host_state = _load_module()
EMPTY = {"files": [], "directories": [], "paths_exist": [], "values": {}, "sysctl_files": {},
         "units_enabled": [], "units_active": [], "symlinks": {}, "packages_installed": [], "lines": []}


def differences(**params) -> list[str]:
    return host_state.host_differences({**EMPTY, **params})


def test_a_file_with_the_wanted_content_and_mode_is_converged(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n")
    path.chmod(0o644)
    assert differences(files=[{"path": str(path), "content": "127.0.0.1 localhost\n", "mode": "0644"}]) == []


@pytest.mark.parametrize(("content", "mode", "why"), [
    ("127.0.0.1 localhost", 0o644, "content differs"),   # a trailing newline is content too
    ("127.0.0.1 localhost\n", 0o600, "mode 0600, want 0644"),
])
def test_a_file_that_differs_is_reported(tmp_path, content, mode, why):
    path = tmp_path / "hosts"
    path.write_text(content)
    path.chmod(mode)
    found = differences(files=[{"path": str(path), "content": "127.0.0.1 localhost\n", "mode": "0644"}])
    assert len(found) == 1 and why in found[0]


def test_missing_file_directory_path_and_owner_are_reported(tmp_path):
    missing = str(tmp_path / "nope")
    found = differences(files=[{"path": missing, "content": ""}], directories=[{"path": missing}],
                        paths_exist=[missing])
    assert len(found) == 3
    (tmp_path / "d").mkdir()
    owner = "root" if os.getuid() != 0 else "daemon"   # never the directory's owner
    assert "owner differs" in differences(directories=[{"path": str(tmp_path / "d"), "owner": owner}])[0]


def test_values_compare_whitespace_runs_as_one_space(tmp_path):
    path = tmp_path / "tcp_rmem"
    path.write_text("4096\t87380\t134217728\n")
    assert differences(values={str(path): "4096 87380 134217728"}) == []
    assert differences(values={str(path): "4096 87380 6291456"}) != []


def test_sysctl_file_keys_are_read_as_the_sysctl_module_reads_them(tmp_path):
    path = tmp_path / "90.conf"
    path.write_text("# comment\nnet.ipv4.tcp_ecn = 1\nnet.ipv4.tcp_rmem=4096 87380  134217728\n")
    wanted = {"net.ipv4.tcp_ecn": 1, "net.ipv4.tcp_rmem": "4096 87380 134217728"}
    assert differences(sysctl_files={str(path): wanted}) == []
    assert differences(sysctl_files={str(path): {**wanted, "net.ipv4.tcp_mtu_probing": 1}}) != []
    assert differences(sysctl_files={str(path): {**wanted, "net.ipv4.tcp_ecn": 2}}) != []


def test_lines_with_a_regexp_look_at_the_last_match_as_lineinfile_does(tmp_path):
    path = tmp_path / "daemons"
    spec = {"path": str(path), "line": "bgpd=yes", "regexp": "^bgpd="}
    path.write_text("zebra=yes\nbgpd=yes\n")
    assert differences(lines=[spec]) == []
    path.write_text("bgpd=yes\nbgpd=no\n")   # lineinfile would rewrite the last one
    assert differences(lines=[spec]) != []
    path.write_text("zebra=yes\n")
    assert differences(lines=[spec, {"path": str(path), "line": "source /x/*.intf"}]) != []
    assert len(differences(lines=[spec, {"path": str(path), "line": "source /x/*.intf"}])) == 2


def test_symlink_target_ending(tmp_path):
    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/Etc/UTC")
    assert differences(symlinks={str(link): "zoneinfo/Etc/UTC"}) == []
    assert differences(symlinks={str(link): "zoneinfo/Europe/Paris"}) != []


def test_the_module_run_by_ansible_reports_and_changes_nothing(tmp_path):
    path = tmp_path / "conf"
    path.write_text("old\n")
    args = {"files": [{"path": str(path), "content": "new\n"}], "values": {str(path): "old"}}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local",
         "-m", "rackform.site.host_state", "-a", json.dumps(args), "--check", "-o"],
        capture_output=True, text=True, timeout=SUBPROCESS_HANG_S, check=False,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(install_collection(tmp_path / "collections")),
             "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"})
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout.split("=>", 1)[1])
    assert reply["changed"] is False and reply["converged"] is False
    assert reply["differences"] == [f"{path}: content differs"]
    assert path.read_text() == "old\n"


@pytest.mark.parametrize("role", GUARDED_ROLES)
def test_guarded_roles_call_host_state_first_and_register_its_answer(role):
    import yaml

    first = yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text())[0]
    assert "rackform.site.host_state" in first and first["register"] == f"{role}_state"
