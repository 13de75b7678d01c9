"""Shared settings: the fleet defaults and named profiles under a site file, merged with origins.

Precedence, lowest first (a higher layer wins):

    built-in defaults  <  topologies/defaults.yaml  <  profiles, in `extends:` order  <  the site file

Built-in defaults are the schema's (`rackform.model.schema`) and `kubernetes.version`, which
comes from the version matrix (topologies/versions.yaml). A settings section (a mapping the
schema describes, such as `fabric` or `fabric.switch`) merges key by key; anything else, a
list, a scalar or a map whose keys are data (`fabric.switch.dscp_to_priority`), replaces the
lower value whole, so a site can always drop an inherited entry.

Every merged mapping remembers, per key, the file and line that set it (`Layered.key_loc`),
so a schema error or a failed check points at the line a person has to edit, in whichever
file that is; `effective_settings` lists each setting with that origin (`--show-origin`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rackform.model import schema
from rackform.model.site import Site
from rackform.model.source import BadInput, LineDict, LineList, Loc, SourceError
from rackform.model.versions import load_matrix

DEFAULTS_FILE = Path("topologies") / "defaults.yaml"
PROFILES_DIR = Path("topologies") / "profiles"
EXTENDS = "extends"
SITE_ONLY_KEYS = ("site", "description", "lab_only", "racks", "networks", "cabling", "data_sets")
"""A site's own inventory of things: never shared, so a shared file that sets one is refused
(`lab_only` too: a profile must not let every site that extends it turn host key checking off)."""
SHOWN_KEYS = ("site", "description", "power_basis", "fabric", "kubernetes", "mirror", "provisioning")
"""What `--show-origin` lists: every setting (racks, networks and cabling are the site's own)."""
BUILT_IN = "built-in default"
ORIGIN_COLUMN = 56
"""Where `--show-origin` aligns the origins (a longer setting pushes its own origin right)."""

LoadYaml = Callable[[Path], Any]
Shown = Callable[[Path], str]


class Layered(LineDict):
    """A mapping merged from several files: each key knows the file and line that set it."""

    __slots__ = ("origins",)

    def key_loc(self, key: Any) -> Loc:
        return self.origins.get(key) or Loc(self.path, self.line)


def _layered(path: str, line: int) -> Layered:
    merged = Layered()
    merged.path, merged.line, merged.lines, merged.origins = path, line, {}, {}
    return merged


# ---------------------------------------------------------------- which keys merge


def _section_model(model: type[BaseModel] | None, key: Any) -> type[BaseModel] | None:
    """The schema model of `model.key` when that key is a settings section, else None."""
    if model is None or not isinstance(key, str):
        return None
    field = model.model_fields.get(key)
    if field is None:
        return None
    return _inner_model(field.annotation)


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """`X` for a field typed `X` or `X | None` (not `list[X]` or `dict[K, X]`: those replace)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if getattr(annotation, "__origin__", None) in (list, dict):
        return None
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def merge(lower: Any, upper: Any, model: type[BaseModel] | None) -> Any:
    """`upper` over `lower`: sections of `model` merge key by key, everything else replaces."""
    if not isinstance(lower, LineDict) or not isinstance(upper, LineDict):
        return upper
    merged = _layered(upper.path, upper.line)
    for key, value in lower.items():
        merged[key] = value
        merged.origins[key] = lower.key_loc(key)
    for key, value in upper.items():
        section = _section_model(model, key)
        merged[key] = merge(merged[key], value, section) if key in merged and section is not None else value
        merged.origins[key] = upper.key_loc(key)
    return merged


# ---------------------------------------------------------------- shared files


def check_shared_keys(data: LineDict, model: type[BaseModel], prefix: str = "") -> list[SourceError]:
    """Unknown keys in a defaults or profile file, each at its line with a "did you mean"."""
    errors = []
    fields = [name for name in model.model_fields if prefix or name not in SITE_ONLY_KEYS]
    for key, value in data.items():
        path = f"{prefix}{key}"
        if not prefix and key == EXTENDS:
            continue
        if not prefix and key in SITE_ONLY_KEYS:
            errors.append(SourceError(data.key_loc(key), path, "belongs to one site; set it in topologies/sites/<site>.yaml, "
                                                              "not in a shared file"))
            continue
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            errors.append(SourceError(data.key_loc(key), path, f"unknown key{hint}; expected one of: {', '.join(fields)}"))
            continue
        section = _section_model(model, key)
        if section is not None and isinstance(value, LineDict):
            errors.extend(check_shared_keys(value, section, f"{path}."))
    return errors


class _Shared:
    """The fleet defaults and profiles under one repo root, each file read once per load."""

    def __init__(self, root: Path, load_yaml: LoadYaml, shown: Shown):
        self.root, self.load_yaml, self.shown = root, load_yaml, shown
        self.files: dict[str, LineDict] = {}

    def read(self, path: Path, what: str) -> LineDict:
        data = self.load_yaml(path)
        if data is None:  # an empty (all-comment) file sets nothing
            data = LineDict()
            data.path, data.line, data.lines = self.shown(path), 1, {}
        if not isinstance(data, LineDict):
            raise BadInput([SourceError(Loc(self.shown(path), 1), "", f"a {what} is a mapping of settings")])
        errors = check_shared_keys(data, schema.SiteFile)
        if errors:
            raise BadInput(errors)
        return data

    def defaults(self) -> LineDict | None:
        path = self.root / DEFAULTS_FILE
        if not path.exists():
            return None
        data = self.read(path, "defaults file")
        if EXTENDS in data:
            raise BadInput([SourceError(data.key_loc(EXTENDS), EXTENDS, "the fleet defaults apply to every site and "
                                        "extend no profile; name profiles in the site files")])
        return data

    def known_profiles(self) -> list[str]:
        return sorted(path.stem for path in (self.root / PROFILES_DIR).glob("*.yaml"))

    def profile(self, name: str) -> LineDict:
        if name not in self.files:
            self.files[name] = self.read(self.root / PROFILES_DIR / f"{name}.yaml", "profile")
        return self.files[name]

    def expand(self, owner: LineDict, chain: tuple[str, ...], errors: list[SourceError]) -> Iterator[LineDict]:
        """The profiles `owner` extends, each after the profiles it extends itself."""
        names = owner.get(EXTENDS)
        if names is None:
            return
        if not isinstance(names, LineList) or not all(isinstance(name, str) for name in names):
            errors.append(SourceError(owner.key_loc(EXTENDS), EXTENDS, "expected a list of profile names, "
                                      "e.g. extends: [roce, kubernetes]"))
            return
        known = self.known_profiles()
        for index, name in enumerate(names):
            where = names.item_loc(index)
            if name in chain:
                cycle = " -> ".join((*chain[chain.index(name):], name))
                errors.append(SourceError(where, EXTENDS, f"profile cycle: {cycle}"))
                continue
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                offered = ", ".join(known) or f"none (no {PROFILES_DIR.as_posix()}/*.yaml)"
                errors.append(SourceError(where, EXTENDS, f"unknown profile '{name}'{hint}; profiles: {offered}"))
                continue
            try:
                profile = self.profile(name)
            except BadInput as exc:
                errors.extend(exc.errors)
                continue
            yield from self.expand(profile, (*chain, name), errors)
            yield profile


def layered_site(raw: Any, root: Path, load_yaml: LoadYaml, shown: Shown) -> Any:
    """The site file `raw` over its profiles and the fleet defaults; BadInput on a bad shared file.

    A site file that is not a mapping is returned as is (the schema reports it)."""
    if not isinstance(raw, LineDict):
        return raw
    shared = _Shared(root, load_yaml, shown)
    errors: list[SourceError] = []
    layers: list[LineDict] = []
    try:
        defaults = shared.defaults()
    except BadInput as exc:
        errors.extend(exc.errors)
        defaults = None
    if defaults is not None:
        layers.append(defaults)
    seen: set[int] = set()
    for profile in shared.expand(raw, (), errors):
        if id(profile) not in seen:  # a profile reached twice applies once, at its first place
            seen.add(id(profile))
            layers.append(profile)
    if errors:
        raise BadInput(errors)
    merged: Any = None
    for layer in (*layers, raw):
        merged = layer if merged is None else merge(merged, layer, schema.SiteFile)
    return _with_kubernetes_version(merged, root)


def _with_kubernetes_version(data: LineDict, root: Path) -> LineDict:
    """`kubernetes.version` from the version matrix when no layer sets it."""
    kubernetes = data.get("kubernetes")
    if not isinstance(kubernetes, LineDict) or "version" in kubernetes:
        return data
    try:
        matrix = load_matrix(root)
    except SourceError as exc:
        raise BadInput([exc]) from None
    with_version = merge(kubernetes, _layered(kubernetes.path, kubernetes.line), schema.Kubernetes)
    with_version["version"] = matrix.kubernetes_default
    with_version.origins["version"] = matrix.kubernetes_default_loc
    result = merge(data, _layered(data.path, data.line), schema.SiteFile)
    result["kubernetes"] = with_version
    return result


# ---------------------------------------------------------------- where each setting came from


def site_section_loc(data: LineDict, key: str) -> Loc:
    """The site file's own line for section `key`, else the site file's first line: where a
    finding about the whole section (not one shared value) points, and where an override goes."""
    if key in data:
        loc = data.key_loc(key)
        if loc.path == data.path:
            return loc
    return Loc(data.path, data.line)


def origin_of(data: Any, dotted: str) -> Loc | None:
    """Where the value at `fabric.switch.mtu` (say) was set; None when no file sets it."""
    node = data
    where = None
    for part in dotted.split("."):
        if not isinstance(node, LineDict):
            return where
        key = _key_in(node, part)
        if key is None:
            return None
        where = node.key_loc(key)
        node = node[key]
    return where


def _key_in(node: LineDict, part: str) -> Any:
    if part in node:
        return part
    for key in node:  # a map keyed by numbers (dscp_to_priority: {26: 3})
        if str(key) == part:
            return key
    return None


def origins(data: Any, prefixes: tuple[str, ...] = SHOWN_KEYS) -> dict[str, Loc]:
    """`dotted key -> Loc` for every value set in the settings sections of `data`."""
    found: dict[str, Loc] = {}

    def walk(node: LineDict, prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            found[dotted] = node.key_loc(key)
            if isinstance(value, LineDict):
                walk(value, f"{dotted}.")

    if isinstance(data, LineDict):
        for key in prefixes:
            if key in data:
                found[key] = data.key_loc(key)
                if isinstance(data[key], LineDict):
                    walk(data[key], f"{key}.")
    return found


def effective_settings(sections: dict[str, Any], where: dict[str, Loc]) -> list[tuple[str, str, str]]:
    """(key, value, origin) for every effective setting, sections in the order given and each
    section's keys in schema order. A value no file sets is the schema's: `built-in default`."""
    rows: list[tuple[str, str, str]] = []

    def walk(value: Any, dotted: str) -> None:
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{dotted}.{name}")
            return
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, f"{dotted}.{key}")
            return
        loc = where.get(dotted)
        rows.append((dotted, _shown_value(value), str(loc) if loc is not None else BUILT_IN))

    for key, value in sections.items():
        walk(value, key)
    return rows


def origin_lines(site: Site) -> list[str]:
    """`fabric.switch.mtu = 9216  topologies/profiles/roce.yaml:13`, one line per effective setting
    of a loaded site (what `rackform validate SITE --show-origin` prints)."""
    sections = {"site": site.name, "description": site.description, "power_basis": site.power_basis,
                "fabric": site.fabric, "kubernetes": site.kubernetes, "mirror": site.mirror,
                "provisioning": site.provisioning}
    if site.mirror is None:
        del sections["mirror"]
    rows = effective_settings(sections, site.origins)
    width = min(max(len(f"{key} = {value}") for key, value, _ in rows), ORIGIN_COLUMN)
    return [f"{f'{key} = {value}':<{width}}  {origin}" for key, value, origin in rows]


def _shown_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{}"
    return str(value)
