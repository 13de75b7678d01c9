"""Bring a whole site up on this machine, report on it, and take it down again.

`up` reads the site model, plans every container, bridge and cable (`plan`), writes the
plan to the state file, then creates what is missing and boots what is off; a second
`up` on a running lab changes nothing and says so. `down` removes everything `up` made
(processes, overlay mounts, namespaces, veths, bridges, cgroups, state) and works after
an `up` that failed halfway: the plan is on disk before anything is created, and the
names follow fixed conventions it can sweep for as well.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from rackform.lab import LabError, base, bmc, netns, nodes, run, state
from rackform.lab.state import BridgeSpec, LabState, LinkSpec, NodeSpec
from rackform.model.loader import load_site
from rackform.model.schema import Network
from rackform.model.site import Site

Progress = Callable[[str], None]
READY_TIMEOUT_S = 180.0
MGMT_MTU = 1500
EMULATED_SWITCH_OS = {"cumulus"}  # nspawn nodes; onyx gets the SSH emulator, unmanaged is a bridge


@dataclass(slots=True)
class NodeStatus:
    name: str
    kind: str
    address: str | None
    running: bool
    ssh: bool = False
    system_state: str | None = None  # systemctl is-system-running: running, degraded, ...
    failed_units: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.running and self.ssh and self.system_state in ("running", "degraded")

    def line(self) -> str:
        power = "running" if self.running else "off"
        reach = "ssh ok" if self.ssh else "no ssh"
        system = f"systemd {self.system_state}" if self.system_state else ""
        failed = f" (failed: {', '.join(self.failed_units)})" if self.failed_units else ""
        return f"{self.name:<12} {self.kind:<6} {self.address or '-':<15} {power:<7} {reach:<6} {system}{failed}".rstrip()


@dataclass(slots=True)
class LabStatus:
    site: str
    nodes: list[NodeStatus]
    changed: bool = False
    not_emulated: dict[str, str] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return bool(self.nodes) and all(node.ready for node in self.nodes)

    def lines(self) -> list[str]:
        if not self.nodes:
            return [f"lab {self.site}: down"]
        ready = sum(node.ready for node in self.nodes)
        lines = [f"lab {self.site}: {ready}/{len(self.nodes)} nodes ready"]
        lines += [node.line() for node in self.nodes]
        lines += [f"{device:<12} not emulated: {why}" for device, why in self.not_emulated.items()]
        return lines


# --- plan --------------------------------------------------------------------------------

def plan(site: Site, base_dir: Path, lab_dir: Path, root: Path) -> LabState:
    """Every node, cable and bridge of the lab, derived from the site model alone."""
    management = site.network_for("management")
    if management is None:
        raise LabError(f"site {site.name} has no network with purpose management")
    specs: dict[str, NodeSpec] = {}
    not_emulated: dict[str, str] = {}
    for host in site.hosts.values():
        specs[host.name] = _node_spec(site, host.name, "host", "debian", host.role, "mgmt0",
                                      host.management_mac, host.management_address, management, lab_dir)
    for switch in site.switches.values():
        if switch.os in EMULATED_SWITCH_OS:
            specs[switch.name] = _node_spec(site, switch.name, "switch", switch.os, switch.role, "eth0",
                                            switch.management_mac, switch.management_address, management, lab_dir)
        elif switch.os == "onyx":
            not_emulated[switch.name] = "Onyx: CLI emulator (rackform.lab.onyx_emulator) on its management address"
        else:
            not_emulated[switch.name] = f"{switch.os} switch: the lab's bridge plays its part"
    return LabState(
        site=site.name, root=str(root), base_dir=str(base_dir), lab_dir=str(lab_dir),
        bridges=_bridges(site, management), nodes=specs, links=_links(site, specs),
        not_emulated=not_emulated,
    )


def _node_spec(site: Site, name: str, kind: str, os_name: str, role: str, mgmt_ifname: str,
               mac: str | None, address: IPv4Address | None, management: Network, lab_dir: Path) -> NodeSpec:
    if address is None:
        raise LabError(f"{name}: no management_address in the inventory; the lab cannot reach it")
    return NodeSpec(
        name=name, kind=kind, os=os_name, role=role, machine=f"{site.name}-{name}",
        netns=netns_name(site.name, name), node_dir=str(lab_dir / name), mgmt_ifname=mgmt_ifname,
        mgmt_root_ifname=netns.short_ifname(f"{site.name}.{name}", f"{site.name}/{name}"),
        mgmt_mac=mac or derived_mac(site.name, name, mgmt_ifname),
        mgmt_address=f"{address}/{management.prefix.prefixlen}",
        gateway=str(management.gateway) if management.gateway else None,
    )


def _links(site: Site, specs: dict[str, NodeSpec]) -> list[LinkSpec]:
    """One veth pair per cable whose both ends are emulated nodes, with the inventory's MACs."""
    links = []
    for cable in site.cables:
        a, b = cable.a, cable.b
        if a.device in specs and b.device in specs:
            links.append(LinkSpec(a.device, a.port, _port_mac(site, a.device, a.port), _port_mtu(site, a.device),
                                  b.device, b.port, _port_mac(site, b.device, b.port), _port_mtu(site, b.device)))
    return links


def _port_mac(site: Site, device: str, port: str) -> str:
    host = site.hosts.get(device)
    if host is not None and port in host.fabric_macs:
        return host.fabric_macs[port]
    return derived_mac(site.name, device, port)


def _port_mtu(site: Site, device: str) -> int:
    """Hosts at the host MTU (9000), switch ports at the switch MTU (9216), as on real gear."""
    return site.fabric.host.mtu if device in site.hosts else site.fabric.switch.mtu


def _bridges(site: Site, management: Network) -> dict[str, BridgeSpec]:
    controller = management.gateway or next(management.prefix.hosts())
    mgmt_addresses = [f"{controller}/{management.prefix.prefixlen}"]
    # Onyx switches are emulated by an SSH server in the root namespace: their addresses
    # live on the bridge so the emulator can bind there.
    mgmt_addresses += [f"{switch.management_address}/{management.prefix.prefixlen}"
                       for switch in site.switches.values()
                       if switch.os == "onyx" and switch.management_address is not None]
    bridges = {"management": BridgeSpec("management", bridge_name(site.name, "mgmt"), MGMT_MTU, mgmt_addresses)}
    oob = site.network_for("oob")
    if oob is not None:
        # The BMC emulator adds each BMC's address to this bridge.
        oob_addresses = [f"{oob.gateway}/{oob.prefix.prefixlen}"] if oob.gateway else []
        bridges["oob"] = BridgeSpec("oob", bridge_name(site.name, "oob"), MGMT_MTU, oob_addresses)
    return bridges


def netns_name(site_name: str, node: str) -> str:
    # Dots never occur in site or node names, so "rf.SITE." prefixes only that site's nodes.
    return f"rf.{site_name}.{node}"


def bridge_name(site_name: str, purpose: str) -> str:
    # Underscores never occur in node names, so no node's veth can take a bridge's name.
    return netns.short_ifname(f"{site_name}_{purpose}", f"{site_name}_{purpose}")


def derived_mac(site_name: str, device: str, port: str) -> str:
    """A stable, locally administered MAC for a port the inventory gives none."""
    digest = hashlib.sha1(f"{site_name}/{device}/{port}".encode()).hexdigest()
    return "0e:" + ":".join(digest[i:i + 2] for i in range(0, 10, 2))


# --- up ------------------------------------------------------------------------------------

def up(site_name: str, root: Path | str = ".", progress: Progress = print) -> LabStatus:
    """Bring the site's lab up (idempotent) and return its status once every node is ready."""
    require_root()
    started = time.monotonic()
    root = Path(root)
    site = load_site(site_name, root)
    base_dir = base.ensure_base(progress=progress)
    lab_dir = state.LABS_DIR / site.name
    lab_state = _adopt_plan(plan(site, base_dir, lab_dir, root.resolve()))
    _ensure_inotify_instances(len(lab_state.nodes), progress)
    changed = _build_network(lab_state)
    changed |= _start_nodes(lab_state, progress)
    status = _wait_ready(lab_state, progress if changed else lambda line: None)
    bmcs = bmc.start_bmcs(site, state.LABS_DIR)  # idempotent: running BMCs are kept
    if changed:
        progress(f"{len(bmcs)} BMCs (ipmi_sim) on the out-of-band network")
    status.changed = changed
    if not changed:
        progress(f"lab {site.name} was already up: nothing changed")
    elif status.up:
        progress(f"lab {site.name} up in {time.monotonic() - started:.1f} s")
    return status


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_NODE = 16  # systemd and its services in one container hold about 11


def _ensure_inotify_instances(node_count: int, progress: Progress) -> None:
    """Every booted container holds inotify instances of root's shared limit (128 on
    Debian): past about ten nodes they fail to boot with "Too many open files".
    Raise it (never lower it) and say so, since it is a machine-wide setting."""
    needed = 128 + INOTIFY_PER_NODE * node_count
    current = int(INOTIFY_INSTANCES.read_text())
    if current < needed:
        INOTIFY_INSTANCES.write_text(f"{needed}\n")
        progress(f"raised fs.inotify.max_user_instances from {current} to {needed} for {node_count} nodes")


def _adopt_plan(new: LabState) -> LabState:
    """Record the plan before creating anything; refuse to reshape a lab that is up."""
    current = state.load(new.site)
    if current is not None and asdict(current) != asdict(new):
        raise LabError(f"lab {new.site} is up with a different design (or another repo root); "
                       f"run `rackform lab down {new.site}` first")
    Path(new.lab_dir).mkdir(parents=True, exist_ok=True)
    state.save(new)
    return new


def _build_network(lab_state: LabState) -> bool:
    changed = False
    for bridge in lab_state.bridges.values():
        changed |= netns.add_bridge(bridge.name, bridge.mtu, derived_mac(lab_state.site, "bridge", bridge.purpose))
        for address in bridge.addresses:
            changed |= netns.add_address(bridge.name, IPv4Interface(address))
    authorized_key = ensure_lab_key(Path(lab_state.lab_dir)).read_text()
    management_bridge = lab_state.bridges["management"].name
    for spec in lab_state.nodes.values():
        changed |= nodes.ensure_identity(lab_state, spec, authorized_key)
        changed |= nodes.ensure_network(spec, management_bridge, MGMT_MTU)
    for link in lab_state.links:
        a, b = lab_state.nodes[link.a_node], lab_state.nodes[link.b_node]
        changed |= netns.add_veth(link.a_port, a.netns, link.a_mac, link.a_mtu,
                                  link.b_port, b.netns, link.b_mac, link.b_mtu)
    write_ssh_files(lab_state)
    return changed


def _start_nodes(lab_state: LabState, progress: Progress) -> bool:
    started = 0
    for spec in lab_state.nodes.values():
        if nodes.start(lab_state, spec):
            started += 1
            progress(f"started {spec.name} ({spec.kind}, {spec.address})")
    return started > 0


def _wait_ready(lab_state: LabState, progress: Progress) -> LabStatus:
    total = len(lab_state.nodes)
    done: list[str] = []

    def wait_one(spec: NodeSpec) -> NodeStatus:
        node_status = wait_until_ready(lab_state, spec, READY_TIMEOUT_S)
        done.append(spec.name)
        progress(f"{spec.name} reachable, systemd {node_status.system_state} ({len(done)}/{total})")
        return node_status

    with ThreadPoolExecutor(max_workers=max(total, 1)) as pool:
        statuses = list(pool.map(wait_one, lab_state.nodes.values()))
    return LabStatus(lab_state.site, statuses, not_emulated=lab_state.not_emulated)


def wait_until_ready(lab_state: LabState, spec: NodeSpec, timeout_s: float) -> NodeStatus:
    """Wait for SSH, then for systemd to finish booting; raise with the console's tail if it dies."""
    deadline = time.monotonic() + timeout_s
    while not _port_open(spec.address, 22):
        if not nodes.cgroup_pids(lab_state, spec):
            raise LabError(f"{spec.name} stopped while booting; console:\n{_tail(spec.console_log)}")
        if time.monotonic() > deadline:
            raise LabError(f"{spec.name}: no SSH on {spec.address} after {timeout_s:.0f} s; "
                           f"console:\n{_tail(spec.console_log)}")
        time.sleep(0.2)
    remaining = max(deadline - time.monotonic(), 5.0)
    result = ssh(lab_state, spec, "systemctl is-system-running --wait", timeout_s=remaining, check=False)
    return _node_status(lab_state, spec, True, result.stdout.strip() or None)


def _node_status(lab_state: LabState, spec: NodeSpec, reachable: bool, system_state: str | None) -> NodeStatus:
    failed: list[str] = []
    if system_state == "degraded":
        listing = ssh(lab_state, spec, "systemctl --failed --no-legend --plain", check=False).stdout
        failed = [line.split()[0] for line in listing.splitlines() if line.strip()]
    return NodeStatus(spec.name, spec.kind, spec.address, running=True, ssh=reachable,
                      system_state=system_state, failed_units=failed)


def _port_open(address: str | None, port: int) -> bool:
    if address is None:
        return False
    try:
        with socket.create_connection((address, port), timeout=1.0):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no console log)"


# --- ssh -----------------------------------------------------------------------------------

def ensure_lab_key(lab_dir: Path) -> Path:
    """The lab's own SSH key pair (lab use only, never in the repo); returns the public key."""
    private = lab_dir / "ssh" / "id_ed25519"
    if not private.exists():
        private.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rackform-lab-{lab_dir.name}", "-f", str(private)])
    return private.with_suffix(".pub")


def write_ssh_files(lab_state: LabState) -> None:
    """known_hosts with every node's host key, and an ssh_config naming every node."""
    ssh_dir = Path(lab_state.lab_dir) / "ssh"
    known, config = [], []
    for spec in lab_state.nodes.values():
        known.append(f"{spec.address},{spec.name} {nodes.host_public_key(spec)}")
        config.append(f"Host {spec.name} {spec.address}\n  HostName {spec.address}\n  User root\n"
                      f"  IdentityFile {lab_state.ssh_key}\n  IdentitiesOnly yes\n"
                      f"  UserKnownHostsFile {lab_state.known_hosts}\n  StrictHostKeyChecking yes\n")
    (ssh_dir / "known_hosts").write_text("\n".join(known) + "\n")
    (ssh_dir / "config").write_text("\n".join(config))


def ssh(lab_state: LabState, spec: NodeSpec, command: str, timeout_s: float = 30.0, check: bool = True):
    """Run a command on a node over its management address, as root with the lab key."""
    return run(["ssh", "-i", str(lab_state.ssh_key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={lab_state.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", f"root@{spec.address}", command],
               timeout_s=timeout_s, check=check)


# --- status --------------------------------------------------------------------------------

def status(site_name: str) -> LabStatus:
    """Per node: powered, answering SSH, systemd's state; a lab that is not up has no nodes."""
    lab_state = state.load(site_name)
    if lab_state is None:
        return LabStatus(site_name, [])

    def probe(spec: NodeSpec) -> NodeStatus:
        if not nodes.cgroup_pids(lab_state, spec):
            return NodeStatus(spec.name, spec.kind, spec.address, running=False)
        if not _port_open(spec.address, 22):
            return NodeStatus(spec.name, spec.kind, spec.address, running=True)
        result = ssh(lab_state, spec, "systemctl is-system-running", timeout_s=10, check=False)
        return _node_status(lab_state, spec, result.returncode != 255, result.stdout.strip() or None)

    with ThreadPoolExecutor(max_workers=max(len(lab_state.nodes), 1)) as pool:
        statuses = list(pool.map(probe, lab_state.nodes.values()))
    return LabStatus(site_name, statuses, not_emulated=lab_state.not_emulated)


# --- down ----------------------------------------------------------------------------------

def down(site_name: str, progress: Progress = print) -> bool:
    """Remove everything the site's lab made; returns False when there was nothing to remove."""
    require_root()
    started = time.monotonic()
    lab_state = state.load(site_name)
    lab_dir = Path(lab_state.lab_dir) if lab_state else state.LABS_DIR / site_name
    found = _stop_all(site_name, progress)
    for spec in lab_state.nodes.values() if lab_state else ():
        nodes.remove_nspawn_leftovers(spec)
    found |= _unmount_all(lab_dir)
    found |= bmc.stop_bmcs(site_name, state.LABS_DIR)  # before the OOB bridge goes
    found |= _delete_network(site_name, lab_state)
    for node_dir in (p for p in lab_dir.glob("*") if (p / "identity").is_dir()):
        nodes.remove_disk(node_dir)
    nodes.remove_site_cgroups(site_name)
    state.remove(site_name)
    progress(f"lab {site_name} down in {time.monotonic() - started:.1f} s" if found
             else f"lab {site_name} was not up: nothing to remove")
    return found


def _stop_all(site_name: str, progress: Progress) -> bool:
    """Ask every node to power off at once, wait, then kill whatever is left."""
    pids = nodes.site_pids(site_name)
    if not pids:
        return False
    nspawns = [pid for pid in pids if nodes.process_name(pid) == "systemd-nspawn"]
    progress(f"stopping {len(nspawns)} nodes")
    for pid in nspawns:
        nodes.signal_quietly(pid)
    deadline = time.monotonic() + nodes.SOFT_OFF_TIMEOUT_S
    while nodes.site_pids(site_name) and time.monotonic() < deadline:
        time.sleep(0.1)
    nodes.kill_site(site_name)
    return True


def _unmount_all(lab_dir: Path) -> bool:
    prefix = str(lab_dir.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    ours = sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True)
    for mount_point in ours:
        run(["umount", mount_point])
    return bool(ours)


def _delete_network(site_name: str, lab_state: LabState | None) -> bool:
    namespaces = set(netns.list_netns(f"rf.{site_name}."))
    links = {bridge_name(site_name, purpose) for purpose in ("mgmt", "oob")}
    if lab_state is not None:
        namespaces |= {spec.netns for spec in lab_state.nodes.values()}
        links |= {spec.mgmt_root_ifname for spec in lab_state.nodes.values()}
        links |= {bridge.name for bridge in lab_state.bridges.values()}
    found = False
    for name in sorted(namespaces):  # the veths inside, and their peers, go with it
        found |= netns.delete_netns(name)
    for name in sorted(links):
        found |= netns.delete_link(name)
    return found


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, mounts, cgroups)")
