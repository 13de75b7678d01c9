"""The air-gap check: an air-gapped site's rendered project names no upstream address.

Run on the rendered files in memory, after the preflight checks pass and before anything
is written (`rackform.pipeline.load_and_check`), so `validate`, `render` and `deploy` all
refuse such a site. Every text file of the project is read line by line for

- the public registries and package hosts of `rackform.k8s.site_mirror.UPSTREAM_HOSTS`,
  as whole host names;
- in YAML files and templates, an `image:` whose reference has no registry host
  (`nginx:1.27`, `org/app:v1`): a container runtime pulls those from Docker Hub.

An `image:` whose value is a template expression (`{{ some_image }}`) cannot be resolved
here and is not judged, nor is a role default that holds an image reference under another
key (`<role>_image: ...`); every image rackform's renderers name is written out in full,
in the site mirror's registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath

from rackform.checks.findings import Finding
from rackform.k8s.site_mirror import UPSTREAM_HOSTS, air_gapped, registry
from rackform.model.site import Site
from rackform.model.source import Loc

CHECK = "air_gapped"
_HOSTS = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(host) for host in UPSTREAM_HOSTS) + r")(?![\w-]|\.[\w-])",
                    re.IGNORECASE)
"""Whole host names, not the head or the tail of a longer one (`cache.<public host>.site.internal`)."""
_IMAGE = re.compile(r"""(?:^|[\s{,-])image:\s*(["']?)(?P<ref>[^"'\s,}#]+)""")
_YAML_SUFFIXES = (".yml", ".yaml", ".j2")
_COLLECTION = "collections/ansible_collections/rackform/site/"


def upstream_findings(site: Site, files: Mapping[str, bytes]) -> list[Finding]:
    """One error per rendered line of an air-gapped site that names an upstream source; none otherwise."""
    if not air_gapped(site):
        return []
    own_registry = registry(site)
    findings: list[Finding] = []
    for path, content in files.items():
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            continue
        findings.extend(_file_findings(site, path, text, own_registry))
    return findings


def _file_findings(site: Site, path: str, text: str, own_registry: str | None) -> Iterator[Finding]:
    is_yaml = path.endswith(_YAML_SUFFIXES)
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        hosts = sorted({match.group(1).lower() for match in _HOSTS.finditer(line)})
        if hosts:
            yield _finding(site, path, number, f"names {', '.join(hosts)}", lines)
            continue
        if not is_yaml:
            continue
        for match in _IMAGE.finditer(line):
            reference = match.group("ref")
            if not reference or "{{" in reference or "{%" in reference:
                continue
            if _registry_of(reference) is None:
                yield _finding(site, path, number, f"image {reference} has no registry host, so it would be pulled "
                                                   f"from Docker Hub: name it in the site mirror's registry ({own_registry})",
                               lines)


def _registry_of(reference: str) -> str | None:
    """The registry host of an image reference, None when it has none (Docker Hub's)."""
    first, slash, _rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def _finding(site: Site, path: str, line: int, what: str, lines: list[str]) -> Finding:
    assert site.mirror_loc is not None
    policy = site.origin("mirror.air_gapped", site.mirror_loc)
    return Finding(CHECK, "error", Loc(path, line), "mirror.air_gapped",
                   f"rendered line {what} (from {source_of(site, path, lines, line)}); site {site.name} is "
                   f"air-gapped ({policy}): every package and image comes from its mirror")


_TOP_KEY = re.compile(r"^([A-Za-z_][\w.-]*):")


def _variable_at(lines: list[str], line: int) -> str | None:
    """The top-level key of a rendered variables file whose value holds line `line`."""
    for text in reversed(lines[:line]):
        found = _TOP_KEY.match(text)
        if found:
            return found.group(1)
    return None


def _inventory_origin(site: Site, path: str, lines: list[str], line: int) -> str | None:
    """The inventory file and line of a pass-through variable, when the rendered line is one."""
    parts = PurePosixPath(path).parts
    variable = _variable_at(lines, line)
    if variable is None:
        return None
    if len(parts) == 4 and parts[:2] == ("inventory", "group_vars") and parts[3] == "inventory.yml":
        variables = site.user_inventory.group_vars.get(parts[2]) if site.user_inventory is not None else None
        loc = variables.locs.get(variable) if variables is not None else None
    elif len(parts) == 3 and parts[:2] == ("inventory", "host_vars"):
        machine = site.hosts.get(PurePosixPath(path).stem) or site.switches.get(PurePosixPath(path).stem)
        loc = machine.var_locs.get(variable) if machine is not None and variable in machine.user_vars else None
    else:
        return None
    return f"{loc} ({variable})" if loc is not None else None


def source_of(site: Site, path: str, lines: list[str] | None = None, line: int = 0) -> str:
    """Where a rendered line comes from, as far as rackform can tell: the inventory line of a
    pass-through variable, else rackform's roles, templates or renderers the file is made by."""
    origin = _inventory_origin(site, path, lines, line) if lines else None
    if origin is not None:
        return origin
    parts = PurePosixPath(path).parts
    inventory = f"inventories/{site.name}"
    if path.startswith(_COLLECTION):
        inner = path[len(_COLLECTION):]
        if inner.startswith(("roles/", "plugins/")) or inner == "CHANGELOG.md":
            return f"rackform's {inner}"
        return f"rackform's templates/collection/{inner}"
    if parts[:1] == ("platform",):
        return "rackform/k8s/manifests.py (platform design: topologies/platform)"
    if path == "inventory/group_vars/k8s_cluster/cni.yml":
        return "rackform/k8s/cni.py"
    if len(parts) == 4 and parts[:2] == ("inventory", "group_vars") and parts[3] == "inventory.yml":
        return f"{inventory}/group_vars/{parts[2]}, the inventory's own variables"
    if parts[:2] == ("inventory", "host_vars"):
        return f"{inventory}/host_vars/{PurePosixPath(path).name} or the site design"
    if parts[:1] == ("inventory",):
        return f"the site design (topologies/sites/{site.name}.yaml) and {inventory}/"
    if parts[:1] == ("switch_configs",):
        return "rackform's templates/switch_configs"
    if len(parts) == 1 and path.endswith(".yml") and path != "requirements.yml":
        return f"rackform's templates/playbooks/{path}.j2"
    return "rackform's templates/project"
