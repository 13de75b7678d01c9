"""Shared fixtures: the shipped lab site, and a writable copy of the repo's inputs.

`lab_files` is how a test makes a failing case: copy, edit one thing, reload.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rackform.model.loader import load_site
from rackform.model.site import Site

REPO_ROOT = Path(__file__).resolve().parents[1]
INPUT_FOLDERS = ("topologies", "inventories")


class SiteFiles:
    """A copy of the repo's topologies/ and inventories/ that a test may edit."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, relative: str) -> Path:
        return self.root / relative

    def read(self, relative: str) -> str:
        return self.path(relative).read_text(encoding="utf-8")

    def write(self, relative: str, text: str) -> None:
        path = self.path(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    def edit(self, relative: str, old: str, new: str) -> None:
        """Replace `old` (which must occur exactly once) with `new`."""
        text = self.read(relative)
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {relative}"
        self.write(relative, text.replace(old, new))

    def edit_site(self, old: str, new: str, site: str = "lab") -> None:
        self.edit(f"topologies/sites/{site}.yaml", old, new)

    def edit_host_vars(self, host: str, old: str, new: str, site: str = "lab") -> None:
        self.edit(f"inventories/{site}/host_vars/{host}.yml", old, new)

    def load(self, site: str = "lab") -> Site:
        return load_site(site, self.root)


def copy_inputs(destination: Path) -> Path:
    for folder in INPUT_FOLDERS:
        shutil.copytree(REPO_ROOT / folder, destination / folder)
    return destination


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture()
def lab_site(repo_root: Path) -> Site:
    """The shipped lab site, loaded from the repo itself."""
    return load_site("lab", repo_root)


@pytest.fixture()
def site_root(tmp_path: Path) -> Path:
    """A temporary repo root holding copies of topologies/ and inventories/."""
    return copy_inputs(tmp_path)


@pytest.fixture()
def lab_files(site_root: Path) -> SiteFiles:
    """Editable copies of the input files, with helpers to edit and reload a site."""
    return SiteFiles(site_root)


@pytest.fixture()
def fleet_root(tmp_path: Path, monkeypatch) -> Path:
    """A copy of the repo's sites to deploy without hosts: its own applied state
    (state/ under the copy), no cluster, and no lab seen as up on this machine."""
    from rackform.run import applied

    for folder in INPUT_FOLDERS:
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    monkeypatch.setenv(applied.STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    return tmp_path
