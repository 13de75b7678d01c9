"""A deploy in an environment without the Ansible collections the roles call (ansible.posix,
community.general: `make install` puts them in) is refused before anything is rendered or run,
naming what is missing and the command that installs it (rackform.run.environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

import rackform.run.deploy as deploy_module
from rackform import cli, external_collections
from rackform.run import applied
from rackform.run.ansible import HostStats, RunResult


@pytest.fixture()
def runs(monkeypatch, tmp_path: Path) -> list[str]:
    calls: list[str] = []

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        calls.append(playbook)
        return RunResult(playbook, "successful", 0, {"mgmt-1": HostStats(ok=1)})

    monkeypatch.setattr(deploy_module, "run_playbook", run_playbook)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    monkeypatch.setenv(applied.STATE_DIR_ENV, str(tmp_path / "state"))
    return calls


def test_a_deploy_without_the_collections_is_refused_before_anything_runs(site_root: Path, runs, tmp_path,
                                                                            monkeypatch, capsys):
    bare = tmp_path / "bare-site-packages"
    bare.mkdir()
    monkeypatch.setattr(external_collections, "search_roots", lambda: [bare])
    assert cli.main(["deploy", "lab", "--root", str(site_root), "--stage", "storage"]) == 1
    err = capsys.readouterr().err
    wanted = external_collections.wanted_collections()
    for name, version in wanted.items():
        assert f"{name} {version}: not found in site-packages, sys.path or ~/.ansible/collections" in err
    assert "python -m rackform.external_collections --install" in err and "nothing was run" in err
    assert runs == [] and not (site_root / "build").exists()


def test_an_older_copy_is_named_with_where_it_lies(tmp_path):
    older = tmp_path / "older"
    folder = older / "ansible_collections" / "ansible" / "posix"
    folder.mkdir(parents=True)
    (folder / "MANIFEST.json").write_text('{"collection_info": {"version": "1.0.0"}}')
    assert external_collections.unfindable({"ansible.posix": "2.2.2"}, [older]) == [
        f"ansible.posix 2.2.2: only 1.0.0 in {older}"]


def test_collections_on_a_folder_a_pth_file_adds_are_found(tmp_path, monkeypatch):
    """As in a venv whose `.pth` line points at another folder of packages (ansible-core scans sys.path)."""
    elsewhere = tmp_path / "deps"
    folder = elsewhere / "ansible_collections" / "ansible" / "posix"
    folder.mkdir(parents=True)
    (folder / "MANIFEST.json").write_text('{"collection_info": {"version": "2.2.2"}}')
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.delenv("ANSIBLE_COLLECTIONS_PATH", raising=False)
    assert elsewhere in external_collections.search_roots()
    assert external_collections.unfindable({"ansible.posix": "2.2.2"}) == []


def test_with_the_collections_installed_the_same_deploy_runs(site_root: Path, runs):
    assert external_collections.unfindable() == [], "the test environment has them (make install)"
    assert cli.main(["deploy", "lab", "--root", str(site_root), "--stage", "storage"]) == 0
    assert runs
