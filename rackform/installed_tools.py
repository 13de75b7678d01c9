"""Where rackform finds the programs its own set-up installs beside it: kubectl, helm, promtool,
pulumi, and ansible-runner's `ansible-playbook`.

`make install` (docs/install.md) puts them in the bin folder of the environment rackform is
installed in (`.venv/bin`), which is on PATH only while that environment is activated: run as
`.venv/bin/rackform`, from cron, or from a process Pulumi started, rackform would not find
them on PATH alone. So a tool is looked up in that folder first, then on PATH, and the
processes rackform starts get that folder first on their PATH too. Standard library only:
any layer may import this.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path


def environment_bin() -> Path:
    """The bin folder of the environment this interpreter runs (`sys.prefix`/bin: `.venv/bin`),
    where `rackform` itself and what the set-up installs beside it are."""
    return Path(sys.prefix) / "bin"


def find_tool(name: str, path: str | None = None) -> str | None:
    """The program `name`: in environment_bin() first, else on `path` (default: $PATH); None
    when neither has it."""
    return shutil.which(name, path=str(environment_bin())) or shutil.which(name, path=path)


def search_path(path: str | None = None) -> str:
    """`path` (default: $PATH) with environment_bin() first: the PATH of a process rackform starts,
    so it finds what rackform finds (ansible-runner starts `ansible-playbook` by name)."""
    first = str(environment_bin())
    given = os.environ.get("PATH", os.defpath) if path is None else path
    return os.pathsep.join([first, *(entry for entry in given.split(os.pathsep) if entry and entry != first)])


def not_found(names: Sequence[str]) -> str:
    """What to say when `names` were not found: where they were looked for, and how to get them."""
    them = "them" if len(names) > 1 else "it"
    return (f"{' and '.join(names)} not found in {environment_bin()} (where the set-up puts "
            f"{them}: docs/install.md) nor on PATH")
