"""What rackform asks a BMC before any credential: the one copy, shared with the Ansible module.

The `rackform.site.ipmi` Ansible module travels alone (AnsiballZ) and may only import its
collection's module_utils, so the pre-login messages and rules live there:
plugins/module_utils/rackform_ipmi_wire.py (standard library only). The fleet client
loads that same file here instead of keeping a second copy: the Get Channel Authentication
Capabilities request and its decoding, the IPMI message checksum and framing, the accepted
cipher suites, the IPMI 1.5 refusal and the suite 0 login that proves suite 0 closed are
written once.
"""

from __future__ import annotations

from rackform.ipmi.module_utils import MODULE_UTILS_DIR, load

MODULE_UTILS_FILE = MODULE_UTILS_DIR / "rackform_ipmi_wire.py"

_shared = load("rackform_ipmi_wire")

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
