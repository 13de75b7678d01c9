"""Where rackform's own files sit: the checkout root, next to this package.

`templates/` (files rackform writes), `roles/` (copied into every project) and `tests/infra`
(the testinfra checks `verify` runs) ship with the package, not inside it. Standard library
only: the fleet IPMI path imports this and must stay light.
"""

from pathlib import Path

ASSETS_ROOT = Path(__file__).resolve().parents[1]
TEMPLATES_DIR = ASSETS_ROOT / "templates"
ROLES_DIR = ASSETS_ROOT / "roles"
INFRA_CHECKS_DIR = ASSETS_ROOT / "tests" / "infra"
