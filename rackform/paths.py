"""Where rackform's own files sit: inside the package, in `rackform/_assets/`.

    _assets/roles/        the roles of the Ansible collection rackform.site (rackform.collection)
    _assets/plugins/      its modules, module_utils and filters
    _assets/CHANGELOG.md  rackform's changelog, which the collection carries too
    _assets/LICENSE       rackform's licence (Apache-2.0), which the collection carries too
    _assets/templates/    the files rackform writes (playbooks, ansible.cfg, README ...)
    _assets/infra/        the testinfra host checks `rackform verify` runs
    _assets/topologies/   the built-in catalog (blocks/), version matrix (versions.yaml),
                          shared settings and the example sites `rackform init` copies
    _assets/inventories/  the example sites' inventories
    _assets/sources/      the Go modules the site mirror's Kubernetes is built from (go.mod, go.sum)

In this repo those are links to the top-level roles/, plugins/, CHANGELOG.md, LICENSE, templates/, tests/infra/,
topologies/ and inventories/, so the repo keeps its layout and a wheel built from it
carries the files themselves (pyproject.toml's package-data). Standard library only:
the fleet IPMI path imports this and must stay light.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE_PARENT = PACKAGE_DIR.parent
"""The folder holding the `rackform` package (PYTHONPATH for helper processes)."""
ASSETS_DIR = PACKAGE_DIR / "_assets"
ASSETS_ROOT = ASSETS_DIR
"""Laid out like a site repo (topologies/, inventories/): the built-in one."""
TEMPLATES_DIR = ASSETS_DIR / "templates"
ROLES_DIR = ASSETS_DIR / "roles"
PLUGINS_DIR = ASSETS_DIR / "plugins"
CHANGELOG_FILE = ASSETS_DIR / "CHANGELOG.md"
LICENSE_FILE = ASSETS_DIR / "LICENSE"
INFRA_CHECKS_DIR = ASSETS_DIR / "infra"
BUILTIN_BLOCKS_DIR = ASSETS_DIR / "topologies" / "blocks"
SOURCES_DIR = ASSETS_DIR / "sources"
"""Go modules (go.mod, go.sum) that pin what `rackform mirror build` builds from source."""
