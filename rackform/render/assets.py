"""Where the emitted project's templates and collection come from, and their Jinja setup.

`templates/` (files rackform writes: playbooks, ansible.cfg, README, Onyx configs),
`roles/` and `plugins/` (the collection rackform.site, carried by every project) ship
inside the package (rackform.paths). Each template is compiled once per process:
the environments below keep their compiled templates cached.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

from rackform.paths import ASSETS_ROOT, PLUGINS_DIR, ROLES_DIR, TEMPLATES_DIR
from rackform.render import yamltext

__all__ = ["ASSETS_ROOT", "PLUGINS_DIR", "ROLES_DIR", "TEMPLATES_DIR", "project_templates", "role_templates", "tree_files"]

# Editor droppings and caches that must never travel into a project.
_SKIPPED_NAMES = {"__pycache__", ".DS_Store"}
_SKIPPED_SUFFIXES = (".pyc", ".swp", ".swo", "~", ".orig", ".rej")


@lru_cache(maxsize=1)
def project_templates() -> jinja2.Environment:
    """Templates for files rackform writes itself (`templates/`)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    environment.filters["yaml_scalar"] = yamltext.scalar
    return environment


@lru_cache(maxsize=1)
def role_templates() -> jinja2.Environment:
    """Role templates (`roles/*/templates/`) rendered the way Ansible's template module does.

    Used to write `switch_configs/` with the very templates the roles deploy, so
    the reviewed file and the deployed file cannot drift apart.
    """
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(ROLES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=False,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _skipped(path: Path) -> bool:
    return any(part in _SKIPPED_NAMES or part.startswith(".") for part in path.parts) or path.name.endswith(
        _SKIPPED_SUFFIXES
    )


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under root (editor droppings and caches left out), keyed by relative path, sorted."""
    files: dict[str, bytes] = {}
    if not root.is_dir():
        return files
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not _skipped(relative):
            files[relative.as_posix()] = path.read_bytes()
    return files
