"""`rackform upgrade SITE --to VERSION`: is the step allowed, and what else must change if not.

kubeadm upgrades one minor at a time and never down; every component the site installs
must support the target minor (topologies/versions.yaml), and a site with a mirror can only
go to a release the mirror carries (kubernetes.carried). A refusal lists each conflict
and, per component, the matrix's releases that would support the target.
"""

from __future__ import annotations

import re

from rackform.day2.errors import refuse
from rackform.model.site import Site
from rackform.model.source import BadInput, SourceError

VERSION = re.compile(r"^1\.(\d+)\.(\d+)$")


def parse(version: str) -> tuple[int, int]:
    match = VERSION.match(version)
    if not match:
        raise refuse(None, "--to", f"{version!r} is not a Kubernetes version like 1.36.3")
    return int(match[1]), int(match[2])


def check_step(site: Site, root, target: str) -> list[str]:
    """Notes about the step (empty when plain); BadInput listing everything that must change first."""
    from rackform.k8s.platform import load_platform
    from rackform.model.versions import conflicts, kubernetes_minor, load_matrix

    if site.kubernetes is None:
        raise refuse(site.loc, "kubernetes", "the site has no Kubernetes section: nothing to upgrade")
    current = site.kubernetes.version
    here, there = parse(current), parse(target)
    loc = site.origin("kubernetes.version", site.kubernetes_loc or site.loc)
    if there < here:
        raise refuse(loc, "kubernetes.version", f"{target} is older than the site's {current}: kubeadm does not "
                                                f"downgrade a cluster")
    if there[0] > here[0] + 1:
        raise refuse(loc, "kubernetes.version", f"{current} -> {target} skips a minor: kubeadm upgrades one minor at "
                                                f"a time; go to 1.{here[0] + 1}.x first")
    matrix = load_matrix(root)
    design = load_platform(site)
    chosen = matrix.chosen(design.versions)
    found = list(conflicts(matrix, target, chosen))
    errors = []
    if site.mirror is not None and target not in matrix.carried:
        carried = ", ".join(matrix.carried) or "none"
        errors.append(SourceError(matrix.carried_loc, "kubernetes.version",
                                  f"{target} is not a release the site mirror carries (it carries {carried}): add it "
                                  f"to kubernetes.carried and build its bundle (rackform mirror build) first"))
    if found:
        minor = kubernetes_minor(target)
        for conflict in found:
            component = matrix.components.get(conflict.component)
            fitting = [name for name, release in (component.releases.items() if component else [])
                       if minor in release.kubernetes_minors]
            fix = (f"; choose {' or '.join(fitting)} in topologies/platform/{site.name}.yaml" if fitting
                   else f"; the matrix has no {conflict.component} release for {minor}: add one (with its source) first")
            errors.append(SourceError(conflict.matrix_loc, f"platform.versions.{conflict.component}",
                                      f"{conflict.message}{fix}"))
    if errors:
        raise BadInput(errors)
    return [f"{current} -> {target}"]
