"""Preflight checks: the site mirror. Its machine is a server of the site or an address on
one of the site's networks, and the Kubernetes release the site pins is one the mirror
carries (topologies/versions.yaml, kubernetes.carried).

Whether an air-gapped site's rendered project names an upstream address is checked on the
rendered files themselves, after these checks pass (rackform.checks.airgap)."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.versions import Matrix, load_matrix
from rackform.model.site import Site
from rackform.model.source import Loc, SourceError


def _loc(site: Site, key: str) -> Loc:
    """The line that set `mirror.<key>` (the site's, a profile's); the section's otherwise."""
    assert site.mirror_loc is not None
    return site.origin(f"mirror.{key}", site.mirror_loc)


@check
def mirror_host(site: Site) -> Iterator[Finding]:
    """`mirror.host` is a server of the site; `mirror.address` lies inside one of the site's networks."""
    mirror = site.mirror
    if mirror is None or site.mirror_loc is None:
        return
    if mirror.host is not None and mirror.host not in site.hosts:
        servers = sorted(site.hosts)
        close = difflib.get_close_matches(mirror.host, servers, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        what = "a switch" if mirror.host in site.switches else "no server"
        yield Finding("mirror_host", "error", _loc(site, "host"), "mirror.host",
                      f"'{mirror.host}' is {what} of this site{hint}; the mirror runs on a server: "
                      f"{', '.join(servers[:12])}{' ...' if len(servers) > 12 else ''}")
    if mirror.address is not None and not any(mirror.address in network.prefix for network in site.networks.values()):
        networks = ", ".join(f"{network.name} {network.prefix}" for network in site.networks.values())
        yield Finding("mirror_host", "error", _loc(site, "address"), "mirror.address",
                      f"{mirror.address} is outside every network of the site ({networks}): "
                      "the nodes could not reach the mirror")


def _mirror_site_matrix(site: Site) -> Matrix | None:
    """The version matrix of a site with a mirror and Kubernetes; None otherwise, or where the
    matrix itself is broken (the platform check reports that)."""
    from rackform.k8s.cni import matrix_root

    if site.mirror is None or site.kubernetes is None or site.kubernetes_loc is None:
        return None
    try:
        return load_matrix(matrix_root(site))
    except SourceError:
        return None


@check
def mirror_carries_release(site: Site) -> Iterator[Finding]:
    """The pinned Kubernetes release is one the site mirror carries."""
    matrix = _mirror_site_matrix(site)
    if matrix is None:
        return
    version = site.kubernetes.version
    if version in matrix.carried:
        return
    carried = ", ".join(matrix.carried) or "none (the matrix lists no kubernetes.carried releases)"
    yield Finding("mirror_carries_release", "error", site.origin("kubernetes.version", site.kubernetes_loc),
                  "kubernetes.version",
                  f"{version} is not a release the site mirror carries; it carries {carried}: pin one of them, or "
                  f"add {version} to kubernetes.carried and build its bundle (rackform mirror build) "
                  f"[matrix: {matrix.carried_loc}]")


@check
def mirror_carries_multus(site: Site) -> Iterator[Finding]:
    """Multus and the RDMA networks need Multus' image: a mirror site without it gets neither (a
    warning), which matters only to a site with RDMA rails to attach (GPU fabric ports on an RDMA
    fabric): a site without them loses nothing, and is told nothing."""
    from rackform.k8s.cni import MULTUS_IMAGE, multus_left_out
    from rackform.k8s.rdma import rdma_attachments

    matrix = _mirror_site_matrix(site)
    if matrix is None:
        return
    if site.kubernetes.version in matrix.carried and multus_left_out(site, matrix) and rdma_attachments(site):
        yield Finding("mirror_carries_multus", "warning", site.origin("kubernetes.version", site.kubernetes_loc),
                      "kubernetes.version",
                      f"the site mirror's Kubernetes {site.kubernetes.version} carries no {MULTUS_IMAGE} image: "
                      "Multus and the RDMA NetworkAttachmentDefinitions are not applied (the pod network works "
                      "without them; GPU pods get no secondary RDMA interfaces). No release rackform's mirror "
                      "builds carries it yet (docs/kubernetes.md); a site without `mirror:` pulls the published "
                      "image and gets both")
