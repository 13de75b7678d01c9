"""What rackform asks a BMC before any credential: the one copy, shared with the Ansible module.

The `rackform_ipmi` Ansible module travels alone (AnsiballZ) and may only import its role's
module_utils, so the pre-login messages and rules live there:
roles/bmc_ipmi/module_utils/rackform_ipmi_wire.py (standard library only). The fleet client
loads that same file here instead of keeping a second copy: the Get Channel Authentication
Capabilities request and its decoding, the IPMI message checksum and framing, the accepted
cipher suites, the IPMI 1.5 refusal and the suite 0 login that proves suite 0 closed are
written once.
"""

from __future__ import annotations

import importlib.util
import sys

from rackform.paths import ROLES_DIR

MODULE_UTILS_FILE = ROLES_DIR / "bmc_ipmi" / "module_utils" / "rackform_ipmi_wire.py"
_MODULE_NAME = "rackform.ipmi._module_utils_wire"


def _load():
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, MODULE_UTILS_FILE)
    if spec is None or spec.loader is None:
        raise ImportError(f"{MODULE_UTILS_FILE}: missing (the bmc_ipmi role ships with rackform)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


_shared = _load()

ACCEPTED_CIPHER_SUITES: tuple[int, ...] = _shared.ACCEPTED_CIPHER_SUITES
AuthCapabilities = _shared.AuthCapabilities
BmcSilent = _shared.BmcSilent
CMD_GET_CHANNEL_AUTH_CAPABILITIES: int = _shared.CMD_GET_CHANNEL_AUTH_CAPABILITIES
IPMI15_ONLY_COMPLETION_CODE: int = _shared.IPMI15_ONLY_COMPLETION_CODE
IPMI15_ONLY_REFUSAL: str = _shared.IPMI15_ONLY_REFUSAL
NETFN_APP: int = _shared.NETFN_APP
auth_capabilities_request = _shared.auth_capabilities_request
checksum = _shared.checksum
parse_auth_capabilities = _shared.parse_auth_capabilities
parse_response_message = _shared.parse_response_message
request_message = _shared.request_message
response_data = _shared.response_data
sessionless_frame = _shared.sessionless_frame
suite0_gets_in = _shared.suite0_gets_in
