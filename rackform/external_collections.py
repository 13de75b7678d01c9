"""The Ansible collections the roles use besides their own, installed alone.

Besides rackform.site, the roles call two collections: ansible.posix (sysctl, mount) and
community.general (timezone, the dict_kv filter). The rendered project's requirements.yml
names them with their versions (templates/project/requirements.yml.j2), and that list is
the one this module installs. The `ansible` package bundles them with 90 others
(437 MB installed, 25 MB of it these two), and Ansible Galaxy, where they are published
alone, is not reachable from every machine that reaches the Python package index. So they
come from the `ansible` release's wheel, pinned with its sha256 in
requirements-collections.lock (`make lock` writes it): pip downloads that wheel and checks
its hash, and only the two collections' folders are copied out of it, each file checked
against the collection's own FILES.json, into this environment's site-packages under
`ansible_collections/`, where ansible-core (ansible-playbook, ansible-doc, ansible-galaxy
collection list, ansible-lint) finds collections on sys.path, as it finds the package's.

    python -m rackform.external_collections --install   # once per environment (make install does it)
    python -m rackform.external_collections --check     # installed, at the pinned versions?

pip knows nothing of the copied folders: deleting the environment removes them, and
`--install` replaces a copy of another version. Where the whole `ansible` package is
installed it owns those folders, and `--install` leaves them to it when their versions are
the pinned ones.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import yaml

from rackform.paths import ASSETS_DIR, TEMPLATES_DIR
from rackform.process_environment import tool_environment

ANSIBLE_RELEASES = "ansible>=13,<15"
"""The `ansible` releases built on the ansible-core lines pyproject.toml allows (13 on 2.20,
14 on 2.21): `make lock` pins the newest of them that the locked ansible-core matches."""
COLLECTIONS_LOCK = ASSETS_DIR / "requirements-collections.lock"
"""pip-compile's lock of ANSIBLE_RELEASES (in the repo: requirements-collections.lock at its root)."""
REQUIREMENTS_YML = TEMPLATES_DIR / "project" / "requirements.yml.j2"
PIP_TIMEOUT_S = 600
"""The wheel is about 50 MB."""


class CollectionsError(Exception):
    """Why the collections could not be installed, for the person running the install."""


def wanted_collections(requirements_yml: Path = REQUIREMENTS_YML) -> dict[str, str]:
    """Name -> version of every collection the rendered project's requirements.yml pins."""
    data = yaml.safe_load(requirements_yml.read_text()) or {}
    return {entry["name"]: str(entry["version"]) for entry in data.get("collections") or []}


def pinned_ansible(lock_text: str) -> tuple[str, list[str]]:
    """The `ansible==X` entry of a pip-compile lock: (version, its sha256 hashes)."""
    entries = lock_text.replace("\\\n", " ").splitlines()
    for entry in entries:
        words = entry.split("#", 1)[0].split()
        if words and words[0].lower().startswith("ansible=="):
            hashes = [word.removeprefix("--hash=sha256:") for word in words[1:] if word.startswith("--hash=sha256:")]
            if not hashes:
                raise CollectionsError(f"{COLLECTIONS_LOCK.name}: {words[0]} has no --hash=sha256: (make lock writes them)")
            return words[0].split("==", 1)[1], hashes
    raise CollectionsError(f"{COLLECTIONS_LOCK.name}: no ansible==VERSION entry (make lock writes it)")


def site_packages() -> Path:
    """This environment's site-packages, the folder ansible-core scans for ansible_collections/."""
    return Path(sysconfig.get_paths()["purelib"])


def manifest_version(folder: Path) -> str | None:
    """The version a collection's folder says it is (its MANIFEST.json), or None."""
    try:
        return json.loads((folder / "MANIFEST.json").read_text())["collection_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def installed_version(target: Path, name: str) -> str | None:
    """The version of collection `name` under target/ansible_collections/, or None."""
    return manifest_version(target / "ansible_collections" / Path(*name.split(".")))


def missing(target: Path, wanted: dict[str, str]) -> dict[str, str | None]:
    """The wanted collections not installed under target at their pinned versions: name -> the version there."""
    return {name: found for name, version in wanted.items() if (found := installed_version(target, name)) != version}


def download_wheel(version: str, hashes: list[str], into: Path, pip_options: tuple[str, ...] = ()) -> Path:
    """The `ansible` wheel of `version`, downloaded by pip, which refuses it unless its sha256 is one of hashes."""
    requirement = into / "ansible.txt"
    requirement.write_text(f"ansible=={version} " + " ".join(f"--hash=sha256:{value}" for value in hashes) + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--only-binary", ":all:", "--require-hashes", "-r", str(requirement),
                           "--dest", str(into), *pip_options],
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=tool_environment("pip"))
    wheels = sorted(into.glob(f"ansible-{version}-*.whl"))
    if done.returncode != 0 or not wheels:
        raise CollectionsError(f"pip could not download ansible {version}'s wheel:\n{done.stdout}{done.stderr}".rstrip())
    return wheels[0]


def _member_path(name: str, prefix: str) -> PurePosixPath | None:
    """A wheel member's path inside the collection folder `prefix`, or None when it lies elsewhere or climbs out."""
    if not name.startswith(prefix) or name.endswith("/"):
        return None
    inside = PurePosixPath(name[len(prefix):])
    if inside.is_absolute() or ".." in inside.parts:
        raise CollectionsError(f"the ansible wheel holds a path outside its collection: {name}")
    return inside


def _checked_against_files_json(folder: Path, name: str) -> None:
    """Every file copied is the collection's own: FILES.json lists it with its sha256, and
    MANIFEST.json holds FILES.json's. (The ansible package leaves out the collections'
    tests and CI files, which FILES.json still lists: those are not looked for.)"""
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    files_json = (folder / "FILES.json").read_bytes()
    if hashlib.sha256(files_json).hexdigest() != manifest["file_manifest_file"]["chksum_sha256"]:
        raise CollectionsError(f"{name}: FILES.json differs from the checksum MANIFEST.json holds for it")
    listed = {entry["name"]: entry["chksum_sha256"] for entry in json.loads(files_json)["files"] if entry["ftype"] == "file"}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_dir() or relative in ("MANIFEST.json", "FILES.json"):
            continue
        if listed.get(relative) != hashlib.sha256(path.read_bytes()).hexdigest():
            raise CollectionsError(f"{name}: {relative} is not the file the collection's FILES.json lists")


def copy_collections(wheel: Path, wanted: dict[str, str], target: Path) -> None:
    """Copy each wanted collection's folder out of the ansible wheel into target/ansible_collections/.

    Each is unpacked beside its final place and checked first (its MANIFEST.json version is the
    pinned one, its files are those of FILES.json), then put in place of any older copy; a
    refused one changes nothing."""
    with zipfile.ZipFile(wheel) as archive:
        members = archive.namelist()
        for name, version in sorted(wanted.items()):
            namespace, collection = name.split(".")
            final = target / "ansible_collections" / namespace / collection
            prefix = f"ansible_collections/{namespace}/{collection}/"
            final.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{collection}-", dir=final.parent))
            try:
                for member in members:
                    if (inside := _member_path(member, prefix)) is not None:
                        path = staging.joinpath(*inside.parts)
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(archive.read(member))
                bundled = manifest_version(staging)
                if bundled is None:
                    raise CollectionsError(f"{wheel.name} bundles no {name}")
                if bundled != version:
                    raise CollectionsError(f"{wheel.name} bundles {name} {bundled}, but {REQUIREMENTS_YML.name} "
                                           f"pins {version}: make the two agree (docs/install.md)")
                _checked_against_files_json(staging, name)
                if final.exists():
                    shutil.rmtree(final)
                staging.rename(final)
            finally:
                shutil.rmtree(staging, ignore_errors=True)


def _ansible_package() -> str | None:
    """The version of the whole `ansible` package where it is installed in this environment."""
    try:
        return importlib.metadata.version("ansible")
    except importlib.metadata.PackageNotFoundError:
        return None


def install(target: Path | None = None, lock: Path = COLLECTIONS_LOCK, wanted: dict[str, str] | None = None,
            pip_options: tuple[str, ...] = (), progress=print) -> None:
    """Install the wanted collections under target (this environment's site-packages) unless they are there."""
    target = target or site_packages()
    wanted = wanted_collections() if wanted is None else wanted
    absent = missing(target, wanted)
    if not absent:
        progress(f"collections {', '.join(f'{name} {version}' for name, version in sorted(wanted.items()))}: "
                 f"installed in {target}")
        return
    if (package := _ansible_package()) is not None and target == site_packages():
        raise CollectionsError(f"the ansible package {package} is installed here and its collections are not the "
                               f"pinned ones ({', '.join(f'{name} {wanted[name]}' for name in sorted(absent))}): "
                               "pip uninstall ansible, then run this again")
    version, hashes = pinned_ansible(lock.read_text())
    with tempfile.TemporaryDirectory(prefix="rackform-ansible-wheel-") as scratch:
        progress(f"downloading ansible {version}'s wheel (pinned by sha256) for {', '.join(sorted(absent))}")
        wheel = download_wheel(version, hashes, Path(scratch), pip_options)
        copy_collections(wheel, {name: wanted[name] for name in absent}, target)
    progress(f"installed {', '.join(f'{name} {wanted[name]}' for name in sorted(absent))} in "
             f"{target / 'ansible_collections'}")


def check(target: Path | None = None, wanted: dict[str, str] | None = None) -> list[str]:
    """What is wrong with the installed collections (empty when each is there at its pinned version)."""
    target = target or site_packages()
    wanted = wanted_collections() if wanted is None else wanted
    return [f"{name} {wanted[name]}: " + (f"{found} is installed" if found else "not installed") + f" in {target}"
            for name, found in sorted(missing(target, wanted).items())]


DEFAULT_COLLECTIONS_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")
"""ansible-core's collection paths when ANSIBLE_COLLECTIONS_PATH sets none."""


def search_roots() -> list[Path]:
    """Where an ansible-playbook of this environment finds collections: the collection paths
    (ANSIBLE_COLLECTIONS_PATH, else ansible-core's defaults) and every folder on sys.path, which
    ansible-core scans too (site-packages, and folders a `.pth` file adds)."""
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    paths = configured.split(os.pathsep) if configured else DEFAULT_COLLECTIONS_PATHS
    roots = [Path(path).expanduser() for path in paths if path] + [Path(path) for path in sys.path if path]
    return list(dict.fromkeys(roots))


def unfindable(wanted: dict[str, str] | None = None, roots: list[Path] | None = None) -> list[str]:
    """The wanted collections ansible-core would not find at their pinned versions in any of
    `roots` (default search_roots()), each with what was found instead (empty when all are found)."""
    wanted = wanted_collections() if wanted is None else wanted
    roots = search_roots() if roots is None else roots
    problems = []
    for name, version in sorted(wanted.items()):
        found = {root: installed_version(root, name) for root in roots}
        if version not in found.values():
            others = [f"{seen} in {root}" for root, seen in found.items() if seen]
            nowhere = "not found in site-packages, sys.path or " + ", ".join(DEFAULT_COLLECTIONS_PATHS)
            problems.append(f"{name} {version}: " + (f"only {', '.join(others)}" if others else nowhere))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackform.external_collections",
                                     description="The Ansible collections rackform's roles use besides their own "
                                                 "(ansible.posix, community.general), from the pinned ansible wheel.")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--install", action="store_true", help="install them into this environment's site-packages")
    action.add_argument("--check", action="store_true", help="exit 1 unless each is installed at its pinned version")
    action.add_argument("--requirement", action="store_true",
                        help="print the ansible releases they may come from (what `make lock` compiles)")
    arguments = parser.parse_args(argv)
    if arguments.requirement:
        print(ANSIBLE_RELEASES)
        return 0
    try:
        if arguments.install:
            install()
            return 0
        problems = check()
    except (CollectionsError, OSError, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"{problem} (python -m rackform.external_collections --install)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
