"""Why a BMC could not be used (IpmiError, Reason): the Ansible module's own code, re-exported.

Written once, in plugins/module_utils/rackform_ipmi_errors.py (standard library only, as the
module ships it); see rackform.ipmi.module_utils for why and how it is loaded.
"""

from __future__ import annotations

from rackform.ipmi.module_utils import load

_shared = load("rackform_ipmi_errors")
globals().update({name: value for name, value in vars(_shared).items() if not name.startswith("__")})
