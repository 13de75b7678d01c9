"""The one pipeline both front doors drive: the `rackform` CLI and the Pulumi program.

load -> preflight checks -> render -> run stages in order -> verify. The stage order
is defined once, in `rackform.stages` (offered here too as `STAGES`); the CLI, the
emitted `site.yml` and the Pulumi resource dependencies all read it. Running stages
is one function, `rackform.run.stages.run_stages`, called by `rackform deploy` and by
the Pulumi `Playbook` provider alike; `stage_digests` is what both record and compare.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from rackform.checks.findings import Finding
from rackform.checks.runner import run_checks
from rackform.gc_pause import cyclic_gc_paused
from rackform.model.loader import load_site
from rackform.model.site import Site
from rackform.model.source import BadInput, SourceError
from rackform.stages import (NOT_APPLICABLE, STAGE_NAMES, STAGES, STORAGE_STAGE, VERIFY_STAGE, Stage,
                             stage_not_applicable)


class DesignRejected(Exception):
    """Preflight checks found errors: nothing may be rendered or run."""

    def __init__(self, findings: list[Finding]):
        super().__init__(f"{sum(f.severity == 'error' for f in findings)} error(s) in the site design")
        self.findings = findings


def load_and_check(site_name: str, root: Path = Path(".")) -> tuple[Site, list[Finding]]:
    """Load a site and run every preflight check.

    Raises BadInput for files that cannot be read as a design, DesignRejected when
    a check reports an error (the design's, then those of its rendered files:
    `rendered_findings`); returns the site and its warnings otherwise.
    """
    site = load_site(site_name, root)
    findings = run_checks(site)
    if not any(finding.severity == "error" for finding in findings):
        findings.extend(rendered_findings(site))
    if any(finding.severity == "error" for finding in findings):
        raise DesignRejected(findings)
    return site, findings


def rendered_findings(site: Site) -> list[Finding]:
    """Checks of what the site renders to, in memory (nothing is written): an air-gapped site's
    project names no upstream address (rackform.checks.airgap). Run once the design checks pass."""
    from rackform.checks.airgap import upstream_findings
    from rackform.k8s.site_mirror import air_gapped

    if not air_gapped(site):
        return []
    from rackform.render.project import render_files

    return upstream_findings(site, render_files(site))


def build_dir(root: Path, site_name: str) -> Path:
    return Path(root) / "build" / site_name


def stage_digests(files: Mapping[str, bytes]) -> dict[str, str]:
    """Stage -> digest of the rendered files it reads (`rackform.render.digest.stage_contents`).

    verify checks what every stage before it did, so its digest also covers theirs:
    it runs again whenever any earlier stage would. A stage with nothing to hash
    (no playbook and no files of its own) has no digest.
    """
    return {stage: digest for stage, (digest, _inputs) in stage_fingerprints(files).items()}


def stage_inputs(files: Mapping[str, bytes], stages: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
    """Stage -> {path: short sha256 of what the stage reads of it}: recorded with the digest,
    so `rackform plan` can name the files that changed since a stage was applied."""
    return {stage: inputs for stage, (_digest, inputs) in stage_fingerprints(files).items()
            if stages is None or stage in stages}


def stage_fingerprints(files: Mapping[str, bytes]) -> dict[str, tuple[str, dict[str, str]]]:
    """Stage -> (digest, {path: short hash}) in one pass over what each stage reads."""
    with cyclic_gc_paused():  # hashing only allocates, as render does (rackform.gc_pause)
        return _stage_fingerprints(files)


def _stage_fingerprints(files: Mapping[str, bytes]) -> dict[str, tuple[str, dict[str, str]]]:
    from rackform.render.digest import digest_of, stage_contents

    files = dict(files)
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for stage in STAGES:
        if stage.playbook is not None and stage.playbook not in files:
            continue  # a project rendered without this stage's playbook
        try:
            contents = stage_contents(files, stage.name)
        except ValueError:
            continue
        inputs = {path: hashlib.sha256(content).hexdigest()[:INPUT_HASH_CHARS] for path, content in contents.items()}
        found[stage.name] = (digest_of(contents), inputs)
    if VERIFY_STAGE in found:  # after every stage it checks (STAGES order)
        chained = hashlib.sha256()
        for name, (digest, _inputs) in found.items():
            chained.update(f"{name}\0{digest}\0".encode())
        found[VERIFY_STAGE] = (chained.hexdigest(), found[VERIFY_STAGE][1])
    return found


INPUT_HASH_CHARS = 16
"""64 bits of sha256 per file: enough to tell versions of one file apart, short in state files."""


__all__ = ["STAGES", "STAGE_NAMES", "Stage", "NOT_APPLICABLE", "STORAGE_STAGE", "VERIFY_STAGE", "stage_not_applicable",
           "DesignRejected", "load_and_check", "build_dir", "stage_digests", "stage_inputs", "BadInput", "SourceError"]
