"""rackform's Ansible collection, `rackform.site`: its name and where its files lie.

The roles (`roles/`) and the modules, module_utils and filters they call (`plugins/`)
form one collection. Every rendered project carries it under `collections/`
(ansible.cfg's collections_path), with the `galaxy.yml` and `meta/runtime.yml` rendered
from templates/collection/: the playbooks name its roles and the roles its modules by
fully qualified names (`rackform.site.base_os`, `rackform.site.ipmi`). The collection's
version is rackform's own, so a project says which rackform made it.

Standard library only: the fleet IPMI path imports this (through rackform.role_code).
"""

from __future__ import annotations

NAMESPACE = "rackform"
NAME = "site"
FQCN = f"{NAMESPACE}.{NAME}"
PROJECT_DIR = f"collections/ansible_collections/{NAMESPACE}/{NAME}"
"""Where the collection lies in a rendered project (ansible.cfg: collections_path = collections)."""
MODULE_UTILS_PACKAGE = f"ansible_collections.{NAMESPACE}.{NAME}.plugins.module_utils"
"""The package the modules import their module_utils from (and rackform loads them as)."""


def qualified(name: str) -> str:
    """A role, module or filter of the collection by its fully qualified name."""
    return f"{FQCN}.{name}"


def short_name(name: str) -> str:
    """`rackform.site.base_os` -> `base_os`; other names unchanged."""
    return name.removeprefix(f"{FQCN}.")
