"""Preflight checks: the GPU platform. The site's Kubernetes version and the component
releases it chooses (topologies/platform/<site>.yaml) against the one compatibility
matrix, topologies/versions.yaml: unsupported minors and known-incompatible pairs are
refused, pointing at the line that chose the version and the matrix rule it broke."""

from __future__ import annotations

from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.k8s.platform import load_platform
from rackform.model.versions import Conflict, conflicts, load_matrix
from rackform.model.site import Host, Site
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


def _platform_design(site: Site):
    """The site's platform design, or None: no cluster, or a platform file platform_versions reports."""
    if site.kubernetes is None:
        return None
    try:
        return load_platform(site)
    except SourceError:
        return None


@check
def platform_tenants(site: Site) -> Iterator[Finding]:
    """The tenants' guaranteed GPUs fit in the site's GPUs, and the releases named are the platform's."""
    from rackform.k8s.manifests import PLATFORM_COMPONENTS
    from rackform.k8s.queues import site_gpus

    design = _platform_design(site)
    if design is None:
        return
    for name in design.releases or ():
        if name not in PLATFORM_COMPONENTS:
            yield Finding("platform_tenants", "error", design.releases_loc or site.loc, "platform.releases",
                          f"'{name}' is not a platform component; expected some of {', '.join(PLATFORM_COMPONENTS)}")
    total, guaranteed = site_gpus(site), sum(tenant.gpus for tenant in design.tenants)
    if guaranteed > total:
        last = design.tenants[-1]
        shares = ", ".join(f"{tenant.name} {tenant.gpus}" for tenant in design.tenants)
        yield Finding("platform_tenants", "error", last.loc, "platform.tenants",
                      f"the tenants are guaranteed {guaranteed} GPUs ({shares}) but the site has {total}: a guarantee "
                      f"is a queue's nominal quota, and the queues could not all get theirs; lower them or add GPU blocks")
    if design.tenants and "kueue" not in (design.releases or PLATFORM_COMPONENTS):
        yield Finding("platform_tenants", "warning", design.releases_loc or design.loc or site.loc, "platform.releases",
                      "Kueue is not installed: the tenants get their GPU quota ceilings but no queues, no borrowing "
                      "and no fair share")


def all_flash(host: Host) -> bool:
    """A storage host with drives, none of them HDD: the flash tier, whose use is block volumes."""
    node = host.block.node
    return node is not None and bool(node.drives) and all(drives.media != "hdd" for drives in node.drives)


@check
def platform_storage_classes(site: Site) -> Iterator[Finding]:
    """All-flash storage hosts with no StorageClass to carve volumes from them: a warning per host.

    Their data sets are served over NFS like any other (static volumes, no class); what has no
    class is NVMe-oF block volumes, which need a CSI driver rackform does not install or choose.
    """
    design = _platform_design(site)
    if design is None or design.storage_classes:
        return
    for host in sorted(site.hosts_in_role("storage"), key=lambda h: h.name):
        if all_flash(host):
            yield Finding("platform_storage_classes", "warning", host.loc, "platform.storage_classes",
                          f"{host.name} is all-flash ({host.block.name}) but the platform design names no "
                          f"StorageClass: NVMe-oF volumes from it need a CSI driver the design must name "
                          f"(storage_classes: name, provisioner, parameters in topologies/platform/{site.name}.yaml); "
                          f"its NFS data sets need none")
