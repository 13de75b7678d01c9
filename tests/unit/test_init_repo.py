"""`rackform init DIR` as a new user meets it: a git repository to commit, a README that names
no path of this machine, and a first `validate` whose findings point at files that exist and
that the user can act on. (Its Pulumi.yaml: test_init_pulumi.py.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackform.checks.runner import run_checks
from rackform.cli import main
from rackform.commands import init
from rackform.model.loader import load_site
from rackform.model.versions import MATRIX_PATH, load_matrix
from rackform.paths import PACKAGE_DIR

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git: init runs `git init` where it can")


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("outside") / "sites"
    assert main(["init", str(repo)]) == 0
    return repo


@needs_git
def test_init_makes_a_git_repository_and_says_so(tmp_path: Path, capsys):
    assert main(["init", str(tmp_path / "sites")]) == 0
    assert f"rackform init: made {tmp_path / 'sites'} a git repository: commit it" in capsys.readouterr().out
    top = subprocess.run(["git", "-C", str(tmp_path / "sites"), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert Path(top) == (tmp_path / "sites").resolve()
    ignored = subprocess.run(["git", "-C", str(tmp_path / "sites"), "check-ignore", "-q", "state/lab.json"],
                             timeout=60)
    assert ignored.returncode == 1, "state/ is committed"


@needs_git
def test_a_folder_inside_a_repository_gets_no_second_one(tmp_path: Path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    assert main(["init", str(tmp_path / "infra" / "sites")]) == 0
    assert f"is inside the git repository {tmp_path.resolve()}: no new one was made" in capsys.readouterr().out
    assert not (tmp_path / "infra" / "sites" / ".git").exists()


def test_without_git_the_repo_is_written_and_that_is_said(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr(init.shutil, "which", lambda name: None)
    assert main(["init", str(tmp_path / "sites")]) == 0
    assert "git is not installed: no git repository was made" in capsys.readouterr().out
    assert (tmp_path / "sites" / "README.md").is_file() and not (tmp_path / "sites" / ".git").exists()


def test_the_readme_names_no_path_of_this_machine(sites: Path):
    readme = (sites / "README.md").read_text()
    for path in (sys.prefix, PACKAGE_DIR, PACKAGE_DIR.parent):
        assert str(path) not in readme
    assert "`pip show rackform`" in readme


def test_the_new_site_validates_without_a_warning(sites: Path):
    """edge has no GPUs, so no RDMA rails: that its mirror carries no Multus costs it nothing."""
    assert [str(finding) for finding in run_checks(load_site("edge", sites))] == []


def test_a_finding_on_the_built_in_matrix_names_a_file_that_exists(sites: Path):
    """The repo has no topologies/versions.yaml: the matrix's lines are named by the packaged
    file's full path, not by a name that is not in the repo."""
    assert not (sites / MATRIX_PATH).exists()
    where = load_matrix(sites).kubernetes_default_loc
    assert Path(where.path).is_absolute() and Path(where.path).is_file()
    assert Path(where.path).read_text().splitlines()[where.line - 1].strip().startswith("default:")
    assert load_site("edge", sites).origin("kubernetes.version", None) == where


def test_a_site_with_rdma_rails_is_told_its_mirror_lacks_multus(lab_files):
    warnings = [finding for finding in run_checks(lab_files.load()) if finding.check == "mirror_carries_multus"]
    assert len(warnings) == 1 and "a site without `mirror:` pulls the published image" in warnings[0].message


def test_a_folder_holding_a_program_folder_is_refused_and_left_as_it_was(tmp_path: Path, capsys):
    """stacks/ is the Pulumi program folder init writes: one of the user's is not overwritten."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "__main__.py").write_text("mine\n")
    assert main(["init", str(tmp_path)]) == 2
    assert "already holds stacks; nothing was written" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["stacks"]
    assert (tmp_path / "stacks" / "__main__.py").read_text() == "mine\n"
