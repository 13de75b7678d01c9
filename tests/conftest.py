"""Shared fixtures: the shipped lab site, a writable copy of the repo's inputs, and
rackform as a user installs it (a wheel in a fresh virtualenv).

`lab_files` is how a test makes a failing case: copy, edit one thing, reload.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform.model.loader import load_site
from rackform.model.site import Site

REPO_ROOT = Path(__file__).resolve().parents[1]
INPUT_FOLDERS = ("topologies", "inventories")
LAB_KUBERNETES_PIN = '  version: "1.36.1"\n'
"""The lab's own kubernetes.version line: one patch behind the matrix default, so its tests can upgrade it."""


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

    def pin_lab_kubernetes(self, version: str | None) -> None:
        """Replace the lab's kubernetes.version pin with `version`; None removes it (the matrix default)."""
        self.edit_site(LAB_KUBERNETES_PIN, "" if version is None else f'  version: "{version}"\n')

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


@pytest.fixture(scope="session")
def make_site_files():
    """`make_site_files(folder)`: SiteFiles over a fresh copy of the repo's inputs in `folder`, for
    fixtures wider than one test (a test module's own edited site)."""
    return lambda destination: SiteFiles(copy_inputs(destination))


@pytest.fixture()
def built_bundles(tmp_path_factory, monkeypatch) -> Path:
    """A controller that ran `rackform mirror build` for every release the matrix carries: a
    bundles folder (here: only each bundle's manifest, no artifacts), which a deploy of a stage
    serving the site mirror needs (rackform.run.bundle_preflight). A child rackform finds it
    through $RACKFORM_MIRROR_BUNDLES."""
    from rackform.k8s.versions import load_matrix
    from rackform.mirror import bundle
    from rackform.mirror.manifest import Manifest

    bundles = tmp_path_factory.mktemp("bundles")
    for version in load_matrix(REPO_ROOT).carried:
        folder = bundle.bundle_path(version, bundles)
        folder.mkdir()
        Manifest(version, "source").write(folder)
    monkeypatch.setattr(bundle, "BUNDLES_DIR", bundles)
    monkeypatch.setenv("RACKFORM_MIRROR_BUNDLES", str(bundles))
    return bundles


STAND_IN_TOOL = "#!/bin/sh\nexit 0\n"


@pytest.fixture()
def tools_beside_rackform(tmp_path_factory, monkeypatch):
    """`tools_beside_rackform(names, script=STAND_IN_TOOL)`: the folder rackform finds its set-up's
    tools in first (rackform.installed_tools.environment_bin, `.venv/bin` for real) becomes a
    fresh one holding only these stand-ins, so what a test sees is the same whether or not this
    machine ran `make install` (no real helm or kubectl is ever run). Returns the folder."""
    from rackform import installed_tools

    def install(names=(), script: str = STAND_IN_TOOL) -> Path:
        folder = tmp_path_factory.mktemp("tools")
        for name in names:
            (folder / name).write_text(script)
            (folder / name).chmod(0o755)
        monkeypatch.setattr(installed_tools, "environment_bin", lambda: folder)
        return folder

    return install


@pytest.fixture()
def fleet_root(tmp_path: Path, monkeypatch, built_bundles, tools_beside_rackform) -> Path:
    """A copy of the repo's sites to deploy without hosts: its own applied state
    (state/ under the copy), the site mirror's bundles built, kubectl and helm beside
    rackform (stand-ins that do nothing), no cluster, and no lab seen as up on this machine."""
    tools_beside_rackform(["kubectl", "helm"])
    from rackform.run import applied

    for folder in INPUT_FOLDERS:
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder)
    monkeypatch.setenv(applied.STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    return tmp_path


# ---------------------------------------------------------------- rackform installed from a wheel


@pytest.fixture(scope="session")
def rackform_wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the checkout without build/ and .venv/ (what a clone holds)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source") / "rackform"
    shutil.copytree(REPO_ROOT, source, symlinks=True,
                    ignore=shutil.ignore_patterns(".venv", "build", ".git", "__pycache__", ".pytest_cache", "state"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    (built,) = out.glob("rackform-*.whl")
    return built


@dataclass(frozen=True)
class InstalledTool:
    """The `rackform` of a fresh virtualenv holding the wheel."""

    bin_dir: Path

    def run(self, *args: str, cwd: Path, timeout_s: float = SUBPROCESS_HANG_S) -> subprocess.CompletedProcess:
        """`rackform ARGS` in cwd, with the venv's bin first on PATH and no PYTHONPATH (no checkout)."""
        path = f"{self.bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        env = {**os.environ, "PATH": path}
        env.pop("PYTHONPATH", None)
        return subprocess.run([str(self.bin_dir / "rackform"), *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout_s)


@pytest.fixture(scope="session")
def installed_rackform(rackform_wheel: Path, tmp_path_factory, request) -> InstalledTool:
    """A fresh venv with the wheel in it and the dependencies its metadata names, as pip
    installs them from PyPI (tests/wheel_venv.py: kept between sessions in pytest's cache)."""
    from wheel_venv import dependencies_venv, install_wheel

    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache_dir = cache.mkdir("rackform-wheel-deps") if cache is not None else tmp_path_factory.mktemp("wheel-deps")
    dependencies = dependencies_venv(rackform_wheel, REPO_ROOT / "requirements.lock", Path(cache_dir))
    return InstalledTool(install_wheel(rackform_wheel, dependencies, tmp_path_factory.mktemp("venv") / "env"))
