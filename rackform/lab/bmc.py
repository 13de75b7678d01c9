"""The lab's BMCs: one OpenIPMI `ipmi_sim` per host, each at its own address on the OOB network.

Every host with a `bmc_address` gets a BMC that speaks IPMI 2.0 (RMCP+, `lanplus`) on UDP 623:

    root namespace                          namespace <site>-bmc-<host>
    bridge <site>_oob  (10.10.1.1/24) ---- veth ---- eth0 10.10.1.11/24, MAC = bmc_mac
                                                     ipmi_sim (lan.conf, bmc.emu, sim/)

The bridge has the name and MTU rackform.lab.lab gives it (the hosts' lab may have made it
already) and carries the OOB network's first address, so tools in the root namespace reach
every BMC at its real address. Each BMC comes up with factory defaults: user 2 ADMIN/ADMIN
(administrator) and the null user (id 1, no name, no password), both enabled: disabling
them is provisioning's job. A chassis command runs rackform.lab.chassis_hook, which powers
the host through a driver: `nspawn` (the lab's hosts) or `process` (the BMC-only test
driver, a `sleep infinity` process per host).

Two sensors are served: the host's inlet temperature and its power draw, the building
block's catalog typical power per node. IPMI readings are one byte, scaled by the
multiplier M of the sensor record (watts = M x raw); see `linear_scale`.

State, under `<state_dir>/bmc/<site>/<host>/` (0700, root only): lan.conf (0600, it holds
the factory password), bmc.emu, bmc.json (pid, names), ipmi_sim.log, sim/ (ipmi_sim's own
persistent state: users and LAN settings that provisioning changes), and the hook's files
(bootdev, chassis.log, host.pid). `stop_bmcs` removes all of it with the namespaces,
veths and processes.

ipmi_sim's quirks met here (OpenIPMI 2.0.33, "IPMI Simulator version 1.0.13"):
- Without `-n` it watches stdin and dies on /dev/null (epoll_ctl: EPERM); with `-n` it
  reports nothing: errors after start go to syslog, and there is none here.
- It stops reading the emulator file at the first bad command, silently with `-n`; then
  `mc_enable` never runs and the BMC never binds. Numbers are parsed with base 0, so SDR
  bytes need `0x` ("ff" is rejected, "08" would be octal).
- A sensor is "disabled"/"unavailable" to ipmitool and pyghmi until `sensor_set_event_support
  ... scanning` turns scanning on.
- Cipher suites 0, 1, 2, 3 and 6 are accepted; 7 and 8 fail at the privilege step, 11 and
  12 abort ipmitool, 15-17 (SHA-256) are unknown, so ipmitool's default (17) fails after
  its retries: use `-C 3`. Suite 0 accepts ANY
  password (the classic cipher-zero hole); `lan set 1 cipher_privs` is stored but indexes
  the table by privilege, not by suite, so it cannot close that hole and can lock FreeIPMI
  out. IPMI 1.5 (`-I lan`, MD5) also works. FreeIPMI needs `-W opensesspriv`.
- It runs chassis_control through popen and serves nobody until the program exits; the
  program inherits its descriptors (the UDP socket, the pipe it reads): a host the hook
  starts must close them, or ipmi_sim waits for EOF forever.
- The boot flags it reports never carry the "valid" bit, so clients (pyghmi get_bootdev)
  read "default": read the boot device from the hook's state (`boot_device`) instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from rackform.lab import LabError, chassis_hook, netns, run
from rackform.lab.fru import fru_area
from rackform.model.site import Host, Site
from rackform.paths import PACKAGE_PARENT
from rackform.process_environment import tool_environment
from rackform.render.assets import project_templates

IPMI_PORT = 623
BMC_IPMB = 0x20
NULL_USER_ID = 1
FACTORY_ADMIN_USER_ID = 2
FACTORY_ADMIN_USER = "ADMIN"
FACTORY_ADMIN_PASSWORD = "ADMIN"
MAX_SESSIONS_PER_USER = 10
MANUFACTURER_ID = 0x001291  # the IANA number OpenIPMI's own example simulator uses
INLET_TEMPERATURE_C = 22
OOB_MTU = 1500
BMC_IFNAME = "eth0"
DRIVERS = tuple(sorted(chassis_hook.DRIVERS))
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 3.0
_SAFE_WORD = re.compile(r"[A-Za-z0-9_./:+-]+")  # what may go into lan.conf's quoted command

LAN_CONF = "lan.conf"
EMULATOR_COMMANDS = "bmc.emu"
RECORD = "bmc.json"
LOG = "ipmi_sim.log"
PID_FILE = "ipmi_sim.pid"
SIM_STATE = "sim"
BRIDGE_RECORD = "bridge.json"


# --- names ------------------------------------------------------------------------------------

def oob_bridge_name(site_name: str) -> str:
    """The OOB bridge: the same name rackform.lab.lab.bridge_name(site, "oob") gives it."""
    return netns.short_ifname(f"{site_name}_oob", f"{site_name}_oob")


def bmc_netns_name(site_name: str, host: str) -> str:
    return f"{site_name}-bmc-{host}"


def bmc_veth_name(site_name: str, host: str) -> str:
    """The root-namespace end of the BMC's veth (on the bridge), hashed when over 15 characters."""
    return netns.short_ifname(f"{site_name}-bmc-{host}", f"{site_name}/bmc/{host}")


def bmc_root(state_dir: Path | str, site_name: str) -> Path:
    return Path(state_dir) / "bmc" / site_name


# --- sensors ----------------------------------------------------------------------------------

UNIT_DEGREES_C = 1
UNIT_WATTS = 6
SENSOR_TYPE_TEMPERATURE = 0x01
SENSOR_TYPE_OTHER_UNITS = 0x0B  # a units-based reading: watts
ENTITY_AIR_INLET = 0x37
ENTITY_POWER_UNIT = 0x13
MAX_MULTIPLIER = 511  # M is a 10-bit two's complement number in the sensor record


def linear_scale(value: int) -> tuple[int, int]:
    """(M, raw) with M * raw == value, or as near as one byte allows.

    A reading is one byte (0..255), so a figure above 255 needs the record's multiplier M.
    M is the smallest that fits, moved up to one that divides the figure when there is one:
    8500 W = 34 x 250, 400 W = 2 x 200. Otherwise the reading is off by at most M/2.
    """
    if not 0 <= value <= MAX_MULTIPLIER * 255:
        raise LabError(f"a sensor reading of {value} does not fit IPMI's linear one-byte format")
    if value <= 255:
        return 1, value
    smallest = -(-value // 255)
    exact = next((m for m in range(smallest, MAX_MULTIPLIER + 1) if value % m == 0), None)
    if exact is not None:
        return exact, value // exact
    return smallest, round(value / smallest)


@dataclass(frozen=True, slots=True)
class AnalogSensor:
    """A threshold-type sensor with a fixed reading, as ipmi_sim serves it."""

    number: int
    name: str  # at most 16 characters
    sensor_type: int
    entity_id: int
    base_unit: int
    multiplier: int
    raw: int

    @property
    def reading(self) -> int:
        return self.multiplier * self.raw

    @property
    def reading_text(self) -> str:
        unit = {UNIT_WATTS: "W", UNIT_DEGREES_C: "degrees C"}[self.base_unit]
        return f"{self.reading} {unit} (raw {self.raw} x M {self.multiplier})"

    @property
    def sdr(self) -> list[int]:
        """The sensor's Full Sensor Record (IPMI 2.0 table 43-1), header included."""
        name = self.name.encode("ascii")
        body = [
            BMC_IPMB, 0x00, self.number,  # owner, LUN, sensor number
            self.entity_id, 0x01,  # entity, instance
            0x67,  # initialise scanning, events and type; scanning and events on
            0x40,  # auto re-arm; no hysteresis, thresholds or events
            self.sensor_type, 0x01,  # reading type: threshold
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  # assertion, deassertion, reading masks
            0x00, self.base_unit, 0x00,  # unsigned; unit; no modifier unit
            0x00,  # linear
            self.multiplier & 0xFF, (self.multiplier >> 8 & 0x03) << 6,  # M; tolerance 0
            0x00, 0x00, 0x00,  # B = 0; accuracy 0; direction unspecified
            0x00,  # R and B exponents 0: value = M x raw
            0x01, self.raw, 0x00, 0x00,  # nominal reading given; normal max, min
            0xFF, 0x00,  # sensor max, min
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  # thresholds (none)
            0x00, 0x00,  # hysteresis
            0x00, 0x00, 0x00,  # reserved, reserved, OEM
            0xC0 | len(name), *name,  # 8-bit ASCII id string
        ]
        return [0x00, 0x00, 0x51, 0x01, len(body), *body]  # record id (assigned), SDR 1.5, full


def host_power_w(host: Host) -> int:
    """The catalog's typical power for one node of the host's building block."""
    return round(host.block.power.typical_w / host.block.nodes)


def host_sensors(host: Host) -> list[AnalogSensor]:
    multiplier, raw = linear_scale(host_power_w(host))
    return [
        AnalogSensor(1, "Inlet Temp", SENSOR_TYPE_TEMPERATURE, ENTITY_AIR_INLET, UNIT_DEGREES_C,
                     1, INLET_TEMPERATURE_C),
        AnalogSensor(2, "Power Draw", SENSOR_TYPE_OTHER_UNITS, ENTITY_POWER_UNIT, UNIT_WATTS,
                     multiplier, raw),
    ]


# --- rendering --------------------------------------------------------------------------------

def bmc_guid(site_name: str, host: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"rackform:{site_name}/bmc/{host}").hex


def factory_users() -> list[dict]:
    return [
        {"id": NULL_USER_ID, "name": "", "password": "", "privilege": "user",
         "max_sessions": MAX_SESSIONS_PER_USER},
        {"id": FACTORY_ADMIN_USER_ID, "name": FACTORY_ADMIN_USER, "password": FACTORY_ADMIN_PASSWORD,
         "privilege": "admin", "max_sessions": MAX_SESSIONS_PER_USER},
    ]


def chassis_control_command(site_name: str, host: str, driver: str, host_dir: Path,
                            root_netns_fd: int) -> str:
    """The command line lan.conf's chassis_control runs (through sh), arguments appended."""
    words = [sys.executable, "-m", "rackform.lab.chassis_hook", "--site", site_name, "--node", host,
             "--driver", driver, "--state-dir", str(host_dir), "--root-netns-fd", str(root_netns_fd)]
    unsafe = [word for word in words if not _SAFE_WORD.fullmatch(word)]
    if unsafe:
        raise LabError(f"cannot put {unsafe[0]!r} into ipmi_sim's chassis_control: use a path and "
                       f"names made of letters, digits and _ . / : + -")
    return " ".join(words)


def render_lan_conf(site_name: str, host: Host, chassis_control: str) -> str:
    return project_templates().get_template("lab/ipmi_sim/lan.conf.j2").render(
        host=host.name, name=host.name, ipmb=BMC_IPMB, address=host.bmc_address, port=IPMI_PORT,
        guid=bmc_guid(site_name, host.name), chassis_control=chassis_control, users=factory_users())


def product_id(block_name: str) -> int:
    """A 16-bit product id per building block, as real BMCs of one model share one.

    Clients cache sensor records by manufacturer, product and firmware (pyghmi does, in
    memory): one id for all blocks made a DGX's 34 W-per-count power sensor read on an
    HCI node as 6800 W.
    """
    return int(hashlib.sha1(block_name.encode()).hexdigest()[:4], 16)


def render_emulator_commands(site_name: str, host: Host) -> str:
    return project_templates().get_template("lab/ipmi_sim/bmc.emu.j2").render(
        host=host.name, ipmb=BMC_IPMB, manufacturer_id=MANUFACTURER_ID, product_id=product_id(host.block.name),
        guid=bmc_guid(site_name, host.name), sensors=host_sensors(host), fru=host_fru(site_name, host))


@dataclass(frozen=True, slots=True)
class FruImage:
    manufacturer: str
    product: str
    serial: str
    data: bytes


def host_fru(site_name: str, host: Host) -> FruImage:
    """FRU device 0 of a lab host's BMC: its block's vendor and name, and its inventory serial.

    A host without a serial in the inventory gets one made from the site and host names, as
    every real chassis has one.
    """
    block = host.block
    serial = host.serial or f"{site_name}-{host.name}".upper()
    return FruImage(block.vendor, block.display_name, serial, fru_area(block.vendor, block.display_name, serial))


# --- records ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BmcInfo:
    """A running BMC: where to reach it and what to clean up."""

    site: str
    host: str
    address: IPv4Address
    netns: str
    veth: str
    driver: str
    pid: int
    state_dir: Path

    def to_json(self) -> str:
        record = asdict(self)
        record.update(address=str(self.address), state_dir=str(self.state_dir))
        return json.dumps(record, indent=2, sort_keys=True)

    @classmethod
    def from_file(cls, path: Path) -> BmcInfo:
        record = json.loads(path.read_text())
        record.update(address=IPv4Address(record["address"]), state_dir=Path(record["state_dir"]))
        return cls(**record)


@dataclass(frozen=True, slots=True)
class BmcStatus:
    host: str
    address: IPv4Address
    pid: int | None
    running: bool
    listening: bool
    rss_kib: int | None

    @property
    def up(self) -> bool:
        return self.running and self.listening


def recorded_bmcs(state_dir: Path | str, site_name: str) -> list[BmcInfo]:
    root = bmc_root(state_dir, site_name)
    return [BmcInfo.from_file(path) for path in sorted(root.glob(f"*/{RECORD}"))]


def boot_device(bmc: BmcInfo) -> str:
    """The next boot device the BMC was given (ipmi_sim itself never reports it as valid)."""
    return chassis_hook.Chassis(None, bmc.state_dir).boot_device()


# --- processes --------------------------------------------------------------------------------

def _process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _is_ipmi_sim(pid: int | None, host_dir: Path) -> bool:
    """True when `pid` is a live ipmi_sim started for this BMC (not a recycled pid)."""
    if pid is None or _process_name(pid) != "ipmi_sim":
        return False
    try:
        return Path(f"/proc/{pid}/cwd").resolve() == host_dir.resolve()
    except OSError:
        return False


def _udp_hex(address: IPv4Address, port: int) -> str:
    """How /proc/net/udp writes a local address: the 32-bit word in host order, then the port."""
    word = int.from_bytes(socket.inet_aton(str(address)), sys.byteorder)
    return f"{word:08X}:{port:04X}"


def _is_listening(pid: int, address: IPv4Address) -> bool:
    """Whether the process's network namespace has a UDP socket bound to address:623."""
    try:
        table = Path(f"/proc/{pid}/net/udp").read_text()
    except OSError:
        return False
    wanted = _udp_hex(address, IPMI_PORT)
    return any(line.split()[1] == wanted for line in table.splitlines()[1:] if line.strip())


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reap(pid: int) -> None:
    """Collect the exit status if the process happens to be our child."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _stop_process(pid: int | None, host_dir: Path) -> None:
    if not _is_ipmi_sim(pid, host_dir):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _is_ipmi_sim(pid, host_dir) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.02)
    if _is_ipmi_sim(pid, host_dir):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _environment() -> dict[str, str]:
    """ipmi_sim's environment, inherited by the hook: its profile in rackform.process_environment
    (where rackform.lab.nodes finds a lab: RACKFORM_LAB_STATE_DIR, RACKFORM_LAB_DIR), rackform's
    package on PYTHONPATH."""
    return tool_environment("ipmi_sim", {"PYTHONPATH": str(PACKAGE_PARENT), "LANG": "C.UTF-8"})


def _launch(host_dir: Path, netns_name: str, root_netns_fd: int) -> None:
    """Start ipmi_sim detached inside the BMC's namespace; its pid lands in ipmi_sim.pid.

    `setsid -f` makes it nobody's child (no zombie in a long-lived caller); the shell
    writes its pid and becomes nsenter, which enters the namespace and becomes ipmi_sim.
    nsenter --net leaves the mount namespace alone (unlike `ip netns exec`), so hosts
    the hook powers on mount their disks where everyone sees them.
    """
    with open(host_dir / LOG, "ab") as log:
        run_argv = ["setsid", "-f", "sh", "-c", 'echo $$ > "$0" && exec "$@"', str(host_dir / PID_FILE),
                    "nsenter", f"--net={netns.NETNS_DIR / netns_name}",
                    "ipmi_sim", "-c", str(host_dir / LAN_CONF), "-f", str(host_dir / EMULATOR_COMMANDS),
                    "-s", str(host_dir / SIM_STATE), "-n"]
        subprocess.run(run_argv, cwd=host_dir, env=_environment(), stdin=subprocess.DEVNULL,
                       stdout=log, stderr=log, pass_fds=(root_netns_fd,), check=True)


def _read_pid(host_dir: Path) -> int | None:
    try:
        return int((host_dir / PID_FILE).read_text())
    except (OSError, ValueError):
        return None


# --- network ----------------------------------------------------------------------------------

def _controller_address(site: Site) -> IPv4Interface:
    """The bridge's address on the OOB network: its gateway, else its first address."""
    oob = site.network_for("oob")
    if oob is None:
        raise LabError(f"site {site.name} has no network with purpose oob: its BMCs have nowhere to live")
    address = oob.gateway or next(oob.prefix.hosts())
    return IPv4Interface(f"{address}/{oob.prefix.prefixlen}")


def _ensure_bridge(site: Site, root: Path) -> str:
    """The OOB bridge with the controller's address, remembering what we added (for stop)."""
    name = oob_bridge_name(site.name)
    record_path = root / BRIDGE_RECORD
    record = json.loads(record_path.read_text()) if record_path.exists() else {"name": name}
    controller = _controller_address(site)
    if netns.add_bridge(name, OOB_MTU, _derived_mac(f"{site.name}/bridge/oob")):
        record["created"] = True
    if netns.add_address(name, controller):
        record["address"] = str(controller)
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True))
    return name


def _remove_bridge(root: Path) -> None:
    """Undo `_ensure_bridge`: delete a bridge we made once no port is left, else our address."""
    record_path = root / BRIDGE_RECORD
    if not record_path.exists():
        return
    record = json.loads(record_path.read_text())
    name = record["name"]
    ports = Path(f"/sys/class/net/{name}/brif")
    if record.get("created") and ports.is_dir() and not any(ports.iterdir()):
        netns.delete_link(name)
    elif record.get("address") and netns.link(name) is not None:
        run(["ip", "addr", "del", record["address"], "dev", name], check=False)
    record_path.unlink()


def _ensure_bmc_network(site_name: str, host: Host, bridge: str, prefix_length: int) -> None:
    namespace = bmc_netns_name(site_name, host.name)
    veth = bmc_veth_name(site_name, host.name)
    netns.add_netns(namespace)
    # The BMC's port has the inventory's MAC: a rebuilt BMC is reachable at once (no stale ARP).
    netns.add_veth(BMC_IFNAME, namespace, host.bmc_mac or _derived_mac(f"{site_name}/{host.name}/bmc0"),
                   OOB_MTU, veth, None, _derived_mac(f"{site_name}/{host.name}/bmc-uplink"), OOB_MTU)
    netns.set_master(veth, bridge)
    netns.add_address(BMC_IFNAME, IPv4Interface(f"{host.bmc_address}/{prefix_length}"), namespace)


def _derived_mac(seed: str) -> str:
    """A stable, locally administered MAC: rackform.lab.lab.derived_mac's formula, so the
    OOB bridge gets the same MAC whichever of the two creates it."""
    digest = hashlib.sha1(seed.encode()).hexdigest()
    return "0e:" + ":".join(digest[i:i + 2] for i in range(0, 10, 2))


def _remove_bmc_network(bmc_netns: str, veth: str) -> bool:
    """Delete the veth pair (from its root end), then the namespace; True when anything was there.

    The root end goes first: a namespace outlives `ip netns del` while a process in it is
    still exiting, and its veth pair with it, so the other order races.
    """
    found = netns.link(veth) is not None
    if found:
        run(["ip", "link", "del", veth], check=False)  # gone already if the namespace just went
    return netns.delete_netns(bmc_netns) or found


# --- lifecycle --------------------------------------------------------------------------------

def _require_tools() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab's BMCs need root (network namespaces)")
    missing = [tool for tool in ("ipmi_sim", "nsenter", "setsid", "ip") if shutil.which(tool) is None]
    if missing:
        raise LabError(f"the lab's BMCs need {', '.join(missing)} (apt: openipmi util-linux iproute2)")


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # whatever the umask or an earlier run left
    return path


def _write_private(path: Path, text: str) -> None:
    """Write a file only root can read, never readable by others even for a moment."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    path.chmod(0o600)


def _running_bmc(host_dir: Path, driver: str, address: IPv4Address) -> BmcInfo | None:
    """The BMC already running for this host, as asked for, or None."""
    record_path = host_dir / RECORD
    if not record_path.exists():
        return None
    bmc = BmcInfo.from_file(record_path)
    alive = _is_ipmi_sim(bmc.pid, host_dir) and _is_listening(bmc.pid, bmc.address)
    return bmc if alive and bmc.driver == driver and bmc.address == address else None


def _prepare(site: Site, host: Host, root: Path, driver: str, bridge: str, root_netns_fd: int) -> Path:
    """Write the BMC's files and plumb its network, after clearing whatever a dead one left."""
    host_dir = root / host.name
    if (host_dir / RECORD).exists():
        _stop_one(BmcInfo.from_file(host_dir / RECORD), power_off_test_host=False)  # a dead BMC
    _remove_bmc_network(bmc_netns_name(site.name, host.name), bmc_veth_name(site.name, host.name))
    _private_dir(host_dir)
    _private_dir(host_dir / SIM_STATE)
    (host_dir / PID_FILE).unlink(missing_ok=True)
    command = chassis_control_command(site.name, host.name, driver, host_dir, root_netns_fd)
    _write_private(host_dir / LAN_CONF, render_lan_conf(site.name, host, command))
    _write_private(host_dir / EMULATOR_COMMANDS, render_emulator_commands(site.name, host))
    prefix_length = site.network_for("oob").prefix.prefixlen
    _ensure_bmc_network(site.name, host, bridge, prefix_length)
    return host_dir


def _ipmi_sims_by_namespace() -> dict[int, Path]:
    """Every running ipmi_sim's working directory (its BMC's state), by network namespace inode."""
    found = {}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == "ipmi_sim":
                found[os.stat(comm.parent / "ns" / "net").st_ino] = (comm.parent / "cwd").resolve()
    return found


def _foreign_bmcs(site_name: str, hosts: list[Host], root: Path) -> dict[str, Path]:
    """Hosts whose BMC namespace serves an ipmi_sim of another state directory, with that directory.

    Namespace and link names depend on the site and host only, so two state directories
    must never run the same site's BMCs: the second would take over the first's network.
    """
    running = _ipmi_sims_by_namespace()
    foreign = {}
    for host in hosts:
        with contextlib.suppress(OSError):
            inode = (netns.NETNS_DIR / bmc_netns_name(site_name, host.name)).stat().st_ino
            owner = running.get(inode)
            if owner is not None and owner != (root / host.name).resolve():
                foreign[host.name] = owner
    return foreign


def _wait_until_listening(site: Site, hosts: list[Host], root: Path, driver: str) -> list[BmcInfo]:
    pending = {host.name: host for host in hosts}
    started: dict[str, BmcInfo] = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    while pending:
        for name, host in list(pending.items()):
            host_dir = root / name
            pid = _read_pid(host_dir)
            if pid is not None and _is_listening(pid, host.bmc_address) and _is_ipmi_sim(pid, host_dir):
                started[name] = _record(site.name, host, driver, pid, host_dir)
                del pending[name]
            elif pid is not None and _process_name(pid) is None:
                raise LabError(f"{name}: ipmi_sim exited at start; see {host_dir / LOG} and check "
                               f"{host_dir / EMULATOR_COMMANDS} (ipmi_sim stops at its first bad line)")
        if pending and time.monotonic() > deadline:
            raise LabError(f"BMCs of {', '.join(sorted(pending))} did not bind UDP {IPMI_PORT} within "
                           f"{START_TIMEOUT_S:.0f} s (an error in the emulator file stops ipmi_sim "
                           f"before mc_enable); see {root}/<host>/{LOG}")
        if pending:
            time.sleep(0.02)
    return [started[host.name] for host in hosts]


def _record(site_name: str, host: Host, driver: str, pid: int, host_dir: Path) -> BmcInfo:
    bmc = BmcInfo(site=site_name, host=host.name, address=host.bmc_address,
                  netns=bmc_netns_name(site_name, host.name), veth=bmc_veth_name(site_name, host.name),
                  driver=driver, pid=pid, state_dir=host_dir)
    (host_dir / RECORD).write_text(bmc.to_json())
    return bmc


def start_bmcs(site: Site, state_dir: Path | str, driver: str = "nspawn") -> list[BmcInfo]:
    """Start a BMC for every host with a `bmc_address` (idempotent) and return them, by host name.

    A BMC already running as asked is kept as it is (its users and settings too); the rest
    start side by side. On failure everything this site's BMCs made is removed again.
    """
    if driver not in DRIVERS:
        raise LabError(f"unknown BMC power driver {driver!r} (drivers: {', '.join(DRIVERS)})")
    _require_tools()
    hosts = sorted((h for h in site.hosts.values() if h.bmc_address is not None), key=lambda h: h.name)
    controller = _controller_address(site)
    clashing = [host.name for host in hosts if host.bmc_address == controller.ip]
    if clashing:
        raise LabError(f"BMC address {controller.ip} of {clashing[0]} is the OOB bridge's own address")
    root = bmc_root(state_dir, site.name)
    foreign = _foreign_bmcs(site.name, hosts, root)
    if foreign:
        host, owner = min(foreign.items())
        raise LabError(f"the BMC of {host} (site {site.name}) already runs from {owner}: "
                       f"stop that site's BMCs there first")
    _private_dir(root).parent.chmod(0o700)
    root_netns_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        bridge = _ensure_bridge(site, root)
        running = {h.name: _running_bmc(root / h.name, driver, h.bmc_address) for h in hosts}
        to_start = [host for host in hosts if running[host.name] is None]
        for host in to_start:
            _launch(_prepare(site, host, root, driver, bridge, root_netns_fd),
                    bmc_netns_name(site.name, host.name), root_netns_fd)
        started = {bmc.host: bmc for bmc in _wait_until_listening(site, to_start, root, driver)}
    except BaseException:
        stop_bmcs(site, state_dir)
        raise
    finally:
        os.close(root_netns_fd)
    return [running[host.name] or started[host.name] for host in hosts]


def _stop_one(bmc: BmcInfo, power_off_test_host: bool) -> None:
    _stop_process(bmc.pid, bmc.state_dir)
    if power_off_test_host and bmc.driver == "process":  # the BMC-only test driver's "host"
        chassis_hook.ProcessDriver(bmc.site, bmc.host, bmc.state_dir).power_off()
    _remove_bmc_network(bmc.netns, bmc.veth)


def stop_bmcs(site: Site | str, state_dir: Path | str) -> bool:
    """Stop the site's BMCs and remove everything they made; False when there was nothing.

    Works from the records on disk, and with a Site also sweeps the names its hosts'
    BMCs would have (after a start that died before writing a record). Hosts on the
    `nspawn` driver keep running: the lab's own `down` stops them.
    """
    site_name = site if isinstance(site, str) else site.name
    root = bmc_root(state_dir, site_name)
    bmcs = recorded_bmcs(state_dir, site_name)
    for bmc in bmcs:
        _stop_one(bmc, power_off_test_host=True)
    for host_dir in (p for p in root.glob("*") if p.is_dir() and not (p / RECORD).exists()):
        _stop_process(_read_pid(host_dir), host_dir)  # launched, never recorded
        chassis_hook.ProcessDriver(site_name, host_dir.name, host_dir).power_off()
    found = bool(bmcs)
    if not isinstance(site, str):  # sweep what a start that died before its records left
        hosts = list(site.hosts.values())
        foreign = _foreign_bmcs(site_name, hosts, root)
        for host in (h for h in hosts if h.name not in foreign):
            found |= _remove_bmc_network(bmc_netns_name(site_name, host.name),
                                         bmc_veth_name(site_name, host.name))
    _remove_bridge(root)
    if root.exists():
        shutil.rmtree(root)
        found = True
    with contextlib.suppress(OSError):
        root.parent.rmdir()  # <state_dir>/bmc, once no site has BMCs
    return found


def bmc_status(site: Site | str, state_dir: Path | str) -> list[BmcStatus]:
    """What each recorded BMC of the site is doing, by host name."""
    site_name = site if isinstance(site, str) else site.name
    statuses = []
    for bmc in recorded_bmcs(state_dir, site_name):
        running = _is_ipmi_sim(bmc.pid, bmc.state_dir)
        statuses.append(BmcStatus(host=bmc.host, address=bmc.address, pid=bmc.pid if running else None,
                                  running=running,
                                  listening=running and _is_listening(bmc.pid, bmc.address),
                                  rss_kib=_rss_kib(bmc.pid) if running else None))
    return statuses
