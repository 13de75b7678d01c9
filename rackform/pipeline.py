"""The one pipeline both front doors drive: the `rackform` CLI and the Pulumi program.

load -> preflight checks -> render -> run stages in order -> verify. The stage order
is defined here once; the CLI, the emitted `site.yml` and the Pulumi resource
dependencies all read it from `STAGES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rackform.checks import Finding, run_checks
from rackform.model.loader import load_site
from rackform.model.site import Site
from rackform.model.source import BadInput, SourceError


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    playbook: str | None
    """The emitted playbook that runs it; None where Pulumi (not Ansible) acts."""
    summary: str


STAGES: tuple[Stage, ...] = (
    Stage("provision", "provision.yml", "BMCs reachable and hardened, hosts powered on from the right boot device"),
    Stage("fabric", "fabric.yml", "switch baseline and lossless RoCE on switches and hosts"),
    Stage("os", "os.yml", "base OS: hostname, /etc/hosts, time sync, sysctls, fabric MTU"),
    Stage("kubernetes", "kubernetes.yml", "container runtime and Kubernetes bootstrap"),
    Stage("platform", None, "GPU platform on the cluster (pulumi-kubernetes)"),
    Stage("verify", "verify.yml", "post-deploy checks on every host"),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)


class DesignRejected(Exception):
    """Preflight checks found errors: nothing may be rendered or run."""

    def __init__(self, findings: list[Finding]):
        super().__init__(f"{sum(f.severity == 'error' for f in findings)} error(s) in the site design")
        self.findings = findings


def load_and_check(site_name: str, root: Path = Path(".")) -> tuple[Site, list[Finding]]:
    """Load a site and run every preflight check.

    Raises BadInput for files that cannot be read as a design, DesignRejected when
    a check reports an error; returns the site and its warnings otherwise.
    """
    site = load_site(site_name, root)
    findings = run_checks(site)
    if any(finding.severity == "error" for finding in findings):
        raise DesignRejected(findings)
    return site, findings


def build_dir(root: Path, site_name: str) -> Path:
    return root / "build" / site_name


__all__ = ["STAGES", "STAGE_NAMES", "Stage", "DesignRejected", "load_and_check", "build_dir", "BadInput", "SourceError"]
