"""rackform.external_collections: the two collections the roles use besides rackform.site,
copied out of the hash-pinned `ansible` wheel into site-packages, and nothing else of it.

The wheels here are made by the test (an `ansible` wheel bundling a few small collections);
pip downloads them from a local folder (--no-index --find-links), checking their sha256
against the lock as it does against the real one.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rackform.external_collections import (
    ANSIBLE_RELEASES,
    COLLECTIONS_LOCK,
    CollectionsError,
    check,
    copy_collections,
    install,
    installed_version,
    pinned_ansible,
    wanted_collections,
)

REPO = Path(__file__).resolve().parents[2]
WANTED = {"ansible.posix": "2.2.2", "community.general": "13.5.0"}
BUNDLED = {**WANTED, "ansible.netcommon": "8.7.1"}


def _collection_members(name: str, version: str, tampered: str | None = None) -> dict[str, bytes]:
    """A collection's files as the ansible wheel holds them: MANIFEST.json, FILES.json, a module."""
    namespace, collection = name.split(".")
    module = f"# {name}'s module\n".encode()
    files = {"files": [{"name": ".", "ftype": "dir", "chksum_type": None, "chksum_sha256": None},
                       {"name": "plugins/modules/thing.py", "ftype": "file", "chksum_type": "sha256",
                        "chksum_sha256": hashlib.sha256(module).hexdigest()},
                       # the ansible package leaves tests out; FILES.json still lists them
                       {"name": "tests/unit/test_thing.py", "ftype": "file", "chksum_type": "sha256",
                        "chksum_sha256": "0" * 64}]}
    files_json = json.dumps(files).encode()
    manifest = {"collection_info": {"namespace": namespace, "name": collection, "version": version},
                "file_manifest_file": {"name": "FILES.json", "ftype": "file", "chksum_type": "sha256",
                                       "chksum_sha256": hashlib.sha256(files_json).hexdigest()}}
    prefix = f"ansible_collections/{namespace}/{collection}/"
    return {f"{prefix}MANIFEST.json": json.dumps(manifest).encode(), f"{prefix}FILES.json": files_json,
            f"{prefix}plugins/modules/thing.py": b"# tampered\n" if tampered == name else module}


def make_wheel(folder: Path, bundled: dict[str, str] = BUNDLED, version: str = "14.5.0",
               tampered: str | None = None, extra: dict[str, bytes] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"ansible-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, collection_version in bundled.items():
            for member, content in _collection_members(name, collection_version, tampered).items():
                archive.writestr(member, content)
        for member, content in (extra or {}).items():
            archive.writestr(member, content)
        archive.writestr("ansible_collections/ansible_release.py", "ansible_version = '14.5.0'\n")
        dist_info = f"ansible-{version}.dist-info"
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: ansible\nVersion: {version}\n")
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return wheel


def lock_for(wheel: Path, folder: Path, sha256: str | None = None) -> Path:
    """A lock as pip-compile writes it: the ansible entry with its hash, and another beside it."""
    digest = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = folder / "requirements-collections.lock"
    lock.write_text("#\n# make lock\n#\nansible==14.5.0 \\\n"
                    f"    --hash=sha256:{digest}\n    # via -r -\n"
                    "ansible-core==2.21.5 \\\n    --hash=sha256:" + "1" * 64 + "\n")
    return lock


def test_only_the_wanted_collections_are_copied(tmp_path):
    wheel = make_wheel(tmp_path / "wheels")
    target = tmp_path / "site-packages"

    copy_collections(wheel, WANTED, target)

    assert {name: installed_version(target, name) for name in BUNDLED} == {**WANTED, "ansible.netcommon": None}
    module = target / "ansible_collections/community/general/plugins/modules/thing.py"
    assert module.read_text() == "# community.general's module\n"
    assert not (target / "ansible_collections/ansible_release.py").exists()
    assert sorted(path.name for path in (target / "ansible_collections/ansible").iterdir()) == ["posix"]


def test_a_bundled_version_other_than_the_pin_is_refused_and_the_old_copy_stays(tmp_path):
    target = tmp_path / "site-packages"
    copy_collections(make_wheel(tmp_path / "old", {"ansible.posix": "2.2.1"}), {"ansible.posix": "2.2.1"}, target)

    with pytest.raises(CollectionsError, match=r"bundles ansible.posix 2.2.1, but requirements.yml.j2 pins 2.2.2"):
        copy_collections(make_wheel(tmp_path / "new", {"ansible.posix": "2.2.1"}), {"ansible.posix": "2.2.2"}, target)

    assert installed_version(target, "ansible.posix") == "2.2.1"
    assert sorted(path.name for path in (target / "ansible_collections/ansible").iterdir()) == ["posix"]


def test_a_newer_pin_replaces_the_older_copy(tmp_path):
    target = tmp_path / "site-packages"
    copy_collections(make_wheel(tmp_path / "old", {"ansible.posix": "2.2.1"}), {"ansible.posix": "2.2.1"}, target)
    (target / "ansible_collections/ansible/posix/plugins/modules/gone.py").write_text("# from 2.2.1\n")

    copy_collections(make_wheel(tmp_path / "new"), {"ansible.posix": "2.2.2"}, target)

    assert installed_version(target, "ansible.posix") == "2.2.2"
    assert not (target / "ansible_collections/ansible/posix/plugins/modules/gone.py").exists()


def test_a_file_the_collection_does_not_list_is_refused(tmp_path):
    wheel = make_wheel(tmp_path / "wheels", tampered="community.general")

    with pytest.raises(CollectionsError, match=r"community.general: plugins/modules/thing.py is not the file"):
        copy_collections(wheel, WANTED, tmp_path / "site-packages")

    assert installed_version(tmp_path / "site-packages", "community.general") is None


def test_a_path_climbing_out_of_its_collection_is_refused(tmp_path):
    wheel = make_wheel(tmp_path / "wheels", extra={"ansible_collections/ansible/posix/../../../evil.py": b"x"})

    with pytest.raises(CollectionsError, match="outside its collection"):
        copy_collections(wheel, WANTED, tmp_path / "site-packages")

    assert not list((tmp_path / "site-packages").rglob("evil.py"))


def test_install_has_pip_download_the_wheel_by_its_hash(tmp_path):
    wheels = tmp_path / "wheels"
    wheel = make_wheel(wheels)
    target = tmp_path / "site-packages"
    offline = ("--no-index", "--find-links", str(wheels))
    said = []

    install(target, lock_for(wheel, tmp_path), WANTED, offline, said.append)

    assert check(target, WANTED) == []
    assert said[-1].startswith("installed ansible.posix 2.2.2, community.general 13.5.0 in ")


def test_install_refuses_a_wheel_whose_hash_is_not_the_locks(tmp_path):
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    target = tmp_path / "site-packages"

    with pytest.raises(CollectionsError, match=r"(?s)could not download ansible 14.5.0's wheel.*(?i:hash)"):
        install(target, lock_for(wheels / "ansible-14.5.0-py3-none-any.whl", tmp_path, "0" * 64), WANTED,
                ("--no-index", "--find-links", str(wheels)), lambda line: None)

    assert not (target / "ansible_collections").exists()


def test_install_leaves_collections_at_their_pins_alone(tmp_path):
    target = tmp_path / "site-packages"
    copy_collections(make_wheel(tmp_path / "wheels"), WANTED, target)
    said = []

    install(target, tmp_path / "no-such.lock", WANTED, (), said.append)  # reads no lock, downloads nothing

    assert said == [f"collections ansible.posix 2.2.2, community.general 13.5.0: installed in {target}"]


def test_check_names_what_is_missing_or_of_another_version(tmp_path):
    target = tmp_path / "site-packages"
    copy_collections(make_wheel(tmp_path / "wheels", {"ansible.posix": "2.2.1"}), {"ansible.posix": "2.2.1"}, target)

    assert check(target, WANTED) == [f"ansible.posix 2.2.2: 2.2.1 is installed in {target}",
                                     f"community.general 13.5.0: not installed in {target}"]


def test_the_lock_entry_needs_its_hash():
    with pytest.raises(CollectionsError, match=r"ansible==14.5.0 has no --hash"):
        pinned_ansible("ansible==14.5.0\n    # via -r -\n")
    with pytest.raises(CollectionsError, match="no ansible==VERSION entry"):
        pinned_ansible("ansible-core==2.21.5 \\\n    --hash=sha256:" + "1" * 64 + "\n")


def test_the_shipped_lock_pins_one_ansible_wheel_by_sha256():
    version, hashes = pinned_ansible(COLLECTIONS_LOCK.read_text())

    assert COLLECTIONS_LOCK.resolve() == (REPO / "requirements-collections.lock").resolve()
    assert re.fullmatch(r"1[34]\.\d+\.\d+", version), ANSIBLE_RELEASES
    assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", value) for value in hashes)


def test_the_collections_installed_are_the_ones_requirements_yml_pins():
    """This environment (make install ran `--install`): ansible-core finds each at its pin."""
    assert wanted_collections() == WANTED
    assert check() == []
    listed = subprocess.run([str(Path(sys.executable).with_name("ansible-galaxy")), "collection", "list",
                             "--format", "json"], capture_output=True, text=True, timeout=120)
    found = {name: entry["version"] for path in json.loads(listed.stdout).values() for name, entry in path.items()}
    assert {name: found.get(name) for name in WANTED} == WANTED


def test_the_command_prints_the_releases_make_lock_compiles():
    done = subprocess.run([sys.executable, "-m", "rackform.external_collections", "--requirement"],
                          capture_output=True, text=True, timeout=60)

    assert done.returncode == 0 and done.stdout == f"{ANSIBLE_RELEASES}\n"
