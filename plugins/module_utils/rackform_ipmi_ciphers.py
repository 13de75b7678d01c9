# -*- coding: utf-8 -*-
"""Which cipher suites a BMC's LAN channel lets in: only 17 and 3, set and read back.

LAN configuration parameters (IPMI 2.0 section 23.1, table 23-4; ipmitool numbers them
the same: IPMI_LANP_RMCP_CIPHER_SUPPORT 22, _CIPHERS 23, _PRIV_LEVELS 24):

- 22, RMCP+ Messaging Cipher Suite Entry Support: how many entries parameter 23 has;
- 23, RMCP+ Messaging Cipher Suite Entries: a reserved byte, then one suite id per entry;
- 24, RMCP+ Messaging Cipher Suite Privilege Levels: a reserved byte, then 8 bytes of
  4-bit maximum privilege levels, entry 0 in the low nibble of the first byte. 0 allows
  the suite at no level (ipmitool's `X`), 4 is administrator.

The levels belong to the *entries* of parameter 23, not to suite numbers: ipmi_sim lists
suites 1-16 there, so its third nibble is suite 3. A BMC that does not answer parameter 23
is taken to list suites 0-15 in order (what ipmitool's `lan set cipher_privs` assumes).
Works on anything with pyghmi's `raw_command` (pyghmi's Command, rackform's LanSession).
Standard library only: this file travels inside the Ansible module (AnsiballZ).
"""

from __future__ import absolute_import, division, print_function

NETFN_TRANSPORT = 0x0C
CMD_SET_LAN_CONFIGURATION = 0x01
CMD_GET_LAN_CONFIGURATION = 0x02
PARAMETER_SET_IN_PROGRESS = 0
SET_COMPLETE, SET_IN_PROGRESS, COMMIT_WRITE = 0, 1, 2
ALREADY_IN_PROGRESS = 0x81  # completion code: another client holds "set in progress"
PARAMETER_CIPHER_SUITE_COUNT = 22
PARAMETER_CIPHER_SUITE_ENTRIES = 23
PARAMETER_CIPHER_SUITE_PRIVILEGES = 24
PARAMETER_NOT_SUPPORTED = 0x80  # completion code of Get/Set LAN Configuration Parameters
MAX_ENTRIES = 16
PRIVILEGE_NONE = 0x0
PRIVILEGE_ADMINISTRATOR = 0x4
ALLOWED_SUITES = (17, 3)


class CipherSettingError(Exception):
    """The BMC refused the cipher suite privilege levels, or did not keep them."""


def read_parameter(ipmi, channel, parameter):
    """The parameter's data (revision byte removed), or None when the BMC does not support it."""
    response = ipmi.raw_command(netfn=NETFN_TRANSPORT, command=CMD_GET_LAN_CONFIGURATION,
                                data=[channel, parameter, 0, 0])
    if response.get("code") == PARAMETER_NOT_SUPPORTED:
        return None
    if "error" in response:
        raise CipherSettingError("reading LAN configuration parameter %d failed: %s" % (parameter, response["error"]))
    return bytes(response["data"][1:])


def suite_entries(ipmi, channel):
    """The suite id of each entry of parameter 23 (at most 16), in entry order."""
    count = read_parameter(ipmi, channel, PARAMETER_CIPHER_SUITE_COUNT)
    entries = read_parameter(ipmi, channel, PARAMETER_CIPHER_SUITE_ENTRIES)
    if not entries or len(entries) < 2:
        return tuple(range(MAX_ENTRIES))
    listed = tuple(entries[1:1 + MAX_ENTRIES])
    if count:
        listed = listed[:count[0] & 0x1F]
    return listed


def decode_levels(data):
    """The 16 per-entry levels of parameter 24's data (reserved byte first)."""
    levels = []
    for byte in bytes(data[1:9]).ljust(8, b"\x00"):
        levels += [byte & 0x0F, byte >> 4]
    return levels


def encode_levels(levels):
    """Parameter 24's data for 16 per-entry levels."""
    levels = list(levels) + [PRIVILEGE_NONE] * (MAX_ENTRIES - len(levels))
    return bytes([0]) + bytes(levels[i] | levels[i + 1] << 4 for i in range(0, MAX_ENTRIES, 2))


def wanted_levels(entries, allowed=ALLOWED_SUITES):
    """Administrator for the allowed suites' entries, no access for every other entry."""
    return [PRIVILEGE_ADMINISTRATOR if index < len(entries) and entries[index] in allowed else PRIVILEGE_NONE
            for index in range(MAX_ENTRIES)]


def describe(entries, levels):
    """{suite id: level} for the listed entries, for results and messages."""
    return dict((suite, levels[index]) for index, suite in enumerate(entries))


def allow_only(ipmi, channel, allowed=ALLOWED_SUITES, dry_run=False):
    """Set parameter 24 so that only `allowed` suites log in (at administrator level), then
    read it back. Returns a result dict; with `dry_run` nothing is written."""
    current = read_parameter(ipmi, channel, PARAMETER_CIPHER_SUITE_PRIVILEGES)
    if current is None:
        return {"changed": False, "changes": [], "cipher_suite_privileges": None}
    entries = suite_entries(ipmi, channel)
    wanted = wanted_levels(entries, allowed)
    if decode_levels(current) == wanted:
        return {"changed": False, "changes": [], "cipher_suite_privileges": describe(entries, wanted)}
    change = "%s cipher suites other than %s on LAN channel %d (suites listed: %s)" % (
        "would close" if dry_run else "closed", " and ".join(str(s) for s in allowed), channel,
        ", ".join(str(s) for s in entries))
    if dry_run:
        return {"changed": True, "changes": [change], "cipher_suite_privileges": describe(entries, wanted)}
    # Set In Progress, the parameter, commit write, set complete (section 23.1): without the
    # commit some firmware keeps the change only until it restarts (ipmi_sim does).
    _set_in_progress(ipmi, channel, SET_IN_PROGRESS)
    try:
        response = ipmi.raw_command(netfn=NETFN_TRANSPORT, command=CMD_SET_LAN_CONFIGURATION,
                                    data=[channel, PARAMETER_CIPHER_SUITE_PRIVILEGES] + list(encode_levels(wanted)))
        if "error" in response:
            raise CipherSettingError("setting the cipher suite privilege levels failed: %s" % response["error"])
        _set_in_progress(ipmi, channel, COMMIT_WRITE)
    finally:
        _set_in_progress(ipmi, channel, SET_COMPLETE)
    kept = read_parameter(ipmi, channel, PARAMETER_CIPHER_SUITE_PRIVILEGES)
    if kept is None or decode_levels(kept) != wanted:
        raise CipherSettingError("the BMC accepted the cipher suite privilege levels but reads back %s, not %s"
                                 % (kept.hex() if kept else None, encode_levels(wanted).hex()))
    return {"changed": True, "changes": [change], "cipher_suite_privileges": describe(entries, wanted)}


def _set_in_progress(ipmi, channel, state):
    """LAN parameter 0. Optional in the spec: a BMC that refuses it is written without it, unless
    another client is in the middle of changing the LAN settings."""
    response = ipmi.raw_command(netfn=NETFN_TRANSPORT, command=CMD_SET_LAN_CONFIGURATION,
                                data=[channel, PARAMETER_SET_IN_PROGRESS, state])
    if response.get("code") == ALREADY_IN_PROGRESS and state == SET_IN_PROGRESS:
        raise CipherSettingError("another client is changing the BMC's LAN settings (set in progress); try again")


def exception_for(exceptions, manufacturer_id, product_id, opening):
    """The site's reason to accept `opening` ("cipher_suite_0" or "ipmi_1.5") on this BMC model, or None."""
    for entry in exceptions or []:
        if entry.get("manufacturer_id") != manufacturer_id:
            continue
        if entry.get("product_id") is not None and entry.get("product_id") != product_id:
            continue
        if opening in (entry.get("allow") or []):
            return entry.get("reason")
    return None


def device_model(ipmi):
    """(manufacturer id, product id) from Get Device ID."""
    response = ipmi.raw_command(netfn=0x06, command=0x01)
    if "error" in response:
        raise CipherSettingError("reading the device id failed: %s" % response["error"])
    data = bytes(response["data"])
    if len(data) < 11:
        raise CipherSettingError("the BMC sent a short device id (%d bytes)" % len(data))
    return int.from_bytes(data[6:9], "little") & 0x0FFFFF, data[9] | data[10] << 8
