"""Onyx CLI lines: the one copy, shared with the collection's onyx_config Ansible module.

The `rackform.site.onyx_config` module travels alone (AnsiballZ) and may only import its
collection's module_utils, so the line model lives there:
plugins/module_utils/rackform_onyx_lines.py (standard library only). rackform
loads that same file here instead of keeping a second copy: which lines a switch's
configuration holds, what each line sets, the commands that turn one configuration into
another, the `-`/`+` difference and the DSCP map the lines can express are written once.
"""

from __future__ import annotations

from rackform.role_code import load_module_utils, module_utils_file

MODULE_UTILS_FILE = module_utils_file("rackform_onyx_lines")

_shared = load_module_utils("rackform_onyx_lines")

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
