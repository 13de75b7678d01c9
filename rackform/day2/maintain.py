"""Rolling maintenance: a site's servers in batches, each batch back and verified before the next.

Per batch: cordon and drain each host (where a cluster exists), run the maintenance
(`reboot`: `systemctl reboot` over SSH; `upgrade-packages`: apt-get upgrade over SSH;
a site's own hook: a program run here once per host with the host's facts in its
environment), power-cycle through the BMC when asked, wait until each host answers SSH
again and its verify checks pass, uncordon. The line stops at the first batch with a
failed host, naming it: later batches keep running undisturbed.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rackform.model.site import Host, Site
from rackform.process_environment import tool_environment

SSH_PORT = 22
DOWN_TIMEOUT_S = 60.0
UP_TIMEOUT_S = 300.0
UPGRADE_COMMAND = "DEBIAN_FRONTEND=noninteractive apt-get update -q && " \
                  "DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Options::=--force-confold upgrade\n"


def batches(hosts: Sequence[str], batch: int, max_unavailable: int | None = None) -> list[list[str]]:
    """`hosts` in order, `batch` at a time, never more than `max_unavailable` down at once."""
    if batch < 1:
        raise ValueError("--batch must be at least 1")
    size = min(batch, max_unavailable) if max_unavailable is not None else batch
    if size < 1:
        raise ValueError("--max-unavailable must be at least 1")
    return [list(hosts[start:start + size]) for start in range(0, len(hosts), size)]


@dataclass(slots=True)
class BatchResult:
    hosts: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    """Host -> why."""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def port_open(address: str, port: int = SSH_PORT, timeout_s: float = 2.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_port(address: str, want_open: bool, timeout_s: float, interval_s: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(address) == want_open:
            return True
        time.sleep(interval_s)
    return port_open(address) == want_open


def run_hook(hook: Path, site: Site, host: Host, timeout_s: float = 3600) -> tuple[bool, str]:
    """Run a site's maintenance program for one host; its exit status is the verdict. It gets the
    host's facts and, of this process's environment, profile `maintenance-hook` of
    rackform.process_environment (the SSH agent, the key, the kubeconfig: no secrets)."""
    env = tool_environment("maintenance-hook", {
        "RACKFORM_SITE": site.name, "RACKFORM_HOST": host.name,
        "RACKFORM_MANAGEMENT_ADDRESS": str(host.management_address or ""),
        "RACKFORM_BMC_ADDRESS": str(host.bmc_address or ""), "RACKFORM_BLOCK": host.block.name})
    try:
        result = subprocess.run([str(hook)], env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"hook {hook}: {error}"
    tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or [""]
    return result.returncode == 0, f"hook exit {result.returncode}" + (f": {tail[0]}" if tail[0] else "")


BOOT_MARKER_SCRIPT = "cat /proc/sys/kernel/random/boot_id; cut -d' ' -f22 /proc/1/stat\n"
"""What changes when a machine boots: the kernel's boot id (a real server) and PID 1's start time
(a container, which shares its host's kernel, as the lab's do)."""
