"""Shared by the provision unit tests: rackform's IPMI module code loaded as Ansible would,
and an in-memory BMC behind the command interface that code calls (BmcCommands: raw_command,
get_network_channel), for the hardening rules without a wire.

The module files import each other as `ansible_collections.rackform.site.plugins.module_utils.<name>`
(how AnsiballZ ships collection module_utils); `load_ipmi_modules` registers them under those names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from collection_support import load_plugin

REPO = Path(__file__).resolve().parents[2]
MODULE_FILE = REPO / "plugins" / "modules" / "ipmi.py"
MODULE_UTILS = ("rackform_ipmi_wire", "rackform_ipmi_ciphers", "rackform_ipmi_errors", "rackform_ipmi_rmcp",
                "rackform_ipmi_lan", "rackform_ipmi_commands", "rackform_ipmi_session", "rackform_ipmi_users",
                "rackform_ipmi_chassis")


def load_ipmi_modules() -> dict:
    """{short name: module} for the module_utils and the module itself (`rackform_ipmi`: rackform.site.ipmi)."""
    from rackform.ipmi.module_utils import load  # the loader rackform itself uses: one copy in the process

    loaded = {name: load(name) for name in MODULE_UTILS}
    loaded["rackform_ipmi"] = load_plugin("rackform_ipmi_module", MODULE_FILE)
    return loaded


# --- an in-memory BMC ------------------------------------------------------------------------

PRIVILEGES = {"callback": 1, "user": 2, "operator": 3, "administrator": 4, "no_access": 0x0F}


@dataclass
class FakeUser:
    name: str | None
    password: bytes = b""
    enabled: bool = True
    privilege: int = 2
    ipmi_messaging: bool = True


@dataclass
class FakeBmc:
    """A BMC's state as IPMI shows it. `password_bytes` = what it keeps of a password (16 or 20)."""

    users: dict[int, FakeUser] = field(default_factory=dict)
    max_users: int = 16
    password_bytes: int = 20
    reports_enable_bits: bool = True
    power: str = "off"
    boot_device: str = "default"
    boot_persistent: bool = True
    writes: list[str] = field(default_factory=list)
    """Every state-changing command received, in order."""
    power_lag_reads: int = 0
    """Chassis status reads that still show the old state after a power change."""
    lagging_reads: int = 0
    refuse_password_change: bool = False
    cipher_entries: tuple[int, ...] = (0, 1, 2, 3, 6, 7, 8, 11, 12, 15, 16, 17)
    """LAN parameter 23: the suite id of each entry."""
    cipher_levels: list[int] = field(default_factory=lambda: [4] * 16)
    """LAN parameter 24: the maximum privilege of each entry (4 = administrator, 0 = none)."""
    honours_cipher_levels: bool = True
    """False: stores parameter 24 and lets suite 0 in anyway (ipmi_sim)."""
    device_model: tuple[int, int] = (0x001291, 0x1234)

    def suite0_gets_in(self) -> bool:
        if 0 not in self.cipher_entries:
            return False
        return not self.honours_cipher_levels or self.cipher_levels[self.cipher_entries.index(0)] != 0

    @classmethod
    def factory(cls, **kwargs) -> FakeBmc:
        users = {1: FakeUser(None, b"", True, 2, True), 2: FakeUser("ADMIN", b"ADMIN", True, 4, True)}
        return cls(users=users, **kwargs)

    def accepts(self, user: str, password: str) -> bool:
        """As RAKP does: the key is the stored password, so a longer one than it keeps never matches."""
        secret = password.encode()
        for slot in self.users.values():
            if slot.name == (user or None) and slot.enabled and slot.ipmi_messaging and slot.privilege != 0x0F:
                return len(secret) <= self.password_bytes and slot.password == secret
        return False

    def user(self, uid: int) -> FakeUser:
        return self.users.setdefault(uid, FakeUser(None, b"", False, 0, False))


class FakeSession:
    def __init__(self, version: float = 2.0, integrity: int = 1):
        self.ipmiversion = version
        self.integrityalgo = integrity
        self.logged_out = False

    def logout(self):
        self.logged_out = True


class FakeIpmi:
    """The BmcCommands methods rackform's module calls (rackform_ipmi_commands), over a FakeBmc."""

    channel = 1

    def __init__(self, bmc: FakeBmc, user: str = "ADMIN"):
        self.bmc = bmc
        self.user_name = user
        self.ipmi_session = FakeSession()

    def get_network_channel(self):
        return self.channel

    def raw_command(self, netfn, command, data=()):
        bmc = self.bmc
        if (netfn, command) == (0x06, 0x44):  # Get User Access
            uid = data[1]
            slot = bmc.users.get(uid) or FakeUser(None, b"", False, 0, False)
            enabled_bits = (0b01 if slot.enabled else 0b10) if bmc.reports_enable_bits else 0
            access = slot.privilege | (0x10 if slot.ipmi_messaging else 0)
            count = sum(1 for s in bmc.users.values() if s.enabled)
            return {"data": bytearray([bmc.max_users, enabled_bits << 6 | count, 0, access])}
        if (netfn, command) == (0x0C, 0x02):  # Get LAN Configuration Parameters
            parameter = data[1]
            if parameter == 22:
                return {"data": bytearray([0x11, len(bmc.cipher_entries)])}
            if parameter == 23:
                return {"data": bytearray([0x11, 0, *bmc.cipher_entries])}
            if parameter == 24:
                levels = bmc.cipher_levels
                return {"data": bytearray([0x11, 0, *(levels[i] | levels[i + 1] << 4 for i in range(0, 16, 2))])}
            return {"error": "parameter not supported", "code": 0x80}
        if (netfn, command) == (0x0C, 0x01) and data[1] == 0:  # Set In Progress, commit
            return {"data": bytearray()}
        if (netfn, command) == (0x0C, 0x01) and data[1] == 24:  # Set LAN Configuration Parameters
            bmc.writes.append("cipher suite privileges")
            bmc.cipher_levels = [nibble for byte in data[3:11] for nibble in (byte & 0x0F, byte >> 4)]
            return {"data": bytearray()}
        if (netfn, command) == (0x06, 0x01):  # Get Device ID
            manufacturer, product = bmc.device_model
            return {"data": bytearray([0x20, 1, 1, 0, 2, 0x9F, *manufacturer.to_bytes(3, "little"),
                                       *product.to_bytes(2, "little")])}
        if (netfn, command) == (0x00, 0x01):  # Get Chassis Status
            if bmc.lagging_reads > 0:
                bmc.lagging_reads -= 1
                shown = "off" if bmc.power == "on" else "on"
            else:
                shown = bmc.power
            return {"data": bytearray([1 if shown == "on" else 0, 0, 0])}
        if (netfn, command) == (0x00, 0x02):  # Chassis Control
            action = {0: "off", 1: "on", 2: "cycle", 3: "reset", 5: "soft"}[data[0]]
            bmc.writes.append(f"power {action}")
            bmc.power = "off" if action in ("off", "soft") else "on"
            bmc.lagging_reads = bmc.power_lag_reads
            return {"data": bytearray()}
        return {"error": f"unexpected raw command {netfn:#x}/{command:#x}"}

    def get_user_name(self, uid):
        return self.bmc.users[uid].name if uid in self.bmc.users else None

    def set_user_name(self, uid, name):
        self.bmc.writes.append(f"name {uid} {name}")
        self.bmc.user(uid).name = name

    def set_user_password(self, uid, mode="set_password", password=None):
        self.bmc.writes.append(f"password {uid} {mode}")
        slot = self.bmc.user(uid)
        if mode == "set_password":
            if self.bmc.refuse_password_change:
                return True  # acknowledged, never stored: the new login will fail
            slot.password = password.encode()[:self.bmc.password_bytes]
        elif mode == "enable":
            slot.enabled = True
        elif mode == "disable":
            slot.enabled = False
        return True

    def set_user_access(self, uid, channel, callback=False, link_auth=True, ipmi_msg=True, privilege_level="user"):
        self.bmc.writes.append(f"access {uid} {privilege_level}")
        slot = self.bmc.user(uid)
        slot.privilege = PRIVILEGES[privilege_level]
        slot.ipmi_messaging = ipmi_msg

    def get_bootdev(self):
        return {"bootdev": self.bmc.boot_device, "persistent": self.bmc.boot_persistent}

    def set_bootdev(self, bootdev, persist=False, uefiboot=False):
        self.bmc.writes.append(f"bootdev {bootdev}")
        self.bmc.boot_device, self.bmc.boot_persistent = bootdev, persist
        return {"bootdev": bootdev}


def fake_login(bmc: FakeBmc, session_module, logins: list | None = None):
    """A `login(address, port, credential)` over a FakeBmc, recording each try in `logins`."""

    def login(address, port, credential, *_session_options):
        if logins is not None:
            logins.append((credential.user, credential.label, len(credential.password.encode())))
        if not bmc.accepts(credential.user, credential.password):
            raise session_module.BmcAuthRejected(f"{address}: Incorrect password provided")
        return FakeIpmi(bmc, credential.user), 3

    return login
