"""Where bundles live on the controller, and which release a command means.

One bundle per Kubernetes release, `BUNDLES_DIR/kubernetes-<release>/`; the site's rendered
`site_mirror_bundle` names the one its pinned release uses.
"""

from __future__ import annotations

import os
from pathlib import Path

from rackform.mirror.source import ReleasePins

BUNDLES_DIR = Path(os.environ.get("RACKFORM_MIRROR_BUNDLES", "/var/lib/rackform/mirror/bundles"))


def bundle_path(kubernetes_version: str, bundles_dir: Path | None = None) -> Path:
    return (bundles_dir or BUNDLES_DIR) / f"kubernetes-{kubernetes_version}"


def release_pins(root: Path, site_name: str | None = None, version: str | None = None) -> ReleasePins:
    """The pins of the release named by `version`, else by the site's design, else the matrix default.

    The design is only loaded here, not checked: that is the pipeline's, a layer above the
    mirror (`rackform mirror` checks it before it asks for the pins).
    BadInput (file:line of the matrix's `kubernetes.carried`) for a release the mirror does not carry."""
    from rackform.model.versions import load_matrix
    from rackform.model.source import BadInput, Loc, SourceError

    matrix = load_matrix(root)
    if version is None and site_name is not None:
        from rackform.model.loader import load_site

        site = load_site(site_name, root)
        version = site.kubernetes.version if site.kubernetes else None
    version = version or matrix.kubernetes_default
    release = matrix.carried.get(version)
    if release is None:
        raise BadInput([SourceError(matrix.carried_loc, "kubernetes.carried",
                                    f"the site mirror does not carry Kubernetes {version}; it carries "
                                    f"{', '.join(matrix.carried) or 'no release'}")])
    images = {name: pinned.version for name, pinned in release.images.items()}
    chart = release.charts.get("kueue")
    return ReleasePins(version, images["etcd"], images["coredns"], images["pause"],
                       "v" + release.packages["kubernetes-cni"].version.lstrip("v"), images["kube-router"],
                       images.get("kueue"), chart.version if chart is not None else None)
