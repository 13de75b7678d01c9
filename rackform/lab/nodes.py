"""One lab node: its disk (overlayfs), identity, network plumbing and power.

The power API (`power_on`, `power_off`, `is_running`, `reimage`) needs only a site name
and a node name: everything else comes from the state file, so the BMC emulator's
chassis hook can call it from its own short-lived process. Calls on one node are
serialised with a lock file; calls on different nodes run side by side.

A node's disk is an overlayfs: the shared base image below, the node's own upper
layer above. Its identity (hostname, machine-id, SSH host key, the lab's authorized
key, and for a switch the role files that enable FRR) lives in `identity/` and is
copied into every fresh upper layer, so a reimaged node keeps its name and host key.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from rackform.lab import LabError, netns, run
from rackform.lab.state import STATE_DIR, LabState, NodeSpec, load, require
from rackform.process_environment import tool_environment

CGROUP_FS = Path("/sys/fs/cgroup")
NSPAWN_RUN_DIR = Path("/run/systemd/nspawn")
SOFT_OFF_TIMEOUT_S = 30.0
HARD_OFF_TIMEOUT_S = 10.0
START_TIMEOUT_S = 10.0

# Folders of a node that live on the machine's filesystem, not on the node's overlayfs
# disk, bind-mounted into the node (nspawn_command): containerd's overlayfs snapshotter
# cannot put its layers on an overlayfs root ("failed to mount ...: invalid argument"), and
# NFS-Ganesha's VFS FSAL cannot export a folder of one ("Could not get handle ... Operation
# not supported"): the data sets' folders are the storage node's data disk.
# Each is part of the node's disk: kept across power cycles, wiped by reimage and down.
DATA_DIRS = {"containerd": "/var/lib/containerd", "data-sets": "/srv/data-sets"}
NFS_SERVER_ROLES = ("storage",)
"""Host roles whose nodes may serve data sets with NFS-Ganesha (nspawn_command)."""

SWITCH_SYSCTL = """\
# rackform lab: a Cumulus switch routes between its ports.
net.ipv4.ip_forward = 1
net.ipv6.conf.all.forwarding = 1
"""


# --- power API (used by rackform.lab.bmc) -------------------------------------------

def power_on(site_name: str, node: str, state_dir: Path = STATE_DIR) -> bool:
    """Boot the node; returns False when it was already running."""
    state = require(site_name, state_dir)
    spec = state.node(node)
    with _node_lock(state, spec, state_dir):
        return start(state, spec)


def power_off(site_name: str, node: str, soft: bool = False, state_dir: Path = STATE_DIR) -> bool:
    """Stop the node: soft is a clean `poweroff` (hard after 30 s), hard pulls the plug.

    Returns False when it was already off.
    """
    state = require(site_name, state_dir)
    spec = state.node(node)
    with _node_lock(state, spec, state_dir):
        return stop(state, spec, soft)


def is_running(site_name: str, node: str, state_dir: Path = STATE_DIR) -> bool:
    """Whether the node is powered; a lab that is not up has every node off."""
    state = load(site_name, state_dir)
    return state is not None and bool(cgroup_pids(state, state.node(node)))


def reimage(site_name: str, node: str, state_dir: Path = STATE_DIR) -> None:
    """Give the node a fresh disk (a new upper layer from the base image) keeping its identity.

    A running node is stopped hard, reimaged and booted again; a node that was off stays off.
    """
    state = require(site_name, state_dir)
    spec = state.node(node)
    with _node_lock(state, spec, state_dir):
        was_running = stop(state, spec, soft=False)
        unmount_disk(spec)
        remove_disk(Path(spec.node_dir))
        if was_running:
            start(state, spec)


# --- disk ------------------------------------------------------------------------------

def ensure_identity(state: LabState, spec: NodeSpec, authorized_key: str) -> bool:
    """Create the node's identity files once; later calls keep them (and its host key)."""
    identity = spec.identity_dir
    marker = identity / "etc/machine-id"
    if marker.exists():
        return False
    staging = identity.with_name("identity.new")
    shutil.rmtree(staging, ignore_errors=True)
    _write(staging / "etc/hostname", f"{spec.name}\n")
    _write(staging / "etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{spec.name}\n"
                                  "::1\tlocalhost ip6-localhost ip6-loopback\n")
    _write(staging / "etc/machine-id", f"{uuid.uuid4().hex}\n")
    (staging / "root").mkdir(mode=0o700)
    _write(staging / "root/.ssh/authorized_keys", authorized_key.strip() + "\n", mode=0o600)
    (staging / "root/.ssh").chmod(0o700)
    (staging / "etc/ssh").mkdir(parents=True, exist_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{spec.name}",
         "-f", str(staging / "etc/ssh/ssh_host_ed25519_key")])
    if spec.os == "cumulus":
        _add_switch_role(Path(state.base_dir), staging)
    staging.rename(identity)
    return True


def host_public_key(spec: NodeSpec) -> str:
    """`ssh-ed25519 AAAA...`: the node's host key, for the lab's known_hosts."""
    return " ".join((spec.identity_dir / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2])


def _add_switch_role(base: Path, identity: Path) -> None:
    """Files that make a Debian node a Cumulus-like switch: FRR with bgpd, forwarding on."""
    daemons = (base / "etc/frr/daemons").read_text().replace("bgpd=no", "bgpd=yes")
    _write(identity / "etc/frr/daemons", daemons)
    shutil.copystat(base / "etc/frr/daemons", identity / "etc/frr/daemons")
    shutil.copystat(base / "etc/frr", identity / "etc/frr")
    stat = (base / "etc/frr").stat()
    os.chown(identity / "etc/frr", stat.st_uid, stat.st_gid)
    os.chown(identity / "etc/frr/daemons", stat.st_uid, stat.st_gid)
    _write(identity / "etc/sysctl.d/90-rackform-switch.conf", SWITCH_SYSCTL)
    wants = identity / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "frr.service").symlink_to("/lib/systemd/system/frr.service")


def mount_disk(state: LabState, spec: NodeSpec) -> bool:
    """Mount the node's overlayfs, seeding a fresh upper layer from its identity."""
    if os.path.ismount(spec.merged_dir):
        return False
    if not spec.upper_dir.exists():
        shutil.copytree(spec.identity_dir, spec.upper_dir, symlinks=True)
    for folder in (spec.work_dir, spec.merged_dir):
        folder.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={state.base_dir},upperdir={spec.upper_dir},workdir={spec.work_dir}",
         str(spec.merged_dir)])
    return True


def unmount_disk(spec: NodeSpec) -> bool:
    if not os.path.ismount(spec.merged_dir):
        return False
    run(["umount", str(spec.merged_dir)])
    return True


def remove_disk(node_dir: Path) -> None:
    """Delete a node's upper layer (its disk contents); its identity stays."""
    for folder in (node_dir / "upper", node_dir / "work", node_dir / "merged", *(node_dir / d for d in DATA_DIRS)):
        if folder.exists():
            run(["rm", "-rf", "--one-file-system", str(folder)])


# --- network ---------------------------------------------------------------------------

def ensure_network(spec: NodeSpec, bridge: str, mtu: int) -> bool:
    """The node's namespace and its management port on the bridge, address and default route."""
    changed = netns.add_netns(spec.netns)
    changed |= netns.add_veth(spec.mgmt_ifname, spec.netns, spec.mgmt_mac, mtu,
                              spec.mgmt_root_ifname, None, _root_side_mac(spec.mgmt_mac), mtu)
    changed |= netns.set_master(spec.mgmt_root_ifname, bridge)
    if spec.mgmt_address:
        changed |= netns.add_address(spec.mgmt_ifname, IPv4Interface(spec.mgmt_address), spec.netns)
    if spec.gateway:
        changed |= netns.set_default_route(IPv4Address(spec.gateway), spec.netns)
    return changed


def _root_side_mac(mac: str) -> str:
    """The bridge-side end of a management veth: the node's MAC with the first octet changed."""
    return "06" + mac[2:]


# --- processes and cgroups -------------------------------------------------------------

def site_cgroup_dirs(site_name: str) -> list[Path]:
    """The site's cgroup in every hierarchy: unified first, then name=systemd, then each
    cgroup v1 controller hierarchy (memory, cpu, pids ...) of a v1 (hybrid) machine.

    A node has its own cgroup in the controller hierarchies too, not only in the two systemd
    needs: nspawn gives the node a cgroup namespace rooted at the cgroups it starts in, and
    the node's kubelet and runc mount the controller hierarchies afresh there (the lab node
    setup, rackform.lab.kubelet_host). Left in the caller's cgroup, every node would see one
    shared tree (the machine's root for cpu), and two kubelets would both own /kubepods.
    """
    relative = Path("rackform") / site_name
    if (CGROUP_FS / "cgroup.controllers").exists():  # a pure cgroup v2 machine
        return [CGROUP_FS / relative]
    systemd = [CGROUP_FS / h / relative for h in ("unified", "systemd") if (CGROUP_FS / h).is_dir()]
    return systemd + [hierarchy / relative for hierarchy in controller_hierarchies()]


def controller_hierarchies(mounts: Path = Path("/proc/self/mounts")) -> list[Path]:
    """Where this machine mounts its cgroup v1 controller hierarchies (named ones left out)."""
    found = []
    for line in mounts.read_text().splitlines():
        _, target, fstype, options, *_ = line.split()
        if fstype == "cgroup" and "name=" not in options and Path(target).parent == CGROUP_FS:
            found.append(Path(target))
    return sorted(set(found))


def _make_cgroup(folder: Path) -> None:
    """mkdir -p in a cgroup hierarchy. In a v1 cpuset hierarchy each level gets its parent's
    CPUs and memory nodes where it has none (v1 leaves a new cpuset empty, and a process
    cannot join a cpuset without CPUs)."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # a pure cgroup v2 machine: no v1 cpuset
        folder.mkdir(parents=True, exist_ok=True)
        return
    level = CGROUP_FS / folder.relative_to(CGROUP_FS).parts[0]
    for part in folder.relative_to(level).parts:
        level = level / part
        level.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            own = level / name
            if own.exists() and not own.read_text().strip():
                own.write_text((level.parent / name).read_text())


def cgroup_dirs(state: LabState, spec: NodeSpec) -> list[Path]:
    return [folder / spec.name for folder in site_cgroup_dirs(state.site)]


def _pids_under(folder: Path) -> list[int]:
    """Processes in a cgroup tree; os.walk skips folders that vanish as the nodes stop."""
    pids: list[int] = []
    for current, _, files in os.walk(folder):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids += [int(pid) for pid in Path(current, "cgroup.procs").read_text().split()]
    return pids


def cgroup_pids(state: LabState, spec: NodeSpec) -> list[int]:
    """Every process in the node's cgroup tree (its nspawn and all of the container)."""
    return _pids_under(cgroup_dirs(state, spec)[0])


def site_pids(site_name: str) -> list[int]:
    return _pids_under(site_cgroup_dirs(site_name)[0])


def kill_site(site_name: str) -> None:
    """SIGKILL every process of every node of the site and wait for them to go."""
    folder = site_cgroup_dirs(site_name)[0]
    _kill_tree(folder)
    _wait_for(lambda: not site_pids(site_name), HARD_OFF_TIMEOUT_S, f"lab {site_name}: processes survived SIGKILL")


def _kill_tree(folder: Path) -> None:
    kill_file = folder / "cgroup.kill"
    if kill_file.exists():
        kill_file.write_text("1")
        return
    for pid in _pids_under(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_site_cgroups(site_name: str) -> None:
    """Remove the site's (empty) cgroups bottom-up, and rackform's own when it is empty."""
    for folder in site_cgroup_dirs(site_name):
        for current, _, _ in os.walk(folder, topdown=False):
            os.rmdir(current)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def signal_quietly(pid: int, signum: int = signal.SIGTERM) -> None:
    """Signal a process that may already be gone. SIGTERM to nspawn is a clean poweroff."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def start(state: LabState, spec: NodeSpec) -> bool:
    if cgroup_pids(state, spec):
        return False
    if not netns.netns_exists(spec.netns):
        raise LabError(f"{spec.name}: network namespace {spec.netns} is missing; run `rackform lab up {state.site}`")
    mount_disk(state, spec)
    for name in DATA_DIRS:
        (Path(spec.node_dir) / name).mkdir(mode=0o711, exist_ok=True)
    procs = []
    for folder in cgroup_dirs(state, spec):
        _make_cgroup(folder)
        procs.append(str(folder / "cgroup.procs"))
    if not procs:
        raise LabError(f"no cgroup hierarchy under {CGROUP_FS}")
    # The shell puts itself into the node's cgroups, then becomes systemd-nspawn; setsid -f
    # detaches it so that it never becomes a zombie of a long-lived caller.
    enter_cgroups = " && ".join(f'echo $$ > "{p}"' for p in procs)
    with open(spec.console_log, "ab") as console:
        subprocess.run(["setsid", "-f", "sh", "-c", f'{enter_cgroups} && exec "$@"', "rackform-node",
                        *nspawn_command(spec)], stdin=subprocess.DEVNULL, stdout=console, stderr=console,
                       check=True, env=tool_environment("systemd-nspawn"))
    _wait_for(lambda: _nspawn_pid(state, spec) is not None, START_TIMEOUT_S,
              f"{spec.name}: systemd-nspawn did not start; see {spec.console_log}")
    return True


def nspawn_command(spec: NodeSpec) -> list[str]:
    """How a node boots. Each choice below fixed something seen on this machine:

    --register=no --keep-unit: there is no host systemd to register with (PID 1 is not
      systemd on the lab machines); without them nspawn fails to open the system bus.
    nsenter --net first: nspawn mounts the container's /sys before joining
      --network-namespace-path, so /sys/class/net would list the machine's links, not
      the node's (Ansible facts and ethtool read it). Not `ip netns exec`: that remounts
      /sys without the cgroup mounts nspawn needs.
    --private-network with the path: without it the node lacks CAP_NET_ADMIN and
      /proc/sys/net is read-only (no `ip link set`, no ip_forward on a switch); kernel.*
      and vm.* stay read-only, so a node cannot change the machine's global sysctls.
    --system-call-filter=@keyring: runc gives every container its own session keyring,
      and nspawn's seccomp filter refuses keyctl ("unable to join session keyring: unable
      to create session key: operation not permitted"). (runc's --no-new-keyring would
      need a containerd setting in the roles; the lab node allows the calls instead.)
    --system-call-filter=open_by_handle_at, storage nodes only: NFS-Ganesha's VFS FSAL opens
      every file by its handle, and nspawn's seccomp filter refuses the call ("Operation not
      permitted"; the client reads NFS4ERR_PERM) to containers it does not trust with it: a
      handle opens any file of the filesystem, outside the node's folders too. A lab node is
      no security boundary already (its root holds CAP_SYS_ADMIN); the call is still given
      only to the nodes that serve NFS.
    --bind of each DATA_DIRS folder: /var/lib/containerd and /srv/data-sets on the machine's
      filesystem, since containerd's overlayfs snapshotter and Ganesha's VFS FSAL cannot use
      the node's overlayfs root.
    Not --capability=CAP_SYS_RESOURCE (to let containers lower their oom_score_adj): the
      lab machine's processes lack it in their bounding set, so nspawn cannot pass it on;
      containerd's restrict_oom_score_adj does instead (rackform.lab.kubelet_host).
    What else a kubelet needs in a node is in the base image (rackform.lab.kubelet_host).
    """
    netns_path = str(netns.NETNS_DIR / spec.netns)
    return ["nsenter", f"--net={netns_path}", "systemd-nspawn", "-b", "-q", "-D", str(spec.merged_dir),
            "-M", spec.machine, f"--hostname={spec.name}", "--register=no", "--keep-unit",
            f"--network-namespace-path={netns_path}", "--private-network", "--link-journal=no",
            "--resolv-conf=off", "--timezone=off", "--console=passive", "--system-call-filter=@keyring",
            *(["--system-call-filter=open_by_handle_at"] if spec.role in NFS_SERVER_ROLES else []),
            *(f"--bind={Path(spec.node_dir) / name}:{target}" for name, target in DATA_DIRS.items())]


def stop(state: LabState, spec: NodeSpec, soft: bool) -> bool:
    if not cgroup_pids(state, spec):
        return False
    stopped = lambda: not cgroup_pids(state, spec)  # noqa: E731
    nspawn_pid = _nspawn_pid(state, spec)
    if soft and nspawn_pid is not None:
        signal_quietly(nspawn_pid)
        with contextlib.suppress(LabError):
            _wait_for(stopped, SOFT_OFF_TIMEOUT_S, "")
            return True
    _kill_tree(cgroup_dirs(state, spec)[0])
    _wait_for(stopped, HARD_OFF_TIMEOUT_S, f"{spec.name}: processes survived SIGKILL")
    remove_nspawn_leftovers(spec)
    return True


def remove_nspawn_leftovers(spec: NodeSpec) -> None:
    """What a killed nspawn leaves in /run: its image lock and its propagation folder.

    (A clean poweroff removes both; a hard power off or `down`'s SIGKILL does not.)
    """
    with contextlib.suppress(OSError):
        disk = os.stat(spec.merged_dir)  # nspawn names the lock after the image's inode
        (NSPAWN_RUN_DIR / "locks" / f"inode-{disk.st_dev}:{disk.st_ino}").unlink(missing_ok=True)
    shutil.rmtree(NSPAWN_RUN_DIR / "propagate" / spec.machine, ignore_errors=True)


def _nspawn_pid(state: LabState, spec: NodeSpec) -> int | None:
    return next((pid for pid in cgroup_pids(state, spec) if process_name(pid) == "systemd-nspawn"), None)


def _wait_for(condition, timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise LabError(message)
        time.sleep(0.1)


@contextlib.contextmanager
def _node_lock(state: LabState, spec: NodeSpec, state_dir: Path) -> Iterator[None]:
    path = state_dir / state.site / f"{spec.name}.lock"
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
