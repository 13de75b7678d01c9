"""Preflight checks: the GPU platform. The site's Kubernetes version and the component
releases it chooses (topologies/platform/<site>.yaml) against the one compatibility
matrix, topologies/versions.yaml: unsupported minors and known-incompatible pairs are
refused, pointing at the line that chose the version and the matrix rule it broke."""

from __future__ import annotations

from collections.abc import Iterator

from rackform.checks import check
from rackform.checks.findings import Finding
from rackform.k8s.platform import load_platform
from rackform.k8s.versions import Conflict, conflicts, load_matrix
from rackform.model.site import Site
from rackform.model.source import Loc, SourceError


@check
def platform_versions(site: Site) -> Iterator[Finding]:
    """Every chosen component release supports the site's Kubernetes minor and no pair is incompatible."""
    if site.kubernetes is None or site.kubernetes_loc is None:
        return
    root = site.site_path.parent.parent.parent
    try:
        matrix = load_matrix(root)
        design = load_platform(site)
    except SourceError as error:
        yield Finding("platform_versions", "error", error.loc, error.key or "platform", error.message)
        return
    for conflict in conflicts(matrix, site.kubernetes.version, matrix.chosen(design.versions)):
        version_loc = site.origin("kubernetes.version", site.kubernetes_loc)
        yield Finding("platform_versions", "error", _chosen_at(conflict, design.version_locs, version_loc),
                      _key(conflict, design.version_locs), f"{conflict.message} [matrix: {conflict.matrix_loc}]")


def _chosen_at(conflict: Conflict, version_locs: dict[str, Loc], kubernetes_loc: Loc) -> Loc:
    """The platform file's line that chose the offending release; else the line that set
    kubernetes.version (the site's, a profile's or the version matrix's default)."""
    return version_locs.get(conflict.component, kubernetes_loc)


def _key(conflict: Conflict, version_locs: dict[str, Loc]) -> str:
    if conflict.component in version_locs:
        return f"platform.versions.{conflict.component}"
    return "kubernetes.version"
