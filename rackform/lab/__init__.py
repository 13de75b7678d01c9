"""The local lab: a whole site on one machine.

Hosts and Cumulus switches are systemd-nspawn containers booting real systemd from one
shared Debian image (overlayfs per node), each in its own network namespace, wired with
veth pairs exactly as the site's cables say. `rackform.lab.lab` brings a site up and down;
`rackform.lab.nodes` is the per-node power API the BMC emulator drives.

Shared here: the one error type the lab raises and the command runner that produces it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


class LabError(RuntimeError):
    """Something in the lab could not be done; the message says what and why."""


def run(argv: Sequence[str], *, check: bool = True, input_text: str | None = None,
        timeout_s: float | None = 120) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise LabError naming the command and its stderr. It gets its
    tool's environment (rackform.process_environment, by the program's name), never all of ours."""
    # Imported here: ipmi_sim's chassis hook imports this package and must start quickly.
    from rackform.process_environment import tool_environment

    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, input=input_text,
                                timeout=timeout_s, env=tool_environment(Path(argv[0]).name))
    except FileNotFoundError as error:
        raise LabError(f"{argv[0]}: not installed ({error})") from error
    except subprocess.TimeoutExpired as error:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout_s} s") from error
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise LabError(f"`{' '.join(argv)}` failed (exit {result.returncode}): {detail}")
    return result
