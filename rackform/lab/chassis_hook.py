"""The program ipmi_sim's `chassis_control` runs: power and boot device of one lab host.

ipmi_sim (see rackform.lab.bmc) calls, through `sh -c`, for every chassis command:

    python -m rackform.lab.chassis_hook --site S --node N --driver D --state-dir DIR get power boot
    ... set power 0|1      (chassis power off/on; power cycle is `set power 0`, then 1 a second later)
    ... set reset 1        (hard reset: restart the host)
    ... set shutdown 1     (chassis power soft: a clean shutdown)
    ... set boot pxe|default|none|cdrom|bios
    ... set identify "INTERVAL FORCE"

and expects `power:1`, `boot:pxe` ... on stdout for a get, nothing for a set, and a non-zero
exit (with the reason on stdout, which ipmi_sim logs) for an error; a failed hook becomes an
IPMI "unspecified error" completion code. ipmi_sim is single-threaded and waits for the
hook, so it must be quick: `get power` runs on every chassis status request. Only the
standard library is imported here, the nspawn driver imports the node API lazily.

The boot device lives in DIR/bootdev. ipmi_sim does not pass on the "persistent" flag of
Set System Boot Options, so every boot device is treated as one-time, as `ipmitool chassis
bootdev pxe` means by default: the next power on (or reset) with `pxe` re-images the host
first (a network install, in the lab a fresh disk), then the device goes back to `default`.

Two power drivers, chosen per BMC by rackform.lab.bmc:
- `nspawn`: the lab's real hosts, through rackform.lab.nodes.
- `process`: the BMC-only test driver. A `sleep infinity` process per host (pid in
  DIR/host.pid) stands for "the host is on"; used to test BMCs without containers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

BOOT_DEVICES = ("none", "pxe", "default", "cdrom", "bios")  # the names ipmi_sim maps boot flags to
DEFAULT_BOOT_DEVICE = "default"
BOOTDEV_FILE = "bootdev"
IDENTIFY_FILE = "identify"
EVENTS_FILE = "chassis.log"  # one line per power or boot change, for people debugging the lab
HOST_PID_FILE = "host.pid"
REIMAGE_COUNT_FILE = "reimage-count"
PROCESS_STOP_TIMEOUT_S = 3.0
CLONE_NEWNET = 0x40000000


class HookError(Exception):
    """A request the hook cannot carry out; the message goes back to ipmi_sim."""


# --- power drivers ----------------------------------------------------------------------------

class ProcessDriver:
    """The BMC-only test driver: one long-running `sleep infinity` process is the host.

    Powered on means: the pid in DIR/host.pid is alive and is our process (its argv[0]
    names the site and host, so a recycled pid is never mistaken for it). A reimage
    only counts itself in DIR/reimage-count, so tests can see that it happened.
    """

    def __init__(self, site: str, node: str, state_dir: Path):
        self.marker = f"rackform-host:{site}:{node}"
        self.pid_file = state_dir / HOST_PID_FILE
        self.reimage_file = state_dir / REIMAGE_COUNT_FILE

    def host_pid(self) -> int | None:
        """The host process's pid while it runs, else None."""
        try:
            pid = int(self.pid_file.read_text())
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError):
            return None
        return pid if argv0 == self.marker and state not in ("Z", "X") else None

    def is_running(self) -> bool:
        return self.host_pid() is not None

    def power_on(self) -> None:
        if self.is_running():
            return
        import subprocess  # only a power on needs it

        # Its own session, no inherited descriptors (ipmi_sim's socket, the pipe ipmi_sim
        # reads this hook's output from): the host outlives the hook and never holds them.
        process = subprocess.Popen([self.marker, "infinity"], executable="sleep",
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        _write_atomically(self.pid_file, f"{process.pid}\n")

    def power_off(self, soft: bool = False) -> None:
        pid = self.host_pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM if soft else signal.SIGKILL)
            deadline = time.monotonic() + PROCESS_STOP_TIMEOUT_S
            while self.is_running() and time.monotonic() < deadline:
                time.sleep(0.01)
            if self.is_running():
                os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

    def reimage(self) -> None:
        try:
            count = int(self.reimage_file.read_text())
        except (OSError, ValueError):
            count = 0
        _write_atomically(self.reimage_file, f"{count + 1}\n")


class NspawnDriver:
    """The lab's real hosts (systemd-nspawn containers), through rackform.lab.nodes."""

    def __init__(self, site: str, node: str, state_dir: Path):
        self.site = site
        self.node = node

    @staticmethod
    def _nodes():
        from rackform.lab import nodes  # imported only when a host is really asked for

        return nodes

    def is_running(self) -> bool:
        return self._nodes().is_running(self.site, self.node)

    def power_on(self) -> None:
        self._nodes().power_on(self.site, self.node)

    def power_off(self, soft: bool = False) -> None:
        self._nodes().power_off(self.site, self.node, soft=soft)

    def reimage(self) -> None:
        self._nodes().reimage(self.site, self.node)


DRIVERS = {"nspawn": NspawnDriver, "process": ProcessDriver}


# --- the chassis ---------------------------------------------------------------------------------

class Chassis:
    """What the BMC controls: the host's power (through a driver) and its next boot device."""

    def __init__(self, driver, state_dir: Path):
        self.driver = driver
        self.state_dir = state_dir

    def boot_device(self) -> str:
        try:
            device = (self.state_dir / BOOTDEV_FILE).read_text().strip()
        except OSError:
            return DEFAULT_BOOT_DEVICE
        return device if device in BOOT_DEVICES else DEFAULT_BOOT_DEVICE

    def set_boot_device(self, device: str) -> None:
        if device not in BOOT_DEVICES:
            raise HookError(f"invalid boot device {device!r} (expected one of {', '.join(BOOT_DEVICES)})")
        _write_atomically(self.state_dir / BOOTDEV_FILE, f"{device}\n")
        self._event(f"boot device {device}")

    def set_power(self, on: bool) -> None:
        if on:
            if not self.driver.is_running():
                self._boot()
        else:
            self.driver.power_off(soft=False)
            self._event("power off")

    def reset(self) -> None:
        """A hard reset restarts a running host; one that was off is powered on."""
        self.driver.power_off(soft=False)
        self._event("reset")
        self._boot()

    def shutdown(self) -> None:
        """A soft power off is a request to the OS: answered at once, carried out after."""
        self._event("soft power off requested")

        def soft_off() -> None:
            try:
                self.driver.power_off(soft=True)
            except Exception as error:  # noqa: BLE001 - nobody waits for this child but the log
                self._event(f"soft power off failed: {error}")
            else:
                self._event("soft power off done")

        run_detached(soft_off)

    def set_identify(self, value: str) -> None:
        _write_atomically(self.state_dir / IDENTIFY_FILE, f"{value}\n")

    def _boot(self) -> None:
        """Power on; a pending one-time PXE boot re-images the host first."""
        if self.boot_device() == "pxe":
            self.driver.reimage()
            self._event("pxe boot: host re-imaged")
            self.set_boot_device(DEFAULT_BOOT_DEVICE)
        self.driver.power_on()
        self._event("power on")

    def _event(self, what: str) -> None:
        with open(self.state_dir / EVENTS_FILE, "a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {what}\n")


def get_values(chassis: Chassis, names: list[str]) -> list[str]:
    """ipmi_sim's `get`: one `name:value` line per requested name."""
    lines = []
    for name in names:
        if name == "power":
            lines.append(f"power:{int(chassis.driver.is_running())}")
        elif name == "boot":
            lines.append(f"boot:{chassis.boot_device()}")
        else:
            raise HookError(f"cannot get {name!r} (only power and boot)")
    return lines


def set_values(chassis: Chassis, pairs: list[str]) -> None:
    """ipmi_sim's `set`: name value pairs, applied in order."""
    if len(pairs) % 2:
        raise HookError(f"set needs name value pairs, got {' '.join(pairs)!r}")
    for name, value in zip(pairs[::2], pairs[1::2]):
        if name == "power":
            chassis.set_power(_flag(name, value))
        elif name == "reset":
            if _flag(name, value):
                chassis.reset()
        elif name == "shutdown":
            if _flag(name, value):
                chassis.shutdown()
        elif name == "boot":
            chassis.set_boot_device(value)
        elif name == "identify":
            chassis.set_identify(value)
        else:
            raise HookError(f"cannot set {name!r}")


def _flag(name: str, value: str) -> bool:
    if value not in ("0", "1"):
        raise HookError(f"{name} must be 0 or 1, got {value!r}")
    return value == "1"


# --- plumbing ----------------------------------------------------------------------------------

def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def run_detached(action) -> None:
    """Run `action` in a child that outlives the hook, so ipmi_sim is not kept waiting.

    ipmi_sim reads the hook's stdout until EOF and serves nobody meanwhile; a clean
    shutdown can take the node API 30 s. The child lets go of stdout and every inherited
    descriptor (ipmi_sim's socket among them) before it starts.
    """
    sys.stdout.flush()
    if os.fork() != 0:
        return
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
        for fd in inherited:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(fd)
        action()
    finally:
        os._exit(0)


def enter_network_namespace(fd: int) -> None:
    """Leave the BMC's namespace for the one `fd` refers to (the lab's root namespace).

    ipmi_sim runs inside the BMC's own network namespace and so does this hook; hosts are
    not on the out-of-band network, so power actions run from the namespace rackform.lab.bmc
    started ipmi_sim from (it passes an open descriptor of it down to ipmi_sim and here).
    """
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, os.CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise HookError(f"setns to the root network namespace failed: {os.strerror(error)}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rackform.lab.chassis_hook",
                                     description="ipmi_sim chassis_control program for one lab host")
    parser.add_argument("--site", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--driver", required=True, choices=sorted(DRIVERS))
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--root-netns-fd", type=int, default=None,
                        help="descriptor of the network namespace power actions run in")
    parser.add_argument("operation", choices=("get", "set", "check"))
    parser.add_argument("values", nargs="*")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    chassis = Chassis(DRIVERS[args.driver](args.site, args.node, args.state_dir), args.state_dir)
    try:
        if args.operation == "get":
            print("\n".join(get_values(chassis, args.values)))
        elif args.operation == "set":
            if args.root_netns_fd is not None:
                enter_network_namespace(args.root_netns_fd)
            set_values(chassis, args.values)
        else:
            raise HookError("check is not supported for chassis control")
    except HookError as error:
        print(f"{args.node}: {error}")
        return 1
    except Exception as error:  # noqa: BLE001 - anything else still answers ipmi_sim with a reason
        print(f"{args.node}: {type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
