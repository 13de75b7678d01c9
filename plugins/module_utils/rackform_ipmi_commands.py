# -*- coding: utf-8 -*-
"""The IPMI commands hardening and power need, over rackform's own session (LanSession).

Method names and arguments are pyghmi Command's (get_user_name, set_user_access,
set_bootdev ...), which the harden and chassis code were first written against; the
requests are the IPMI 2.0 ones (section numbers below), sent with `raw_command`. No pyghmi:
the module runs with the standard library and the collection's module_utils only.
Standard library only: this file travels inside the Ansible module (AnsiballZ).
"""

from __future__ import absolute_import, division, print_function

NETFN_APP, NETFN_CHASSIS = 0x06, 0x00
CMD_GET_CHANNEL_INFO = 0x42  # 22.24
CMD_SET_USER_ACCESS = 0x43  # 22.26
CMD_SET_USER_NAME = 0x45  # 22.28
CMD_GET_USER_NAME = 0x46  # 22.29
CMD_SET_USER_PASSWORD = 0x47  # 22.30
CMD_SET_BOOT_OPTIONS, CMD_GET_BOOT_OPTIONS = 0x08, 0x09  # 28.12, 28.13
BOOT_FLAGS = 5
MEDIUM_802_3_LAN = 0x04
LAN_CHANNELS = range(1, 12)  # 0 is IPMB, 0x0E "this channel", 0x0F the system interface
NAME_BYTES = 16
PASSWORD_MODES = {"disable": 0, "enable": 1, "set_password": 2, "test_password": 3}
PRIVILEGE_LEVELS = {"callback": 1, "user": 2, "operator": 3, "administrator": 4, "proprietary": 5,
                    "no_access": 0x0F}
BOOT_DEVICE_CODES = {"default": 0, "network": 1, "hd": 2, "safe": 3, "optical": 5, "setup": 6, "floppy": 15}
BOOT_DEVICE_NAMES = dict((code, name) for name, code in BOOT_DEVICE_CODES.items())


class CommandError(Exception):
    """The BMC answered a command with an error completion code."""


class BmcCommands(object):
    """A logged-in LanSession with the commands the module uses; `session` stays reachable."""

    def __init__(self, session):
        self.session = session
        self.ipmi_session = session  # the name the module's logout uses
        self._channel = None

    def raw_command(self, netfn, command, data=()):
        return self.session.raw_command(netfn, command, data=data)

    def _command(self, netfn, command, data, what):
        response = self.raw_command(netfn, command, data)
        if "error" in response:
            raise CommandError("%s failed: %s" % (what, response["error"]))
        return bytes(response["data"])

    def get_network_channel(self):
        """The first channel whose medium is 802.3 LAN (Get Channel Info), else 1."""
        if self._channel is None:
            self._channel = 1
            for channel in LAN_CHANNELS:
                response = self.raw_command(NETFN_APP, CMD_GET_CHANNEL_INFO, [channel])
                data = response.get("data") or b""
                if "error" not in response and len(data) > 1 and data[1] & 0x7F == MEDIUM_802_3_LAN:
                    self._channel = channel
                    break
        return self._channel

    def get_user_name(self, uid):
        data = self._command(NETFN_APP, CMD_GET_USER_NAME, [uid], "reading the name of user %d" % uid)
        return data.split(b"\0", 1)[0].decode("utf-8", "replace")

    def set_user_name(self, uid, name):
        encoded = name.encode("utf-8")
        if len(encoded) > NAME_BYTES:
            raise CommandError("user name %r is longer than %d bytes" % (name, NAME_BYTES))
        self._command(NETFN_APP, CMD_SET_USER_NAME, bytes([uid]) + encoded.ljust(NAME_BYTES, b"\0"),
                      "setting the name of user %d" % uid)
        return True

    def set_user_password(self, uid, mode="set_password", password=None):
        """Set User Password: a password longer than 16 bytes is sent in the 20-byte form."""
        data = bytearray([uid, PASSWORD_MODES[mode]])
        if mode in ("set_password", "test_password"):
            secret = (password or "").encode("utf-8")
            size = 20 if len(secret) > 16 else 16
            if size == 20:
                data[0] |= 0x80
            data += secret.ljust(size, b"\0")
        self._command(NETFN_APP, CMD_SET_USER_PASSWORD, bytes(data), "%s of user %d" % (mode, uid))
        return True

    def set_user_access(self, uid, channel, callback=False, link_auth=True, ipmi_msg=True,
                        privilege_level="user"):
        flags = 0x80 | (0x40 if callback else 0) | (0x20 if link_auth else 0) | (0x10 if ipmi_msg else 0)
        data = [flags | (channel & 0x0F), uid & 0x3F, PRIVILEGE_LEVELS[privilege_level], 0]
        self._command(NETFN_APP, CMD_SET_USER_ACCESS, data, "setting the access of user %d" % uid)
        return True

    def get_bootdev(self):
        """{bootdev, persistent, uefimode} from the boot flags (parameter 5). Flags without their
        "valid" bit (or a parameter marked invalid) mean no override: `default`."""
        data = self._command(NETFN_CHASSIS, CMD_GET_BOOT_OPTIONS, [BOOT_FLAGS, 0, 0], "reading the boot device")
        if len(data) < 4 or data[1] & 0x80 or not data[2] & 0x80:
            return {"bootdev": "default", "persistent": True}
        return {"bootdev": BOOT_DEVICE_NAMES.get((data[3] >> 2) & 0x0F, "unknown"),
                "persistent": bool(data[2] & 0x40), "uefimode": bool(data[2] & 0x20)}

    def set_bootdev(self, bootdev, persist=False, uefiboot=False):
        """Boot flags: valid, persistent or next boot only, BIOS or UEFI, the device (`default`
        clears the override). First parameter 3 as pyghmi sends it (8: a watchdog timeout does
        not clear the flags' valid bit)."""
        self._command(NETFN_CHASSIS, CMD_SET_BOOT_OPTIONS, [3, 8], "keeping the boot flags valid")
        flags = 0x80 | (0x40 if persist else 0) | (0x20 if uefiboot else 0) if bootdev != "default" else 0
        self._command(NETFN_CHASSIS, CMD_SET_BOOT_OPTIONS, [BOOT_FLAGS, flags, BOOT_DEVICE_CODES[bootdev] << 2, 0, 0, 0],
                      "setting the boot device to %s" % bootdev)
        return {"bootdev": bootdev}
