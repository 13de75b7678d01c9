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

from types import ModuleType

from rackform.role_code import load_module_utils, module_utils_dir

ROLE = "bmc_ipmi"
MODULE_UTILS_DIR = module_utils_dir(ROLE)


def load(name: str) -> ModuleType:
    """roles/bmc_ipmi/module_utils/<name>.py as `ansible.module_utils.<name>` (rackform.role_code)."""
    return load_module_utils(ROLE, name)
