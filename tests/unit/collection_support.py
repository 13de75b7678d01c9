"""The collection rackform.site written where Ansible finds it, for tests that run a module
or role through Ansible without a rendered project: ANSIBLE_COLLECTIONS_PATH=<returned>."""

from __future__ import annotations

from pathlib import Path

from rackform.collection import PROJECT_DIR
from rackform.render.collection_files import collection_files


def install_collection(root: Path) -> Path:
    """Write the collection under root/ansible_collections/rackform/site; return root."""
    for path, content in collection_files().items():
        target = root / path.removeprefix("collections/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return root


ROLES_IN_PROJECT = f"{PROJECT_DIR}/roles/"
"""Where a rendered project's files dict keys the collection's roles."""
