"""rackform.installed_tools: the tools the set-up installs beside rackform are found there
first, then on PATH, and the processes rackform starts see that folder first too."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from rackform import installed_tools
from rackform.installed_tools import environment_bin, find_tool, not_found, search_path
from rackform.run.ansible import run_environment


def tool(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("#!/bin/sh\nexit 0\n")
    (folder / name).chmod(0o755)
    return folder / name


@pytest.fixture()
def beside(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "venv-bin"
    folder.mkdir()
    monkeypatch.setattr(installed_tools, "environment_bin", lambda: folder)
    return folder


def test_the_folder_is_the_one_rackform_runs_from():
    """`sys.prefix`/bin: in a venv, where its python and `rackform` are, activated or not."""
    assert environment_bin() == Path(sys.prefix) / "bin"
    assert (environment_bin() / Path(sys.executable).name).exists()


def test_a_tool_beside_rackform_wins_over_one_on_path(beside: Path, tmp_path: Path):
    ours = tool(beside, "helm")
    tool(tmp_path / "elsewhere", "helm")
    assert find_tool("helm", path=str(tmp_path / "elsewhere")) == str(ours)


def test_path_is_asked_when_nothing_is_beside_rackform(beside: Path, tmp_path: Path, monkeypatch):
    theirs = tool(tmp_path / "elsewhere", "kubectl")
    assert find_tool("kubectl", path=str(tmp_path / "elsewhere")) == str(theirs)
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert find_tool("kubectl") == str(theirs)
    assert find_tool("promtool") is None


def test_a_child_gets_the_folder_first_once(beside: Path):
    assert search_path(f"/usr/bin{os.pathsep}{beside}{os.pathsep}{os.pathsep}/bin") == os.pathsep.join(
        [str(beside), "/usr/bin", "/bin"])
    assert search_path("") == str(beside)


def test_ansible_runner_gets_the_folder_first(beside: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin")
    assert run_environment(tmp_path)["PATH"] == os.pathsep.join([str(beside), "/usr/bin"])


def test_a_missing_tool_says_where_it_was_looked_for(beside: Path):
    assert not_found(["helm"]) == (f"helm not found in {beside} (where the set-up puts it: docs/install.md) "
                                   f"nor on PATH")


def test_day_two_drains_with_the_kubectl_beside_rackform(beside: Path, tmp_path: Path, monkeypatch):
    from rackform.run import cluster

    kubeconfig = tmp_path / "build" / "lab" / "artifacts" / "kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert cluster.find(kubeconfig.parents[1]).absent == f"{not_found(['kubectl'])}: nothing was cordoned or drained"
    tool(beside, "kubectl")
    found = cluster.find(kubeconfig.parents[1])
    assert (found.absent, found.cordon("gpu-1")) == (None, (True, ""))


BY_NAME_ALONE = re.compile(r'(shutil\.which\(\s*|(run|Popen|check_output|check_call|call)\(\s*\[\s*)'
                           r'"(kubectl|helm|promtool|pulumi)"')
"""A lookup of a set-up tool on PATH only, or a run of one by its bare name."""


def test_no_module_finds_a_set_up_tool_on_path_alone():
    package = Path(installed_tools.__file__).parent
    found = [f"{path.relative_to(package.parent)}:{text[:match.start()].count(chr(10)) + 1}"
             for path in sorted(package.rglob("*.py")) if "_assets" not in path.parts
             for text in [path.read_text(encoding="utf-8")] for match in BY_NAME_ALONE.finditer(text)]
    assert found == []
