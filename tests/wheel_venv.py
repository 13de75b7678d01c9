"""rackform's wheel in a virtualenv that holds what the wheel asks for and nothing else.

The dependencies are installed as docs/install.md tells a user to: the locks of rackform
and of its `pulumi` extra (an `init` repo's program requires rackform[pulumi]) with pip's
--require-hashes, the wheel with --no-deps, `pip check` (every Requires-Dist of the wheel's
metadata installed, at a version it allows), then the two collections the roles use
(rackform.external_collections' install), into a venv made without
--system-site-packages and without any path into the development venv: the locks are
compiled from pyproject.toml, so a dependency it forgets is missing there as it would be for
a user. Installing them takes a minute or more, so that venv is kept between sessions in
pytest's cache folder (.pytest_cache/d/rackform-wheel-deps/<key>/), keyed by the wheel's
requirements, the locks and the Python version: a change to any of them builds it anew (and
drops the old one). It holds no rackform: each session installs its own wheel (`pip install --no-deps`, with
its console script) into a fresh venv whose one `.pth` line adds the dependencies' folder.
A file lock lets xdist workers share the build.
"""

from __future__ import annotations

import email.parser
import fcntl
import hashlib
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

from rackform.external_collections import install as install_collections

CACHE_FORMAT = "3"
"""Part of the key: bump it when what the cached venv holds changes."""
PIP_TIMEOUT_S = 1200


def wheel_requirements(wheel: Path) -> list[str]:
    """Requires-Python and every Requires-Dist of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    return [f"Requires-Python: {metadata.get('Requires-Python', '')}",
            *sorted(metadata.get_all("Requires-Dist") or [])]


def locks(lock: Path) -> list[Path]:
    """The runtime lock, the pulumi extra's beside it, and the collections' (the ansible wheel)."""
    return [lock, *(lock.with_name(name) for name in ("requirements-pulumi.lock", "requirements-collections.lock"))]


def dependencies_key(wheel: Path, lock: Path) -> str:
    digest = hashlib.sha256()
    for part in (CACHE_FORMAT, sys.version, *wheel_requirements(wheel), *(path.read_text() for path in locks(lock))):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _purelib(env_dir: Path) -> Path:
    done = subprocess.run([env_dir / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True)
    return Path(done.stdout.strip())


def _pip(python: Path, *arguments: str) -> None:
    """The test process's pip acting on another venv (pip --python), which needs no pip of its own."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *arguments],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(arguments)} failed:\n{done.stdout}\n{done.stderr}")


def dependencies_venv(wheel: Path, lock: Path, cache_dir: Path) -> Path:
    """The venv holding the wheel's dependencies as pip resolves them (built once per key)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = dependencies_key(wheel, lock)
    env_dir = cache_dir / key
    with open(cache_dir / "lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not (env_dir / "complete").is_file():
            for stale in cache_dir.iterdir():
                if stale.is_dir():
                    shutil.rmtree(stale)
            venv.create(env_dir, with_pip=False)
            python = env_dir / "bin" / "python"
            runtime, pulumi, _ = locks(lock)
            # with the `pulumi` extra's lock: an init repo's Pulumi program asks for rackform[pulumi]
            _pip(python, "install", "-q", "--require-hashes", "-r", str(runtime), "-r", str(pulumi))
            _pip(python, "install", "-q", "--no-deps", str(wheel))
            _pip(python, "check")
            _pip(python, "uninstall", "-q", "-y", "rackform")
            # what `python -m rackform.external_collections --install` does in a user's venv (this one has no pip)
            install_collections(_purelib(env_dir), progress=lambda line: None)
            (env_dir / "complete").write_text(f"{key}\n" + "\n".join(wheel_requirements(wheel)) + "\n")
    return env_dir


def install_wheel(wheel: Path, dependencies: Path, env_dir: Path) -> Path:
    """A fresh venv at env_dir with the wheel installed (console script included) and the
    dependencies venv's packages importable; returns its bin folder."""
    venv.create(env_dir, with_pip=False)
    (_purelib(env_dir) / "rackform-wheel-dependencies.pth").write_text(f"{_purelib(dependencies)}\n")
    _pip(env_dir / "bin" / "python", "install", "-q", "--no-deps", str(wheel))
    return env_dir / "bin"
