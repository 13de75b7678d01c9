"""A stand-in render for tests of the Pulumi provider: every Python process that imports
rackform.render.project gets `render_files` replaced by one returning the given files.

The Playbook provider runs each stage in a fresh process (rackform.run.stage_process), so a
monkeypatch in the test's own process does not reach the run. A `sitecustomize` on PYTHONPATH
does: it installs an import hook that patches the module as it is loaded, in the provider's
process and in the stage's, whenever the folder holding it is on PYTHONPATH. The files lie
beside it as JSON (PROJECT_FILE): the stage process gets only the allowed part of the
provider's environment (rackform.process_environment: PYTHONPATH is in it, a test's own
variable is not).
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path

PROJECT_FILE = "stand-in-project.json"

SITECUSTOMIZE = textwrap.dedent(f"""\
    import json, os, sys

    PROJECT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{PROJECT_FILE}")

    class StandInRender:
        def find_spec(self, name, path=None, target=None):
            if name != "rackform.render.project":
                return None
            sys.meta_path.remove(self)
            import importlib.util
            spec = importlib.util.find_spec(name)
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                with open(PROJECT, encoding="utf-8") as handle:
                    files = {{p: text.encode() for p, text in json.load(handle).items()}}
                module.render_files = lambda site: dict(files)

            spec.loader.exec_module = exec_module
            return spec

    if os.path.exists(PROJECT):
        sys.meta_path.insert(0, StandInRender())
    """)


def stand_in_environment(folder: Path, files: Mapping[str, str | bytes]) -> dict[str, str]:
    """The variables a process needs to render `files` instead of the site (written under `folder`)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    texts = {path: text.decode() if isinstance(text, bytes) else text for path, text in files.items()}
    (folder / PROJECT_FILE).write_text(json.dumps(texts))
    inherited = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *([inherited] if inherited else [])])}
