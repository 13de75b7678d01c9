"""Shared by the fabric check unit tests: the `chktest` site (tests/unit/data/fabric_check/site)
in a repo root of its own, and its variant with an Onyx leaf."""

from __future__ import annotations

import shutil
from pathlib import Path

from rackform.model.loader import load_site
from rackform.model.site import Site

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "fabric_check"
SITE = "chktest"


def make_root(tmp_path: Path) -> Path:
    """tmp_path as a repo root holding the real catalog and the chktest site."""
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", tmp_path / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", tmp_path / "topologies" / "versions.yaml")
    shutil.copytree(DATA / "site", tmp_path, dirs_exist_ok=True)
    return tmp_path


def onyx_leaf_site(tmp_path: Path) -> Site:
    """chktest with leaf-1 running Onyx (its cabled ports renamed EthX/Y), loaded."""
    root = make_root(tmp_path)
    path = root / "topologies" / "sites" / f"{SITE}.yaml"
    text = path.read_text().replace("switch: {role: leaf, os: cumulus", "switch: {role: leaf, os: onyx")
    for old, new in (("leaf-1:swp1}", "leaf-1:Eth1/1}"), ("leaf-1:swp2}", "leaf-1:Eth1/2}"),
                     ("leaf-1:swp31,", "leaf-1:Eth1/31,")):
        text = text.replace(old, new)
    path.write_text(text)
    return load_site(SITE, root)
