"""The files of the collection rackform.site as a rendered project carries them.

`roles/`, `plugins/`, rackform's CHANGELOG.md and LICENSE, and
templates/collection/meta/runtime.yml are copied as they are. `galaxy.yml` and the collection's README are rendered from
templates/collection/: the version is rackform's, the dependencies are the collections
the project's requirements.yml pins (one list), and the README's tables come from each
role's meta/main.yml and each module's DOCUMENTATION. Built once per process: the
collection is the same for every site.
"""

from __future__ import annotations

import re
from functools import lru_cache

import yaml

from rackform import __version__
from rackform.collection import NAME, NAMESPACE, PROJECT_DIR
from rackform.paths import CHANGELOG_FILE, LICENSE_FILE, TEMPLATES_DIR
from rackform.render.assets import PLUGINS_DIR, ROLES_DIR, project_templates, tree_files

_SHORT_DESCRIPTION = re.compile(r"^short_description:\s*(.+)$", re.MULTILINE)
_RENDERED_FILES = ("galaxy.yml", "README.md")
_STATIC_FILES = ("meta/runtime.yml",)
REQUIREMENTS_TEMPLATE = "project/requirements.yml.j2"


def _role_rows() -> list[dict[str, str]]:
    rows = []
    for meta in sorted(ROLES_DIR.glob("*/meta/main.yml")):
        info = (yaml.safe_load(meta.read_text()) or {}).get("galaxy_info") or {}
        rows.append({"name": meta.parents[1].name, "description": str(info.get("description", ""))})
    return rows


def _module_rows() -> list[dict[str, str]]:
    rows = []
    for module in sorted((PLUGINS_DIR / "modules").glob("*.py")):
        found = _SHORT_DESCRIPTION.search(module.read_text())
        rows.append({"name": module.stem, "description": found.group(1).strip() if found else ""})
    return rows


def dependencies(requirements_yml: str) -> list[dict[str, str]]:
    """The collections (name, version) a rendered requirements.yml pins."""
    return list((yaml.safe_load(requirements_yml) or {}).get("collections") or [])


@lru_cache(maxsize=1)
def _collection(requirements_yml: str) -> tuple[tuple[str, bytes], ...]:
    templates = project_templates()
    values = {"namespace": NAMESPACE, "name": NAME, "version": __version__,
              "dependencies": dependencies(requirements_yml),
              "roles": _role_rows(), "modules": _module_rows()}
    files = {name: templates.get_template(f"collection/{name}.j2").render(values).encode()
             for name in _RENDERED_FILES}
    files["CHANGELOG.md"] = CHANGELOG_FILE.read_bytes()
    files["LICENSE"] = LICENSE_FILE.read_bytes()  # galaxy.yml's `license:` names it; the tarball carries its text
    for name in _STATIC_FILES:
        files[name] = (TEMPLATES_DIR / "collection" / name).read_bytes()
    files.update({f"roles/{path}": content for path, content in tree_files(ROLES_DIR).items()})
    files.update({f"plugins/{path}": content for path, content in tree_files(PLUGINS_DIR).items()})
    return tuple(sorted(files.items()))


def collection_files(requirements_yml: str | None = None) -> dict[str, bytes]:
    """Every file of the collection, keyed by its path in the project (under PROJECT_DIR).

    requirements_yml: the project's rendered requirements.yml (default: rendered here)."""
    if requirements_yml is None:
        requirements_yml = project_templates().get_template(REQUIREMENTS_TEMPLATE).render()
    return {f"{PROJECT_DIR}/{path}": content for path, content in _collection(requirements_yml)}
