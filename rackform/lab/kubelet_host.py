"""What a lab node needs so that a kubelet, containerd and runc run in it: lab only.

A lab node is a systemd-nspawn container on a cgroup v1 (hybrid) machine. A real server
needs none of this, so none of it is in the roles. The base image (rackform.lab.base)
carries it: the unit `rackform-lab-kubelet-host.service`, run at every boot of every node
before containerd and the kubelet, and a drop-in for containerd.service. The node's nspawn
options (rackform.lab.nodes.nspawn_command) add what only the container manager can give:
the keyring system calls and a real filesystem for /var/lib/containerd.

Each step fixes something seen on this machine (docs/lab.md, "Running a kubelet in a node"):

1. Writable cgroup controllers. nspawn mounts each v1 controller hierarchy (memory, cpu,
   cpuacct, cpuset, pids, blkio, devices, freezer) read-only in the node; runc and the
   kubelet must create cgroups there. `mount -o remount,rw` fails ("mount point is busy"),
   and a fresh mount on top is refused ("cgroup already mounted": the kernel will not stack
   a filesystem on its own root), but unmounting the read-only one and mounting the same
   controllers afresh works: inside the node's cgroup namespace the new mount is rooted at
   the node's own cgroup (`rackform/<site>/<node>` on the machine, one per node in every
   hierarchy, made by rackform.lab.nodes), so each node's kubelet owns its own tree and
   sees no other node's. name=systemd and the unified hierarchy are writable already. The
   unit runs before sysinit.target, so the node's systemd, too, finds the controllers
   writable: both the cgroupfs and the systemd cgroup driver work.
2. /dev/kmsg. nspawn gives a node none, and the kubelet refuses to start without it (its
   OOM watcher opens it). As in kind's node image, it is a link to /dev/console: the
   machine's real /dev/kmsg would show each node every kernel message of the machine
   (every other node's OOM kills too), and reading it needs CAP_SYSLOG, which nspawn drops.
3. The kernel settings the kubelet wants (KERNEL_TUNABLES, its setupKernelTunables):
   kernel.* and vm.* are machine-wide and read-only in a node, and a lab node never changes
   the machine's. Where the machine's value differs, a file holding the wanted value is
   bind-mounted read-only over the /proc/sys entry in the node's own mount namespace: the
   kubelet reads the value it wants and writes nothing; the machine keeps its own.
4. `/` shared (rshared), for the kubelet's mount propagation (systemd does it already in a
   node; the step only makes sure).
5. containerd with `restrict_oom_score_adj = true` (CONTAINERD_DROP_IN): the kubelet asks
   for oom_score_adj -998 for every pod sandbox and -997 for critical pods; lowering it
   needs CAP_SYS_RESOURCE, which no process on this machine has (it is outside the
   bounding set of the tool that runs the lab), so runc fails every sandbox ("failed to
   update /proc/self/oom_score_adj: Permission denied"). The drop-in starts containerd
   with a copy of /etc/containerd/config.toml (the role's file, left as it is) that adds
   that one setting; containerd then never asks for less than its own score.

Every step runs again harmlessly (a second run changes nothing) and touches nothing outside
the node: no sysctl of the machine, no cgroup above the node's own.
"""

from __future__ import annotations

UNIT_NAME = "rackform-lab-kubelet-host.service"
SCRIPT_PATH = "/usr/lib/rackform-lab/kubelet-host"
CONTAINERD_DROP_IN_PATH = "/etc/systemd/system/containerd.service.d/rackform-lab.conf"
RUN_DIR = "/run/rackform-lab"
CONTAINERD_CONFIG = f"{RUN_DIR}/containerd.toml"

# What the kubelet's setupKernelTunables wants (pkg/kubelet/cm/container_manager_linux.go,
# k8s.io/component-helpers/node/util/sysctl): it writes any that differ, and does not
# start when that write fails.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": 1,
    "vm/panic_on_oom": 0,
    "kernel/panic": 10,
    "kernel/panic_on_oops": 1,
    "kernel/keys/root_maxkeys": 1000000,
    "kernel/keys/root_maxbytes": 25000000,
}

_TUNABLE_LINES = "\n".join(f"{path} {value}" for path, value in KERNEL_TUNABLES.items())
_CRI = '[plugins."io.containerd.grpc.v1.cri"]'

SCRIPT = f"""\
#!/bin/sh
# rackform lab only (rackform/lab/kubelet_host.py): lets a kubelet, containerd and runc run
# in this systemd-nspawn lab node. Never on a real site.
#   kubelet-host                    at boot: cgroups, /dev/kmsg, kernel settings, propagation
#   kubelet-host containerd-config  before containerd starts: {CONTAINERD_CONFIG}
set -eu

cgroups() {{
  # Each read-only cgroup v1 controller hierarchy, mounted afresh (writable) at the same
  # place: rooted at this node's own cgroup, in the cgroup namespace nspawn made.
  awk '{{ for (i = 7; $i != "-"; i++) ; if ($(i + 1) == "cgroup") print $5, substr($6, 1, 2), $(i + 3) }}' \\
      /proc/self/mountinfo | while read -r target mode options; do
    case "$target" in /sys/fs/cgroup/*) ;; *) continue ;; esac
    case ",$options," in *,name=*) continue ;; esac
    [ "$mode" = ro ] || continue
    controllers=""
    for option in $(echo "$options" | tr , ' '); do
      if awk -v c="$option" '$1 == c {{ found = 1 }} END {{ exit !found }}' /proc/cgroups; then
        controllers="${{controllers:+$controllers,}}$option"
      fi
    done
    [ -n "$controllers" ] || continue
    umount "$target"
    mount -t cgroup -o "nosuid,nodev,noexec,$controllers" cgroup "$target"
    echo "cgroup $target ($controllers): writable"
  done
}}

kmsg() {{
  # The kubelet's OOM watcher opens /dev/kmsg; as in kind, a link to the console.
  if [ ! -e /dev/kmsg ] && [ ! -L /dev/kmsg ]; then
    ln -s /dev/console /dev/kmsg
    echo "/dev/kmsg -> /dev/console"
  fi
}}

kernel_settings() {{
  # The values the kubelet wants, seen in this node only: the machine keeps its own.
  mkdir -p {RUN_DIR}/sysctl
  while read -r path wanted; do
    entry="/proc/sys/$path"
    name=$(echo "$path" | tr / .)
    [ -e "$entry" ] || continue
    current=$(cat "$entry")
    [ "$current" = "$wanted" ] && continue
    echo "$wanted" > "{RUN_DIR}/sysctl/$name"
    mount --bind "{RUN_DIR}/sysctl/$name" "$entry"
    mount -o remount,bind,ro "$entry"
    echo "$name = $wanted in this node (the machine keeps $current)"
  done <<'TUNABLES'
{_TUNABLE_LINES}
TUNABLES
}}

containerd_config() {{
  # The role's configuration plus restrict_oom_score_adj (no process here may lower an
  # oom_score_adj); /etc/containerd/config.toml itself is left as the role wrote it.
  mkdir -p {RUN_DIR}
  {{ if [ -f /etc/containerd/config.toml ]; then
      grep -v '^[[:space:]]*restrict_oom_score_adj[[:space:]]*=' /etc/containerd/config.toml
    else
      echo 'version = 2'
    fi; }} | awk -v table='{_CRI}' '
    {{ print; line = $0; gsub(/^[[:space:]]+|[[:space:]]+$/, "", line) }}
    !done && line == table {{ print "  restrict_oom_score_adj = true"; done = 1 }}
    END {{ if (!done) {{ print ""; print table; print "  restrict_oom_score_adj = true" }} }}' \\
    > {CONTAINERD_CONFIG}.new
  mv {CONTAINERD_CONFIG}.new {CONTAINERD_CONFIG}
}}

case "${{1:-boot}}" in
  boot)
    cgroups
    kmsg
    kernel_settings
    mount --make-rshared /
    ;;
  containerd-config)
    containerd_config
    ;;
  *)
    echo "usage: $0 [boot|containerd-config]" >&2
    exit 2
    ;;
esac
"""

UNIT = f"""\
[Unit]
Description=Let a kubelet and containers run in this lab node (rackform lab only)
DefaultDependencies=no
ConditionVirtualization=container
After=local-fs.target
Before=sysinit.target containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={SCRIPT_PATH} boot

[Install]
WantedBy=sysinit.target
"""

CONTAINERD_DROP_IN = f"""\
# rackform lab only (rackform/lab/kubelet_host.py): containerd reads the role's
# /etc/containerd/config.toml plus restrict_oom_score_adj = true, which a lab node needs
# (no process on the lab machine may lower an oom_score_adj).
[Unit]
After={UNIT_NAME}
Requires={UNIT_NAME}

[Service]
ExecStartPre={SCRIPT_PATH} containerd-config
ExecStart=
ExecStart=/usr/bin/containerd --config {CONTAINERD_CONFIG}
"""


def files() -> dict[str, tuple[str, int]]:
    """What the base image carries: path in the image -> (text, mode)."""
    return {
        SCRIPT_PATH: (SCRIPT, 0o755),
        f"/etc/systemd/system/{UNIT_NAME}": (UNIT, 0o644),
        CONTAINERD_DROP_IN_PATH: (CONTAINERD_DROP_IN, 0o644),
    }
