"""Code rackform shares with its Ansible modules, loaded from the role that ships it.

A custom module travels alone (AnsiballZ) and may import only its role's module_utils
(standard library only), so what both need is written there once. rackform loads those
very files under the names the modules import them by (`ansible.module_utils.<name>`),
so rackform and the module run the same code without Ansible being imported.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from rackform.paths import ROLES_DIR

PACKAGE = "ansible.module_utils"
_IMPORTS = re.compile(r"^\s*from ansible\.module_utils\.(\w+) import", re.MULTILINE)


def module_utils_dir(role: str) -> Path:
    return ROLES_DIR / role / "module_utils"


def load_module_utils(role: str, name: str) -> ModuleType:
    """roles/<role>/module_utils/<name>.py as `ansible.module_utils.<name>` (once per process).

    The files it imports (`from ansible.module_utils.X import ...`) are loaded first and
    registered in sys.modules, where those lines find them.
    """
    qualified = f"{PACKAGE}.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = module_utils_dir(role) / f"{name}.py"
    for dependency in _IMPORTS.findall(path.read_text()):
        if dependency != name:
            load_module_utils(role, dependency)
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: missing (the {role} role ships with rackform)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise
    return module
