"""Helpers the Onyx emulator tests share."""

from __future__ import annotations

import subprocess
from pathlib import Path


def scanned_known_hosts(emulator) -> Path:
    """A known_hosts holding the emulator's own host key (what an inventory's ssh_host_keys would
    render): the onyx_switch role checks host keys, always."""
    path = emulator.state_dir / "scanned_known_hosts"
    if not path.is_file():
        found = subprocess.run(["ssh-keyscan", "-p", str(emulator.port), "127.0.0.1"],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        path.write_text(found)
    return path
