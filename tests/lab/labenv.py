"""What a lab test module needs of this machine, and why it skips when it does not have it.

Every lab module brings up real parts (nspawn hosts, BMCs, switches) and needs root and the
lab's tools. Under pytest-xdist a module's one lab must stay on one worker, else two workers
would bring it up twice.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

LAB_TOOLS = ("systemd-nspawn", "debootstrap", "ip", "ssh", "ssh-keygen", "setsid", "nsenter")
GROUPING_DISTS = ("loadfile", "loadscope")  # both keep a module on one worker


def skip_reason(config: pytest.Config | None = None, *, extra_tools: tuple[str, ...] = (),
                single_worker: str | None = None) -> str | None:
    """Why the module cannot run here, or None.

    With `config`, xdist is fine as long as it groups a module on one worker. With
    `single_worker` (what the module brings up and down), it must not run under xdist at all.
    """
    if os.geteuid() != 0:
        return "needs root"
    missing = [tool for tool in (*LAB_TOOLS, *extra_tools) if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt: systemd-container debootstrap)"
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    if single_worker is not None:
        return f"brings {single_worker} up and down: run it on one worker (-p no:xdist)"
    if config is not None and _xdist_mode(config) not in GROUPING_DISTS:
        return "under xdist the lab tests need --dist loadfile (or run: pytest -p no:xdist -m lab tests/lab)"
    return None


def _xdist_mode(config: pytest.Config) -> str:
    """The controller's --dist (workers see only `no` in their own options)."""
    argv = [*getattr(config, "workerinput", {}).get("mainargv", []), *config.getini("addopts"),
            *os.environ.get("PYTEST_ADDOPTS", "").split()]
    modes = re.findall(r"--dist[= ](\w+)", " ".join(argv))
    return modes[-1] if modes else "load"
