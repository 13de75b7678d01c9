"""Onyx CLI lines: the one copy, shared with the onyx_switch role's Ansible module.

The `rackform_onyx_config` module travels alone (AnsiballZ) and may only import its
role's module_utils, so the line model lives there:
roles/onyx_switch/module_utils/rackform_onyx_lines.py (standard library only). rackform
loads that same file here instead of keeping a second copy: which lines a switch's
configuration holds, what each line sets, the commands that turn one configuration into
another, the `-`/`+` difference and the DSCP map the lines can express are written once.
"""

from __future__ import annotations

import importlib.util
import sys

from rackform.paths import ROLES_DIR

MODULE_UTILS_FILE = ROLES_DIR / "onyx_switch" / "module_utils" / "rackform_onyx_lines.py"
_MODULE_NAME = "rackform.fabric._module_utils_onyx_lines"


def _load():
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, MODULE_UTILS_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"{MODULE_UTILS_FILE}: missing (the onyx_switch role ships with rackform)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


_shared = _load()

ERROR_PATTERN: str = _shared.ERROR_PATTERN
RULES = _shared.RULES
SAVE_COMMAND: str = _shared.SAVE_COMMAND
LineRule = _shared.LineRule
Setting = _shared.Setting
commands = _shared.commands
config_lines = _shared.config_lines
diff_text = _shared.diff_text
dscp_map_refusal = _shared.dscp_map_refusal
everything = _shared.everything
managed = _shared.managed
onyx_default_priority = _shared.onyx_default_priority
ports_and_globals = _shared.ports_and_globals
setting = _shared.setting
