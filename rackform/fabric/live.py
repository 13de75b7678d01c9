"""Readers of live fabric state: what each switch and host runs right now.

One round trip per device: Linux machines (hosts, Cumulus switches) run one shell
script over SSH that prints every output the check needs, framed in sections
(`@@rackform-section NAME` ... `@@rackform-rc N`); Onyx switches answer `show
running-config` and `show lldp interfaces ethernet remote` over one netmiko login
(`mellanox_mlnxos`). Devices are read in parallel.

What is read:
- every Linux machine: `ip -j -d link show` (MTU, state, MAC, alias, veth or not),
  link speeds from /sys/class/net/*/speed, `lldpcli -f json show neighbors`;
- Cumulus switches: /etc/network/interfaces and its fragments, /etc/frr/frr.conf and
  the QoS datapath file (/etc/cumulus/datapath/qos/qos_features.conf);
- hosts: the ECN sysctl and, per fabric port, the RDMA device behind it, `mlnx_qos`,
  the RoCE traffic class and the NIC's ECN/CNP settings; plus the files the
  roce_host role persists (`HOST_FILES`).

A value a device cannot give (no RDMA NIC in the lab, a veth has no line rate) is an
`Unreadable` with the reason; the check prints it as "not readable here (REASON)".
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rackform.fabric.check_parse import (
    HostRoceConfig,
    LinkState,
    LldpNeighbor,
    NicQos,
    ParseError,
    Section,
    parse_env_lines,
    parse_ip_links,
    parse_lldp_neighbors,
    parse_mlnx_qos,
    parse_roce_host_config,
    parse_sections,
    parse_speeds,
    parse_sysctl,
    parse_sysfs_values,
    parse_traffic_class,
)
from rackform.fabric.check_parse_switch import (
    FrrBgp,
    InterfaceStanza,
    SwitchQos,
    parse_cumulus_qos,
    parse_frr_bgp,
    parse_interfaces,
    parse_onyx_lldp_remote,
    parse_onyx_running_config,
)
from rackform.model.site import Site
from rackform.process_environment import tool_environment

SSH_TIMEOUT_S = 60.0
MAX_PARALLEL_READS = 16

INTERFACES_FILE = "/etc/network/interfaces"
INTERFACES_DIR = "/etc/network/interfaces.d"
FRR_FILE = "/etc/frr/frr.conf"
CUMULUS_QOS_FILE = "/etc/cumulus/datapath/qos/qos_features.conf"
HOST_SYSCTLS = ("net.ipv4.tcp_ecn",)
# What the roce_host role persists (its defaults: roce_host_config_file, roce_host_nccl_conf_file,
# roce_host_unit); tests/unit/test_fabric_check_live.py keeps these in step with the role.
ROCE_HOST_CONFIG_FILE = "/etc/rackform/roce-host.json"
NCCL_CONF_FILE = "/etc/nccl.conf"
ROCE_HOST_UNIT = "rackform-roce-host.service"
HOST_FILES = (ROCE_HOST_CONFIG_FILE, NCCL_CONF_FILE)

SWITCH_PASSWORD_VARIABLE = "RACKFORM_SWITCH_PASSWORD"
"""Where Onyx login passwords come from; the same variable `rackform fabric apply` reads."""
SWITCH_PASSWORD_FILE_VARIABLE = "RACKFORM_SWITCH_PASSWORD_FILE"
"""Or a file holding it: how rackform's runs and the Pulumi provider hand the password on
(roles/onyx_switch reads the same)."""

NO_RDMA_NIC = "no RDMA NIC"
VIRTUAL_LINK = "virtual cable (veth): no line rate"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A value this device cannot give, and why."""

    reason: str

    def __str__(self) -> str:
        return f"not readable here ({self.reason})"


class LiveError(RuntimeError):
    """A device could not be read at all (unreachable, refused the login)."""


# ---------------------------------------------------------------- what a device runs


@dataclass(slots=True)
class NicState:
    """One host fabric port's RDMA side: its QoS, RoCE traffic class, ECN and CNP."""

    qos: NicQos | Unreadable
    roce_tos: int | Unreadable
    ecn_priorities: frozenset[int] | Unreadable
    """Priorities with DCQCN on both as notification and reaction point."""
    cnp_priority: int | Unreadable


@dataclass(slots=True)
class LiveDevice:
    """Everything read from one switch or host; `error` set when it could not be read."""

    name: str
    os: str
    error: str | None = None
    links: dict[str, LinkState] = field(default_factory=dict)
    speeds_mbps: dict[str, int] = field(default_factory=dict)
    lldp: dict[str, list[LldpNeighbor]] | Unreadable = field(default_factory=dict)
    qos: SwitchQos | Unreadable | None = None
    interfaces: dict[str, InterfaceStanza] | Unreadable | None = None
    bgp: FrrBgp | Unreadable | None = None
    sysctls: dict[str, str] = field(default_factory=dict)
    nics: dict[str, NicState] = field(default_factory=dict)
    roce_config: HostRoceConfig | Unreadable | None = None
    """Hosts: what the roce_host unit applies at boot (None: no such file)."""
    nccl: dict[str, str] | None = None
    """Hosts: /etc/nccl.conf (None: no such file)."""
    roce_unit: str | Unreadable | None = None
    """Hosts: `systemctl is-enabled` of the roce_host unit."""


# ---------------------------------------------------------------- snapshot scripts

# s NAME COMMAND...: run COMMAND, its output framed as section NAME with its exit status.
_PRELUDE = r"""s() {
    n=$1; shift
    printf '@@rackform-section %s\n' "$n"; "$@" 2>&1; printf '\n@@rackform-rc %s\n' "$?"
}
export LC_ALL=C
"""


def _section(name: str, *argv: str) -> str:
    return "s " + " ".join(shlex.quote(part) for part in (name, *argv)) + "\n"


def _shell(name: str, command: str) -> str:
    return _section(name, "sh", "-c", command)


def _file(path: str) -> str:
    return _section(f"file:{path}", "cat", path)


def common_script() -> str:
    """Links, speeds and LLDP neighbours: read on every Linux machine."""
    return (
        _PRELUDE
        + _section("ip-link", "ip", "-j", "-d", "link", "show")
        + _shell("speed", "grep -H . /sys/class/net/*/speed 2>/dev/null; true")
        + _section("lldp", "lldpcli", "-f", "json", "show", "neighbors")
    )


def cumulus_script() -> str:
    fragments = (f'for f in {INTERFACES_DIR}/*; do [ -f "$f" ] && s "file:$f" cat "$f"; done\n')
    return (common_script() + _file(INTERFACES_FILE) + fragments + _file(FRR_FILE) + _file(CUMULUS_QOS_FILE))


def host_script(fabric_ports: Iterable[str]) -> str:
    script = common_script() + _section("sysctl", "sysctl", *HOST_SYSCTLS)
    for port in fabric_ports:
        net = f"/sys/class/net/{shlex.quote(port)}"
        script += _section(f"rdma:{port}", "ls", f"/sys/class/net/{port}/device/infiniband")
        script += _section(f"mlnx_qos:{port}", "mlnx_qos", "-i", port)
        script += _shell(f"tclass:{port}",
                         f"cat /sys/class/infiniband/$(ls {net}/device/infiniband | head -n1)/tc/1/traffic_class")
        script += _shell(f"ecn:{port}", f"grep -H . {net}/ecn/roce_np/enable/* {net}/ecn/roce_rp/enable/* "
                                        f"{net}/ecn/roce_np/cnp_802p_prio")
    for path in HOST_FILES:
        script += _file(path)
    return script + _section("unit", "systemctl", "is-enabled", ROCE_HOST_UNIT)


# ---------------------------------------------------------------- turning a snapshot into a LiveDevice


def _unreadable(section: Section | None, what: str) -> Unreadable:
    if section is None:
        return Unreadable(f"{what}: not collected")
    first_line = section.text.strip().splitlines()[-1] if section.text.strip() else f"exit {section.rc}"
    if section.rc == 127:
        return Unreadable(f"{what} not installed")
    return Unreadable(f"{what} failed: {first_line}")


def _read_common(device: LiveDevice, sections: Mapping[str, Section]) -> None:
    links = sections.get("ip-link")
    if links is None or not links.ok:
        raise LiveError(f"{device.name}: `ip -j link` failed: {(links.text if links else 'no output').strip()}")
    device.links = parse_ip_links(links.text)
    if "speed" in sections:
        device.speeds_mbps = parse_speeds(sections["speed"].text)
    lldp = sections.get("lldp")
    try:
        device.lldp = parse_lldp_neighbors(lldp.text) if lldp and lldp.ok else _unreadable(lldp, "lldpcli")
    except ParseError as error:
        device.lldp = Unreadable(str(error))


def _files(sections: Mapping[str, Section]) -> dict[str, str]:
    return {name[len("file:"):]: section.text for name, section in sections.items()
            if name.startswith("file:") and section.ok}


def read_cumulus(name: str, snapshot: str) -> LiveDevice:
    """A Cumulus switch's snapshot (`cumulus_script()` output) -> LiveDevice."""
    sections = parse_sections(snapshot)
    device = LiveDevice(name, "cumulus")
    _read_common(device, sections)
    files = _files(sections)
    device.interfaces = (parse_interfaces(files, INTERFACES_FILE) if INTERFACES_FILE in files
                         else _unreadable(sections.get(f"file:{INTERFACES_FILE}"), INTERFACES_FILE))
    device.bgp = (parse_frr_bgp(files[FRR_FILE]) if FRR_FILE in files
                  else _unreadable(sections.get(f"file:{FRR_FILE}"), FRR_FILE))
    ports = [port for port in device.links if port.startswith("swp")]
    if CUMULUS_QOS_FILE in files:
        device.qos = parse_cumulus_qos(files[CUMULUS_QOS_FILE], f"{name}:{CUMULUS_QOS_FILE}", ports)
    else:
        # No QoS file: the switch runs Cumulus's defaults, 802.1p trust and no PFC or ECN.
        device.qos = SwitchQos(source=f"{name}: no {CUMULUS_QOS_FILE} (Cumulus defaults)", trust_default="pcp")
    return device


def _nic_state(port: str, sections: Mapping[str, Section], link: LinkState | None) -> NicState:
    rdma = sections.get(f"rdma:{port}")
    if link is None:
        missing = Unreadable(f"{port} missing")
        return NicState(missing, missing, missing, missing)
    if rdma is None or not rdma.ok or not rdma.text.strip():
        reason = Unreadable(NO_RDMA_NIC)
        return NicState(reason, reason, reason, reason)
    qos_section = sections.get(f"mlnx_qos:{port}")
    try:
        qos = (parse_mlnx_qos(qos_section.text) if qos_section and qos_section.ok
               else _unreadable(qos_section, "mlnx_qos"))
    except ParseError as error:
        qos = Unreadable(str(error))
    tclass = sections.get(f"tclass:{port}")
    roce_tos = parse_traffic_class(tclass.text) if tclass and tclass.ok else None
    ecn_section = sections.get(f"ecn:{port}")
    ecn_values = parse_sysfs_values(ecn_section.text) if ecn_section else {}
    return NicState(
        qos=qos,
        roce_tos=Unreadable("RoCE traffic class not set (tc/1/traffic_class)") if roce_tos is None else roce_tos,
        ecn_priorities=_ecn_priorities(port, ecn_values),
        cnp_priority=_cnp_priority(port, ecn_values),
    )


def _ecn_priorities(port: str, values: Mapping[str, str]) -> frozenset[int] | Unreadable:
    def enabled(point: str) -> set[int]:
        prefix = f"/sys/class/net/{port}/ecn/{point}/enable/"
        return {int(path[len(prefix):]) for path, value in values.items()
                if path.startswith(prefix) and path[len(prefix):].isdigit() and value == "1"}
    if not any("/ecn/" in path for path in values):
        return Unreadable("the NIC driver has no ecn/ folder")
    return frozenset(enabled("roce_np") & enabled("roce_rp"))


def _cnp_priority(port: str, values: Mapping[str, str]) -> int | Unreadable:
    value = values.get(f"/sys/class/net/{port}/ecn/roce_np/cnp_802p_prio", "")
    return int(value) if value.isdigit() else Unreadable("the NIC driver has no cnp_802p_prio")


def read_host(name: str, snapshot: str, fabric_ports: Iterable[str]) -> LiveDevice:
    """A host's snapshot (`host_script()` output) -> LiveDevice."""
    sections = parse_sections(snapshot)
    device = LiveDevice(name, "host")
    _read_common(device, sections)
    sysctl = sections.get("sysctl")
    device.sysctls = parse_sysctl(sysctl.text) if sysctl else {}
    device.nics = {port: _nic_state(port, sections, device.links.get(port)) for port in fabric_ports}
    files = _files(sections)
    try:
        device.roce_config = (parse_roce_host_config(files[ROCE_HOST_CONFIG_FILE])
                              if ROCE_HOST_CONFIG_FILE in files else None)
    except ParseError as error:
        device.roce_config = Unreadable(str(error))
    device.nccl = parse_env_lines(files[NCCL_CONF_FILE]) if NCCL_CONF_FILE in files else None
    unit = sections.get("unit")
    device.roce_unit = unit.text.strip() if unit is not None and unit.text.strip() else _unreadable(unit, "systemctl")
    return device


ONYX_RUNNING_CONFIG = "show running-config"
ONYX_LLDP_REMOTE = "show lldp interfaces ethernet remote"
ONYX_COMMANDS = (ONYX_RUNNING_CONFIG, ONYX_LLDP_REMOTE)


def read_onyx(name: str, running_config: str, lldp_remote: str | None = None) -> LiveDevice:
    """An Onyx switch's `show running-config` and `show lldp interfaces ethernet remote`
    -> LiveDevice (no link state or speeds read)."""
    lldp = (Unreadable(f"`{ONYX_LLDP_REMOTE}` not read") if lldp_remote is None
            else parse_onyx_lldp_remote(lldp_remote))
    device = LiveDevice(name, "onyx", lldp=lldp)
    device.qos = parse_onyx_running_config(running_config, f"{name}: {ONYX_RUNNING_CONFIG}")
    return device


# ---------------------------------------------------------------- transports


@dataclass(frozen=True, slots=True)
class Target:
    """A device to read and how to reach it."""

    name: str
    os: str  # host, cumulus, onyx, unmanaged
    address: str | None
    fabric_ports: tuple[str, ...] = ()
    port: int = 22
    """SSH port: 22 but for a tunnel or an emulator (`--endpoint`)."""


class SshTransport:
    """Runs a snapshot script on a Linux machine with the system's ssh client."""

    def __init__(self, user: str = "root", key_file: Path | None = None, known_hosts: Path | None = None,
                 timeout_s: float = SSH_TIMEOUT_S):
        self.user, self.key_file, self.known_hosts, self.timeout_s = user, key_file, known_hosts, timeout_s

    def ssh_argv(self, address: str, port: int = 22) -> list[str]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-p", str(port)]
        if self.key_file is not None:
            argv += ["-i", str(self.key_file), "-o", "IdentitiesOnly=yes"]
        # Host keys always checked: against `known_hosts` when given, else the user's own.
        argv += ["-o", "StrictHostKeyChecking=yes"]
        if self.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        return argv + [f"{self.user}@{address}", "sh", "-s"]

    def run_script(self, target: Target, script: str) -> str:
        if target.address is None:
            raise LiveError(f"{target.name}: no management_address in the inventory")
        try:
            result = subprocess.run(self.ssh_argv(target.address, target.port), input=script, capture_output=True,
                                    text=True, timeout=self.timeout_s, env=tool_environment("ssh"))
        except subprocess.TimeoutExpired:
            raise LiveError(f"{target.name}: no answer over SSH within {self.timeout_s:.0f} s") from None
        if result.returncode == 255:
            raise LiveError(f"{target.name}: SSH to {target.address} failed: {result.stderr.strip()}")
        return result.stdout


@dataclass(frozen=True, slots=True)
class OnyxLogin:
    """How to log in to Onyx switches (netmiko `mellanox_mlnxos`), as `rackform fabric apply`
    does: the password from $RACKFORM_SWITCH_PASSWORD (or the file $RACKFORM_SWITCH_PASSWORD_FILE
    names), never from the command line; host
    keys always checked, against `known_hosts` when one is given, else the user's own
    (~/.ssh/known_hosts): an unknown or changed key refuses the login."""

    username: str = "admin"
    password: str | None = field(default=None, repr=False)
    key_file: Path | None = None
    known_hosts: Path | None = None

    @classmethod
    def from_environment(cls, username: str, key_file: Path | None = None,
                         known_hosts: Path | None = None) -> OnyxLogin:
        return cls(username=username, password=switch_password_from_environment(),
                   key_file=key_file, known_hosts=known_hosts)


def switch_password_from_environment() -> str | None:
    """$RACKFORM_SWITCH_PASSWORD, else the first line of the file $RACKFORM_SWITCH_PASSWORD_FILE
    names; None when neither is set. A named file that cannot be read is a LiveError."""
    password = os.environ.get(SWITCH_PASSWORD_VARIABLE)
    if password:
        return password
    path = os.environ.get(SWITCH_PASSWORD_FILE_VARIABLE)
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise LiveError(f"${SWITCH_PASSWORD_FILE_VARIABLE}: cannot read {path}: {error.strerror}") from None
    return text.splitlines()[0] if text.strip() else None


def onyx_running_config(target: Target, login: OnyxLogin) -> str:
    """`show running-config` from an Onyx switch over netmiko."""
    return onyx_outputs(target, login, (ONYX_RUNNING_CONFIG,))[ONYX_RUNNING_CONFIG]


def onyx_outputs(target: Target, login: OnyxLogin, commands: Iterable[str] = ONYX_COMMANDS) -> dict[str, str]:
    """What an Onyx switch prints for each command, over one netmiko login."""
    import paramiko
    from netmiko import ConnectHandler  # slow to import: only when an Onyx switch is read
    from netmiko.exceptions import NetmikoAuthenticationException, NetmikoTimeoutException

    if target.address is None:
        raise LiveError(f"{target.name}: no management_address in the inventory")
    given = login.known_hosts is not None
    params = {"device_type": "mellanox_mlnxos", "host": target.address, "port": target.port,
              "username": login.username, "password": login.password or "", "allow_agent": False,
              "use_keys": login.key_file is not None, "key_file": str(login.key_file) if login.key_file else None,
              "ssh_strict": True, "system_host_keys": not given, "alt_host_keys": given,
              "alt_key_file": str(login.known_hosts) if given else ""}
    try:
        with ConnectHandler(**params) as connection:
            connection.enable()
            return {command: connection.send_command(command) for command in commands}
    except (NetmikoAuthenticationException, NetmikoTimeoutException, OSError, ValueError,
            paramiko.SSHException) as error:
        where = login.known_hosts or "~/.ssh/known_hosts"
        if "does not match" in str(error):
            raise LiveError(f"{target.name}: host key of {target.address}:{target.port} CHANGED from the one in "
                            f"{where}; refusing to log in") from None
        if "not found in known_hosts" in str(error):
            raise LiveError(f"{target.name}: host key of {target.address}:{target.port} is unknown (not in "
                            f"{where}); add it to ssh_host_keys in the inventory and render") from None
        raise LiveError(f"{target.name}: Onyx login to {target.address}:{target.port} failed: {error}") from None


# ---------------------------------------------------------------- reading a site


def targets(site: Site) -> list[Target]:
    """Every device the live check reads: hosts with cabled fabric ports, managed fabric switches."""
    cabled: dict[str, set[str]] = {}
    for cable in site.cables:
        for end in (cable.a, cable.b):
            cabled.setdefault(end.device, set()).add(end.port)
    found = []
    for host in site.hosts.values():
        ports = tuple(port.name for port in host.ports.values()
                      if port.role == "fabric" and port.name in cabled.get(host.name, ()))
        if ports:
            found.append(Target(host.name, "host", _text(host.management_address), ports))
    for switch in site.switches.values():
        if switch.role in ("leaf", "spine"):
            found.append(Target(switch.name, switch.os, _text(switch.management_address)))
    return found


def _text(value) -> str | None:
    return None if value is None else str(value)


Reader = Callable[[Target], LiveDevice]


def read_device(target: Target, ssh: SshTransport, onyx: OnyxLogin) -> LiveDevice:
    """Read one device; a device that cannot be read comes back with `error` set."""
    try:
        if target.os == "onyx":
            outputs = onyx_outputs(target, onyx)
            return read_onyx(target.name, outputs[ONYX_RUNNING_CONFIG], outputs[ONYX_LLDP_REMOTE])
        if target.os == "cumulus":
            return read_cumulus(target.name, ssh.run_script(target, cumulus_script()))
        if target.os == "host":
            return read_host(target.name, ssh.run_script(target, host_script(target.fabric_ports)),
                             target.fabric_ports)
        return LiveDevice(target.name, target.os, error=f"{target.os} switches cannot be read")
    except (LiveError, ParseError) as error:
        return LiveDevice(target.name, target.os, error=str(error).removeprefix(f"{target.name}: "))


def read_site(site: Site, reader: Reader, parallel: int = MAX_PARALLEL_READS) -> dict[str, LiveDevice]:
    """Every target of the site read with `reader`, side by side; name -> LiveDevice."""
    site_targets = targets(site)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(site_targets)))) as pool:
        return {device.name: device for device in pool.map(reader, site_targets)}


def lab_transport(site_name: str) -> SshTransport | None:
    """SSH the way the lab's own tools do (its key and known_hosts), when the site's lab is up here."""
    from rackform.lab import state  # light: the state file reader only

    lab_state = state.load(site_name)
    if lab_state is None or not lab_state.ssh_key.exists():
        return None
    return SshTransport(user="root", key_file=lab_state.ssh_key, known_hosts=lab_state.known_hosts)
