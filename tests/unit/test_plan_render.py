"""`rackform plan` renders without the rack diagrams: no stage reads them, so every stage's
digest and inputs are those of the full render, and nothing else of the render changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.pipeline import load_and_check, stage_fingerprints
from rackform.render.digest import stage_files
from rackform.render.project import render_files
from rackform.stages import STAGE_NAMES

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(path.stem for path in (REPO / "topologies" / "sites").glob("*.yaml"))


@pytest.mark.parametrize("site_name", SHIPPED_SITES)
def test_a_render_without_diagrams_digests_as_the_full_one(site_name):
    site, _warnings = load_and_check(site_name, REPO)
    full, compared = render_files(site), render_files(site, diagrams=False)
    diagrams = {path for path in full if path.startswith("diagrams/")}
    assert diagrams and not any(path.startswith("diagrams/") for path in compared)
    assert {path: bytes(content) for path, content in full.items() if path not in diagrams} == {
        path: bytes(content) for path, content in compared.items()}
    assert stage_fingerprints(compared) == stage_fingerprints(full)
    for stage in STAGE_NAMES:
        try:
            assert not diagrams & set(stage_files(full, stage))
        except (ValueError, KeyError):  # no playbook of its own, or none rendered for this site
            continue
