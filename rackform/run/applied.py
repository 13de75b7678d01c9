"""What was last applied to a site, per stage: the digest of the stage's inputs.

    state/<site>.json        in the site's repo, meant to be committed:
      {"site": "lab", "stages": {"os": {"digest": "…", "complete": true, "applied_at": "…",
                                        "by": "user@host", "via": "cli", "hosts": 8,
                                        "changed": 3, "failed_hosts": [],
                                        "files": {"os.yml": "<16 hex>", …}}, …}}

The stage runner (`rackform.run.stages.run_stages`) records a stage here when it ran
it for real (not in check mode), whichever front door called it: the CLI's `deploy`
or the Pulumi `Playbook` provider. The digest is `rackform.render.digest.stage_digest`,
the same the Playbook resource diffs on, so `rackform plan` and `pulumi preview`
agree on which stages would run again. A run is `complete` when it covered the
whole site (no --limit) and no host failed; an incomplete run still records what it
did, but the stage counts as pending until a complete run.

$RACKFORM_STATE_DIR puts the files elsewhere (tests; a CI job that keeps state as an
artifact instead of a commit). Writes are atomic (a temporary file renamed over the
old one) and serialised with an flock, so two processes never lose each other's stage.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import getpass
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_DIR_ENV = "RACKFORM_STATE_DIR"
STATE_DIR_NAME = "state"


@dataclass(frozen=True, slots=True)
class AppliedStage:
    digest: str
    complete: bool
    """The run covered every host of the site and none failed."""
    applied_at: str
    by: str
    via: str
    """Which front door ran it: cli or pulumi."""
    hosts: int = 0
    changed: int = 0
    failed_hosts: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    """Path -> short sha256 of each rendered file the stage read (names what changed since)."""
    retained_tenants: list[str] = field(default_factory=list)
    """Platform stage: tenants removed from the design whose namespaces were kept (rackform.run.retained)."""


def state_dir(root: Path) -> Path:
    given = os.environ.get(STATE_DIR_ENV)
    return Path(given) if given else Path(root) / STATE_DIR_NAME


def state_file(root: Path, site: str) -> Path:
    return state_dir(root) / f"{site}.json"


def load(root: Path, site: str) -> dict[str, AppliedStage]:
    """Stage -> what was last applied; empty for a site never deployed."""
    path = state_file(root, site)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise AppliedStateError(f"{path}: cannot be read as rackform state ({error})") from None
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict):
        raise AppliedStateError(f"{path}: no 'stages' mapping; expected what rackform records after a deploy")
    known = set(AppliedStage.__dataclass_fields__)
    return {name: AppliedStage(**{k: v for k, v in entry.items() if k in known}) for name, entry in stages.items()}


class AppliedStateError(Exception):
    """The state file exists but is not rackform's."""


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def record(root: Path, site: str, stage: str, entry: AppliedStage) -> Path:
    """Store `entry` as the stage's last application, keeping the other stages."""
    path = state_file(root, site)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        stages = {name: asdict(old) for name, old in load(root, site).items()}
        stages[stage] = asdict(entry)
        text = json.dumps({"site": site, "stages": dict(sorted(stages.items()))}, indent=2, sort_keys=True) + "\n"
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{site}.", delete=False,
                                         encoding="utf-8") as tmp:
            tmp.write(text)
        os.replace(tmp.name, path)
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
