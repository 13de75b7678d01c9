"""The compatibility matrix (topologies/versions.yaml): pinned versions, the pairs
that must not be combined, and the Kubernetes releases a site mirror carries.

`load_matrix` reads it with line numbers, so a refusal can name the line of the
matrix entry as well as the site's line that chose the version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rackform.model.source import LineDict, Loc, SourceError, display_path, load_yaml

MATRIX_PATH = Path("topologies") / "versions.yaml"
_RELEASE = re.compile(r"^1\.\d+\.\d+$")


@dataclass(frozen=True, slots=True)
class Release:
    version: str
    kubernetes_minors: tuple[str, ...]
    source: str
    loc: Loc


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    chart: str
    namespace: str
    default: str
    releases: dict[str, Release]


@dataclass(frozen=True, slots=True)
class Incompatible:
    pair: dict[str, str]
    """Component name -> release, exactly two entries."""
    reason: str
    source: str
    loc: Loc


CONTROL_PLANE_IMAGES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
"""Images built from the Kubernetes release itself, tagged v<release>."""
KUBERNETES_PACKAGES = ("kubeadm", "kubelet", "kubectl")
"""Packages built from the Kubernetes release itself, at <release>."""


@dataclass(frozen=True, slots=True)
class Pinned:
    """One image tag or package version of a carried release, with where the fact comes from."""

    name: str
    version: str
    source: str
    loc: Loc


@dataclass(frozen=True, slots=True)
class CarriedRelease:
    """A Kubernetes release the site mirror carries (`kubernetes.carried` in the matrix)."""

    version: str
    source: str
    images: dict[str, Pinned]
    """The images kubeadm, the CNI and the carried platform controllers (Kueue) of this release need
    besides the control plane's own."""
    packages: dict[str, Pinned]
    """Packages besides kubeadm, kubelet and kubectl (kubernetes-cni)."""
    loc: Loc
    charts: dict[str, Pinned] = field(default_factory=dict)
    """Helm charts the bundle carries (`charts/<name>-<version>.tgz`), name -> chart version."""

    def image_tags(self) -> dict[str, str]:
        """Every image of the release's bundle, name -> tag: the control plane at v<release>, then the pinned ones."""
        tags = {name: f"v{self.version}" for name in CONTROL_PLANE_IMAGES}
        tags.update({name: pinned.version for name, pinned in self.images.items()})
        return tags

    def package_versions(self) -> dict[str, str]:
        """Every package of the release's bundle, name -> upstream version (no Debian revision)."""
        versions = {name: self.version for name in KUBERNETES_PACKAGES}
        versions.update({name: pinned.version for name, pinned in self.packages.items()})
        return versions


@dataclass(frozen=True, slots=True)
class Matrix:
    kubernetes_default: str
    components: dict[str, Component]
    incompatible: tuple[Incompatible, ...]
    kubernetes_default_loc: Loc = Loc(str(MATRIX_PATH), 0)
    """The line of `kubernetes.default`: the origin of a site's version when no file sets one."""
    carried: dict[str, CarriedRelease] = field(default_factory=dict)
    """Release -> what the site mirror's bundle of it holds, in the matrix's order."""
    carried_loc: Loc = Loc(str(MATRIX_PATH), 0)
    """The line of `kubernetes.carried`: the rule a site pinned to another release breaks."""

    def chosen(self, overrides: Mapping[str, str]) -> dict[str, str]:
        """Component -> release: the matrix default unless the site overrides it."""
        return {name: overrides.get(name, component.default) for name, component in self.components.items()}


@dataclass(frozen=True, slots=True)
class Conflict:
    """Why a site's choice of versions is refused; `matrix_loc` is the rule it broke."""

    component: str
    message: str
    matrix_loc: Loc


def kubernetes_minor(version: str) -> str:
    """'1.36.3' -> '1.36'."""
    return ".".join(version.split(".")[:2])


def conflicts(matrix: Matrix, kubernetes_version: str, chosen: Mapping[str, str]) -> Iterator[Conflict]:
    """Every unknown release, unsupported Kubernetes minor and incompatible pair in `chosen`."""
    minor = kubernetes_minor(kubernetes_version)
    for name, version in chosen.items():
        component = matrix.components.get(name)
        if component is None:
            yield Conflict(name, f"unknown component; the matrix pins {', '.join(sorted(matrix.components))}",
                           Loc(str(MATRIX_PATH), 1))
            continue
        release = component.releases.get(version)
        if release is None:
            yield Conflict(name, f"{name} {version} is not in the matrix; pinned releases: "
                                 f"{', '.join(component.releases)}", Loc(str(MATRIX_PATH), 1))
        elif minor not in release.kubernetes_minors:
            yield Conflict(name, f"{name} {version} does not support Kubernetes {minor} (supports "
                                 f"{', '.join(release.kubernetes_minors)}; {release.source})", release.loc)
    for rule in matrix.incompatible:
        if all(chosen.get(name) == version for name, version in rule.pair.items()):
            pair = " with ".join(f"{name} {version}" for name, version in rule.pair.items())
            yield Conflict(next(iter(rule.pair)), f"{pair} are incompatible: {rule.reason} ({rule.source})", rule.loc)


def load_matrix(root: Path | str = Path(".")) -> Matrix:
    """Parse topologies/versions.yaml under `root`, else the one rackform ships (a site repo
    that keeps no matrix of its own); SourceError on a malformed entry."""
    from rackform.paths import ASSETS_ROOT

    own = (Path(root) / MATRIX_PATH).is_file()
    root = Path(root) if own else ASSETS_ROOT
    path = root / MATRIX_PATH
    # rackform's own matrix is named by its full path: the repo at hand (an `rackform init`
    # one) has no topologies/versions.yaml, so that name would point at nothing
    shown = display_path(path, Path(root)) if own else str(path.resolve())
    data = load_yaml(path, shown_as=shown)
    if not isinstance(data, LineDict):
        raise SourceError(Loc(shown, 1), "", "expected a mapping with kubernetes, components, incompatible")
    kubernetes = _mapping(data, "kubernetes", shown)
    components = {name: _component(name, entry, shown) for name, entry in _mapping(data, "components", shown).items()}
    incompatible = tuple(_incompatible(entry, components, shown) for entry in data.get("incompatible") or [])
    carried = _carried(kubernetes, shown) if "carried" in kubernetes else {}
    return Matrix(str(kubernetes.get("default", "")), components, incompatible, kubernetes.key_loc("default"),
                  carried, kubernetes.key_loc("carried") if "carried" in kubernetes else kubernetes.loc)


def _mapping(parent: LineDict, key: str, shown: str) -> LineDict:
    value = parent.get(key)
    if not isinstance(value, LineDict):
        raise SourceError(parent.key_loc(key) if key in parent else Loc(shown, parent.line), key, "expected a mapping")
    return value


def _component(name: str, entry: LineDict, shown: str) -> Component:
    if not isinstance(entry, LineDict):
        raise SourceError(Loc(shown, 1), f"components.{name}", "expected a mapping")
    missing = [key for key in ("chart", "namespace", "default", "releases") if key not in entry]
    if missing:
        raise SourceError(entry.loc, f"components.{name}", f"missing {', '.join(missing)}")
    releases_data = _mapping(entry, "releases", shown)
    releases = {
        str(version): Release(str(version), tuple(str(m) for m in spec.get("kubernetes", [])),
                              str(spec.get("source", "")), releases_data.key_loc(version))
        for version, spec in releases_data.items()
    }
    default = str(entry["default"])
    if default not in releases:
        raise SourceError(entry.key_loc("default"), f"components.{name}.default",
                          f"{default} is not one of its releases ({', '.join(releases)})")
    return Component(name, str(entry["chart"]), str(entry["namespace"]), default, releases)


def _incompatible(entry: LineDict, components: Mapping[str, Component], shown: str) -> Incompatible:
    pair = entry.get("components") if isinstance(entry, LineDict) else None
    if not isinstance(pair, LineDict) or len(pair) != 2:
        raise SourceError(getattr(entry, "loc", Loc(shown, 1)), "incompatible", "each entry names two components")
    for name, version in pair.items():
        if name not in components or str(version) not in components[name].releases:
            raise SourceError(pair.key_loc(name), f"incompatible.{name}", f"{version} is not a release in the matrix")
    return Incompatible({str(k): str(v) for k, v in pair.items()}, str(entry.get("reason", "")),
                        str(entry.get("source", "")), entry.loc)


def _carried(kubernetes: LineDict, shown: str) -> dict[str, CarriedRelease]:
    releases = _mapping(kubernetes, "carried", shown)
    carried = {}
    for version, entry in releases.items():
        key = f"kubernetes.carried.{version}"
        if not isinstance(version, str) or not _RELEASE.match(version):
            raise SourceError(releases.key_loc(version), key, "expected a Kubernetes release such as \"1.36.3\" (quoted)")
        if not isinstance(entry, LineDict) or not entry.get("source"):
            raise SourceError(releases.key_loc(version), key, "expected a mapping with source, images, packages")
        carried[version] = CarriedRelease(
            version, str(entry["source"]), _pins(entry, "images", "tag", key, shown),
            _pins(entry, "packages", "version", key, shown), releases.key_loc(version),
            _pins(entry, "charts", "version", key, shown))
    return carried


def _pins(entry: LineDict, section: str, field_name: str, key: str, shown: str) -> dict[str, Pinned]:
    if section not in entry:
        return {}
    pins = _mapping(entry, section, shown)
    found = {}
    for name, spec in pins.items():
        where = f"{key}.{section}.{name}"
        if not isinstance(spec, LineDict) or not spec.get(field_name) or not spec.get("source"):
            raise SourceError(pins.key_loc(name), where, f"expected {{{field_name}: ..., source: ...}}")
        found[str(name)] = Pinned(str(name), str(spec[field_name]), str(spec["source"]), pins.key_loc(name))
    return found
