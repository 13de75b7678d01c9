"""One RMCP+ session to one BMC (LanSession, Timeouts): the Ansible module's own code, re-exported.

Written once, in plugins/module_utils/rackform_ipmi_lan.py (standard library only, as the
module ships it); see rackform.ipmi.module_utils for why and how it is loaded.
"""

from __future__ import annotations

from rackform.ipmi.module_utils import load

_shared = load("rackform_ipmi_lan")
globals().update({name: value for name, value in vars(_shared).items() if not name.startswith("__")})
