"""The lab's one Debian bookworm root filesystem, built once with debootstrap and shared.

Every lab node mounts it read-only as an overlayfs lower layer, so it must hold no
identity: no SSH host keys, an empty /etc/machine-id, no hostname. It is built into a
temporary folder and renamed into place, under a lock, so a build that is interrupted
or runs twice at once never leaves a half image behind.

The Debian mirror is read from this machine's apt sources at run time (never written
into the repository); RACKFORM_DEBIAN_MIRROR overrides it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rackform.lab import LabError, kubelet_host, run

IMAGES_DIR = Path("/var/lib/rackform/images")
SUITE = "bookworm"
BUILD_TIMEOUT_S = 1800

# A minimal Debian that boots systemd and answers SSH (docs/lab.md, the base image), plus
# what the pipeline's roles expect on a host: FRR (enabled only on switches), NTP client,
# python3-apt for Ansible's apt module, a DHCP client.
PACKAGES = (
    "openssh-server", "python3", "python3-apt", "iproute2", "iputils-ping", "procps",
    "ethtool", "sudo", "kmod", "lldpd", "systemd", "systemd-sysv", "systemd-timesyncd",
    "dbus", "libpam-systemd", "frr", "frr-pythontools", "isc-dhcp-client",
    # Lab nodes reach no package archive, so what the stages install must be here:
    # ifupdown2 (Cumulus-style interfaces on switches), containerd and runc (the
    # kubernetes stage), dnsmasq, ipxe and a TFTP client (the PXE service), curl.
    "ifupdown2", "containerd", "runc", "dnsmasq", "ipxe", "tftp-hpa", "curl", "rsync",
    # The site mirror's servers (the os stage's mirror role enables them on the mirror host;
    # on a real site they come from the OS install): nginx for the apt repository and the
    # charts, Debian's docker-registry for the OCI registry.
    "nginx-light", "docker-registry",
    # The low-level tools the kubelet, kube-proxy and kube-router call in the node's network
    # namespace: iptables and ip6tables, ipset, nft, ebtables, conntrack, socat (kubeadm
    # 1.36's preflight wants losetup, mount and cp, already in minbase). On a real site
    # they come from the site mirror as the Kubernetes packages' dependencies; a lab node
    # reaches no archive, so the image carries them.
    "iptables", "ipset", "nftables", "conntrack", "ebtables", "socat",
    # The storage stage: NFS-Ganesha on the storage node (the lab's kernel has no nfsd, so
    # no nfs-kernel-server), the NFS client tools on the readers (libnfs's nfs-cat for verify).
    "nfs-ganesha", "nfs-ganesha-vfs", "nfs-common", "libnfs-utils",
)

# Installed but started only where a role enables them.
DISABLED_UNITS = ("frr.service", "dnsmasq.service", "containerd.service", "nginx.service",
                  "docker-registry.service",
                  # NFS: the storage role starts Ganesha (and, as its unit wants, rpcbind);
                  # no node runs rpcbind or the NFS client units otherwise.
                  "nfs-ganesha.service", "rpcbind.service", "rpcbind.socket", "nfs-client.target")

SSHD_DROP_IN = """\
# rackform lab: key-only root login, no DNS lookups (the lab has no resolver),
# one host key per node (ed25519, seeded before first boot).
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
"""

# Cumulus reports port names (swp5) in LLDP; hosts and switches both run lldpd.
LLDPD_CONF = "configure lldp portidsubtype ifname\n"

# A node whose host keys were not seeded before boot makes its own at first boot.
SSH_KEYGEN_UNIT = """\
[Unit]
Description=Generate missing SSH host keys (rackform lab)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

# A lab node reaches no package archive, and an air-gapped site's nodes must name none:
# debootstrap's source (the machine's Debian archive) is removed from the image. The
# kubernetes stage installs from the site mirror, whose source role mirror_client adds.
APT_SOURCES_LIST = "# rackform lab: no package archive here; the site mirror's source is in sources.list.d\n"

# Units that cannot work inside a container and would only mark it degraded.
MASKED_UNITS = ("systemd-networkd-wait-online.service", "e2scrub_reap.service")


def image_name() -> str:
    """`bookworm-<hash>`: a change to the package list or the lab settings builds a new image."""
    lab_files = (f"{path}\n{text}" for path, (text, _) in sorted(kubelet_host.files().items()))
    recipe = "\n".join((SUITE, *PACKAGES, *DISABLED_UNITS, *MASKED_UNITS, SSHD_DROP_IN, LLDPD_CONF, SSH_KEYGEN_UNIT,
                         APT_SOURCES_LIST,
                         *lab_files))
    return f"{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"


def image_dir(images_dir: Path = IMAGES_DIR) -> Path:
    return images_dir / image_name()


def is_built(images_dir: Path = IMAGES_DIR) -> bool:
    return (image_dir(images_dir) / "usr/sbin/sshd").exists()


def ensure_base(images_dir: Path = IMAGES_DIR, progress: Callable[[str], None] = print) -> Path:
    """Return the base image, building it first if it is missing (about 2 min)."""
    if is_built(images_dir):
        return image_dir(images_dir)
    images_dir.mkdir(parents=True, exist_ok=True)
    with open(images_dir / f".{image_name()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build finishes first; we reuse it
        if not is_built(images_dir):
            _build(images_dir, progress)
    return image_dir(images_dir)


def _build(images_dir: Path, progress: Callable[[str], None]) -> None:
    _remove_stale_builds(images_dir)
    mirror = debian_mirror()
    building = images_dir / f".{image_name()}.building-{os.getpid()}"
    progress(f"building base image {image_dir(images_dir)} from {mirror} (debootstrap, a few minutes)")
    started = time.monotonic()
    run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
         str(building), mirror], timeout_s=BUILD_TIMEOUT_S)
    strip_identity(building)
    configure(building)
    final = image_dir(images_dir)
    if final.exists():  # an unusable leftover (no sshd): replace it
        _remove_tree(final)
    building.rename(final)
    progress(f"base image built in {time.monotonic() - started:.0f} s")


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The first Debian archive URI in this machine's apt sources (security archive skipped)."""
    if override := os.environ.get("RACKFORM_DEBIAN_MIRROR"):
        return override
    candidates: list[str] = []
    for sources in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        candidates += re.findall(r"^URIs:\s*(\S+)", sources.read_text(), flags=re.MULTILINE)
    list_file = apt_dir / "sources.list"
    if list_file.exists():
        candidates += re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", list_file.read_text(), flags=re.MULTILINE)
    for uri in candidates:
        if "debian" in uri and "security" not in uri:
            return uri
    raise LabError(f"no Debian archive URI in {apt_dir}/sources.list(.d); set RACKFORM_DEBIAN_MIRROR")


def strip_identity(root: Path) -> None:
    """Remove what must differ per node: host keys, machine-id, hostname."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    (root / "etc/hostname").write_text("localhost\n")


def configure(root: Path) -> None:
    """Lab settings shared by every node: sshd, lldpd, FRR off, what a kubelet needs in a
    node (rackform.lab.kubelet_host), trimmed caches."""
    _write(root / "etc/ssh/sshd_config.d/rackform-lab.conf", SSHD_DROP_IN)
    _write(root / "etc/lldpd.d/rackform-lab.conf", LLDPD_CONF)
    _write(root / "etc/apt/sources.list", APT_SOURCES_LIST)
    _write(root / "etc/systemd/system/rackform-ssh-keygen.service", SSH_KEYGEN_UNIT)
    for path, (text, mode) in kubelet_host.files().items():
        _write(root / path.lstrip("/"), text)
        (root / path.lstrip("/")).chmod(mode)
    sysinit_wants = root / "etc/systemd/system/sysinit.target.wants"
    sysinit_wants.mkdir(parents=True, exist_ok=True)
    _symlink(sysinit_wants / kubelet_host.UNIT_NAME, f"/etc/systemd/system/{kubelet_host.UNIT_NAME}")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    _symlink(wants / "rackform-ssh-keygen.service", "/etc/systemd/system/rackform-ssh-keygen.service")
    _symlink(wants / "ssh.service", "/lib/systemd/system/ssh.service")
    _symlink(wants / "lldpd.service", "/lib/systemd/system/lldpd.service")
    # FRR runs only on switches (their overlay enables it); dnsmasq and containerd
    # only where the provision and kubernetes stages enable them.
    for unit in DISABLED_UNITS:  # from every target that wants it (rpcbind.socket: sockets.target)
        for wanted_by in (root / "etc/systemd/system").glob("*.wants"):
            (wanted_by / unit).unlink(missing_ok=True)
    for unit in MASKED_UNITS:
        _symlink(root / "etc/systemd/system" / unit, "/dev/null")
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (root / cache).glob("*"):
            if item.is_file():
                item.unlink()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _symlink(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _remove_stale_builds(images_dir: Path) -> None:
    for stale in images_dir.glob(f".{SUITE}-*.building-*"):
        _remove_tree(stale)


def _remove_tree(path: Path) -> None:
    """Delete a (possibly half-built) root filesystem, unmounting /proc etc. left by debootstrap."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount_point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        run(["umount", "-l", mount_point], check=False)
    run(["rm", "-rf", "--one-file-system", str(path)])
    if path.exists():
        shutil.rmtree(path)
