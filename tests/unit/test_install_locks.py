"""The install's locks (docs/install.md): every distribution pinned with its sha256, each lock
holding what pyproject.toml asks for its part, one version of a package across them, and not
the whole `ansible` package (its two collections the roles use come alone).

`make lock` writes them with pip-compile; these tests catch a lock edited by hand or left
behind by a change to pyproject.toml.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
LOCKS = {"requirements.lock": [], "requirements-pulumi.lock": ["pulumi"], "requirements-dev.lock": ["lab", "dev"]}
"""Each lock -> the extras it pins beside rackform's own dependencies."""


def lock_entries(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of every entry; any other kind of line fails the test."""
    entries = {}
    for entry in lock.read_text().replace("\\\n", " ").splitlines():
        words = entry.split("#", 1)[0].split()
        if not words:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^ ;]+)", words[0])
        assert match, f"{lock.name}: {entry.strip()!r} is not a pinned name==version (make lock)"
        hashes = [word.removeprefix("--hash=sha256:") for word in words[1:]]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", value) for value in hashes), \
            f"{lock.name}: {words[0]} lacks its --hash=sha256: (pip install --require-hashes refuses it)"
        entries[canonicalize_name(match[1])] = (match[2], hashes)
    return entries


@pytest.mark.parametrize("lock", [*LOCKS, "requirements-collections.lock"])
def test_every_entry_is_pinned_with_its_hashes(lock):
    assert lock_entries(REPO / lock)


@pytest.mark.parametrize("lock", LOCKS)
def test_each_lock_pins_what_pyproject_asks_for_its_part(lock):
    pinned = lock_entries(REPO / lock)
    asked = [*PYPROJECT["project"]["dependencies"],
             *(item for extra in LOCKS[lock] for item in PYPROJECT["project"]["optional-dependencies"][extra])]
    for text in asked:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{lock}: pyproject.toml asks for {text}, the lock has no {name} (make lock)"
        assert requirement.specifier.contains(pinned[name][0], prereleases=True), \
            f"{lock}: {name}=={pinned[name][0]} is outside pyproject.toml's {text} (make lock)"


def test_a_package_two_locks_share_has_one_version_and_hashes():
    seen: dict[str, tuple[str, str, list[str]]] = {}
    for lock in LOCKS:
        for name, (version, hashes) in lock_entries(REPO / lock).items():
            first = seen.setdefault(name, (lock, version, hashes))
            assert first[1:] == (version, hashes), f"{name}: {first[0]} pins {first[1]}, {lock} pins {version}"


def test_no_lock_installs_the_whole_ansible_package():
    for lock in LOCKS:
        assert "ansible" not in lock_entries(REPO / lock), f"{lock} pins the whole ansible package"
    assert not [text for text in PYPROJECT["project"]["dependencies"] if Requirement(text).name == "ansible"]


def test_the_runtime_lock_holds_no_development_tool():
    runtime = lock_entries(REPO / "requirements.lock")
    for tool in ("ansible-lint", "pip-tools", "jsonschema", "kubernetes-validate", "asyncssh", "pulumi"):
        assert tool not in runtime, f"requirements.lock (what the tool alone needs) pins {tool}"
