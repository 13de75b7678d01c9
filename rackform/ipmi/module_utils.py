"""The IPMI code rackform shares with its Ansible module, loaded from the collection that ships it.

The `rackform.site.ipmi` module travels alone (AnsiballZ) and may import only its
collection's module_utils (plugins/module_utils/, standard library only), so the IPMI
stack is written there once: pre-login messages, the RMCP+ packets, the session, the
errors, the retry, read-back and lock rules. rackform loads those very files under the
names the module imports them by (rackform.role_code), so the fleet client, the CLI,
the Pulumi provider and the module run the same code; `rackform.ipmi.wire`, `session`,
`errors` and `prelogin` re-export it.
"""

from __future__ import annotations

from types import ModuleType

from rackform.role_code import MODULE_UTILS_DIR, load_module_utils

__all__ = ["MODULE_UTILS_DIR", "load"]


def load(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py under the module's import name (rackform.role_code)."""
    return load_module_utils(name)
