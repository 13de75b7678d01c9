"""The collection rackform.site written where Ansible finds it, for tests that run a module
or role through Ansible without a rendered project: ANSIBLE_COLLECTIONS_PATH=<returned>."""

from __future__ import annotations

import importlib.util
import sys
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


PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
ONYX_MODULE_UTILS = ("rackform_onyx_lines", "rackform_onyx_session")


def load_plugin(name: str, path: Path):
    """A plugin file imported as module `name` (once: later calls return the same module), for
    tests that call a module's code without Ansible."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_onyx_module(module_file: str, name: str):
    """An Onyx module of plugins/modules, its module_utils imported first under the names the
    module imports them by."""
    for util in ONYX_MODULE_UTILS:
        load_plugin(f"ansible_collections.rackform.site.plugins.module_utils.{util}",
                    PLUGINS / "module_utils" / f"{util}.py")
    return load_plugin(name, PLUGINS / "modules" / module_file)
