"""Code rackform shares with its Ansible modules, loaded from the collection that ships it.

A custom module travels alone (AnsiballZ) and may import only its collection's
module_utils (plugins/module_utils/, standard library only), so what both need is
written there once. rackform loads those very files under the names the modules import
them by (`ansible_collections.rackform.site.plugins.module_utils.<name>`), so rackform
and the modules run the same code without Ansible being imported.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

from rackform.collection import MODULE_UTILS_PACKAGE
from rackform.paths import PLUGINS_DIR

MODULE_UTILS_DIR = PLUGINS_DIR / "module_utils"
_IMPORTS = re.compile(rf"^\s*from {re.escape(MODULE_UTILS_PACKAGE)}\.(\w+) import", re.MULTILINE)


def module_utils_file(name: str) -> Path:
    return MODULE_UTILS_DIR / f"{name}.py"


def module_utils_imports(text: str) -> list[str]:
    """The module_utils a module or module_utils file imports (names, in order)."""
    return _IMPORTS.findall(text)


def load_module_utils(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py as `<MODULE_UTILS_PACKAGE>.<name>` (once per process).

    The files it imports (`from <MODULE_UTILS_PACKAGE>.X import ...`) are loaded first
    and registered in sys.modules, where those lines find them.
    """
    qualified = f"{MODULE_UTILS_PACKAGE}.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = module_utils_file(name)
    if not path.is_file():
        raise ImportError(f"{path}: missing (plugins/module_utils ships with rackform)")
    for dependency in module_utils_imports(path.read_text()):
        if dependency != name:
            load_module_utils(dependency)
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise
    return module
