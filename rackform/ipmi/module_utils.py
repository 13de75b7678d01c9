"""The IPMI code rackform shares with its Ansible module, loaded from the role that ships it.

The `rackform_ipmi` module travels alone (AnsiballZ) and may import only its role's
module_utils (roles/bmc_ipmi/module_utils/, standard library only), so the IPMI stack is
written there once: pre-login messages, the RMCP+ packets, the session, the errors, the
retry, read-back and lock rules. rackform loads those very files under the names the
module imports them by (`ansible.module_utils.<name>`), so the fleet client, the CLI, the
Pulumi provider and the module run the same code; `rackform.ipmi.wire`, `session`,
`errors` and `prelogin` re-export it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

from rackform.paths import ROLES_DIR

MODULE_UTILS_DIR = ROLES_DIR / "bmc_ipmi" / "module_utils"
PACKAGE = "ansible.module_utils"
_IMPORTS = re.compile(r"^\s*from ansible\.module_utils\.(\w+) import", re.MULTILINE)


def load(name: str) -> ModuleType:
    """roles/bmc_ipmi/module_utils/<name>.py as `ansible.module_utils.<name>` (once per process).

    The files it imports (`from ansible.module_utils.X import ...`) are loaded first and
    registered in sys.modules, where those lines find them without Ansible being imported.
    """
    qualified = f"{PACKAGE}.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = MODULE_UTILS_DIR / f"{name}.py"
    for dependency in _IMPORTS.findall(path.read_text()):
        if dependency != name:
            load(dependency)
    spec = importlib.util.spec_from_file_location(qualified, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: missing (the bmc_ipmi role ships with rackform)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[qualified]
        raise
    return module
