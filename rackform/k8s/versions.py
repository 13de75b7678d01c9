"""The compatibility matrix (topologies/versions.yaml): pinned versions and the pairs
that must not be combined.

`load_matrix` reads it with line numbers, so a refusal can name the line of the
matrix entry as well as the site's line that chose the version.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rackform.model.source import LineDict, Loc, SourceError, display_path, load_yaml

MATRIX_PATH = Path("topologies") / "versions.yaml"


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


@dataclass(frozen=True, slots=True)
class Matrix:
    kubernetes_default: str
    components: dict[str, Component]
    incompatible: tuple[Incompatible, ...]
    kubernetes_default_loc: Loc = Loc(str(MATRIX_PATH), 0)
    """The line of `kubernetes.default`: the origin of a site's version when no file sets one."""

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
    """'1.31.4' -> '1.31'."""
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

    root = Path(root) if (Path(root) / MATRIX_PATH).is_file() else ASSETS_ROOT
    path = root / MATRIX_PATH
    shown = display_path(path, Path(root))
    data = load_yaml(path, shown_as=shown)
    if not isinstance(data, LineDict):
        raise SourceError(Loc(shown, 1), "", "expected a mapping with kubernetes, components, incompatible")
    kubernetes = _mapping(data, "kubernetes", shown)
    components = {name: _component(name, entry, shown) for name, entry in _mapping(data, "components", shown).items()}
    incompatible = tuple(_incompatible(entry, components, shown) for entry in data.get("incompatible") or [])
    return Matrix(str(kubernetes.get("default", "")), components, incompatible, kubernetes.key_loc("default"))


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
