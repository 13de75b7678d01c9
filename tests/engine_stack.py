"""The real Pulumi engine (`make pulumi`: .venv/bin/pulumi) driving this repo's program, for tests.

Each `EngineProject` is a Pulumi project folder of its own under a test's tmp folder, as a user's
checkout is: copies of Pulumi.yaml and the Pulumi.<stack>.yaml files (the engine writes each
stack's encryption salt and secrets into those, so the committed files stay untouched), links to
stacks/ and .venv/, a local file backend (`pulumi login file://...`), the passphrase secrets
provider, and $RACKFORM_ROOT naming the checkout whose designs, build/ and state/ the program uses.
`backend_url` logs in to another backend instead (an `s3://` bucket: tests/unit/test_pulumi_team_state.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PULUMI = REPO_ROOT / ".venv" / "bin" / "pulumi"
PASSPHRASE = "rackform-test-passphrase"
"""The local backend's passphrase (PULUMI_CONFIG_PASSPHRASE): it encrypts this test's secrets only."""


def engine_missing() -> str | None:
    """Why the engine cannot run here, or None."""
    if not os.access(PULUMI, os.X_OK):
        return f"{PULUMI} is missing: `make pulumi` builds the Pulumi engine (make test does)"
    return None


@dataclass
class EngineProject:
    folder: Path
    root: Path = REPO_ROOT
    """The checkout the program deploys from ($RACKFORM_ROOT)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    backend_url: str = ""
    """The backend `pulumi login` is given; empty for the local file backend (`backend`)."""

    @classmethod
    def make(cls, folder: Path, root: Path = REPO_ROOT, backend_url: str = "", **extra_env: str) -> EngineProject:
        project = folder / "project"
        project.mkdir(parents=True)
        for stack_file in [REPO_ROOT / "Pulumi.yaml", *sorted(REPO_ROOT.glob("Pulumi.*.yaml"))]:
            shutil.copyfile(stack_file, project / stack_file.name)
        (project / "stacks").symlink_to(REPO_ROOT / "stacks")
        (project / ".venv").symlink_to(REPO_ROOT / ".venv")
        (folder / "backend").mkdir()
        (folder / "home").mkdir()
        engine = cls(project, root, extra_env, backend_url)
        engine.run("login", engine.login_url)
        return engine

    @property
    def backend(self) -> Path:
        return self.folder.parent / "backend"

    @property
    def login_url(self) -> str:
        return self.backend_url or f"file://{self.backend}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "PULUMI_HOME": str(self.folder.parent / "home"), "PULUMI_SKIP_UPDATE_CHECK": "true",
                "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "RACKFORM_ROOT": str(self.root),
                "PULUMI_DIY_BACKEND_URL": self.login_url, **self.extra_env}

    def run(self, *args: str, check: bool = True, timeout_s: float = 300,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --non-interactive` in the project folder; by default assert it succeeded."""
        result = subprocess.run([str(PULUMI), *args, "--non-interactive"], cwd=self.folder, env=self.env(),
                                capture_output=True, text=True, timeout=timeout_s, input=stdin)
        if check:
            assert result.returncode == 0, f"pulumi {' '.join(args)} (exit {result.returncode}):\n" \
                                           f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        return result

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`pulumi ARGS --non-interactive` running in the background, its output as lines on stdout."""
        return subprocess.Popen([str(PULUMI), *args, "--non-interactive"], cwd=self.folder, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def init(self, stack: str) -> None:
        self.run("stack", "init", stack)

    def preview_json(self, stack: str) -> list[dict]:
        """The steps `pulumi preview --json` plans for `stack`."""
        return json.loads(self.run("preview", "-s", stack, "--json").stdout).get("steps", [])

    def state_text(self) -> str:
        """Every file of the backend (checkpoints, history, backups) as one text."""
        return "\n".join(path.read_text(errors="replace") for path in sorted(self.backend.rglob("*"))
                         if path.is_file())
