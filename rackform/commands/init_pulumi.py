"""The Pulumi project `rackform init` writes into a site repo: `Pulumi.yaml` and a `stacks/` folder
that points at the program inside the installed rackform. Neither names a path of the machine
that ran `init`, so the repo works wherever it is cloned, with rackform installed there.

- The runtime is the python on PATH (no `virtualenv` option): that of the environment rackform is
  installed in, once it is activated; rackform's own engine (`.venv/bin/pulumi`, docs/pulumi.md)
  puts its environment's bin first on PATH by itself, and its Python language host reads no
  `virtualenv` anyway. A relative `virtualenv` would name a folder of the repo, where rackform is
  not installed, and the dynamic-provider host would look for it in the program folder instead
  (upstream pulumi/pulumi#7061).
- `main: stacks/`: Pulumi runs the program in that folder and starts the dynamic-provider host
  there. `stacks/__main__.py` runs the installed program (`rackform/_assets/stacks/__main__.py`,
  found through `rackform.paths`); `stacks/components/` and `stacks/providers/` are packages whose
  modules are the installed ones, so the classes the state names by reference
  (`providers.playbook.PlaybookProvider`) import in the provider host too. Upgrading rackform
  upgrades the program; nothing of it is copied.
- `stacks/requirements.txt`: what `pulumi install` installs, rackform with its `pulumi` extra,
  unpinned: the installed rackform satisfies it, so pip only adds the extra's packages.
"""

from __future__ import annotations

import textwrap

PROGRAM_DIR = "stacks"
"""The program folder of a site repo, as Pulumi.yaml's `main` names it (relative to the repo)."""
PROGRAM_PACKAGES = {"components": "The program's components: a site, its blocks, switch groups, stages",
                    "providers": "The program's dynamic providers: Playbook, BareMetalNode, SwitchConfig"}
"""The packages of the installed program (rackform/_assets/stacks/) the program imports by name."""

PULUMI_PROJECT = f"""\
# The Pulumi program of the installed rackform, for the sites of this repo (one stack per site:
# Pulumi.<site>.yaml). It runs on the python on PATH: activate the environment rackform is
# installed in first (README.md). {PROGRAM_DIR}/ only points at the program inside that rackform.
# The program reads the sites of this folder (or of $RACKFORM_ROOT, when set).
name: rackform-sites
description: On-premises AI sites from cabled racks to a GPU Kubernetes cluster
runtime:
  name: python
  options:
    toolchain: pip
main: {PROGRAM_DIR}/
"""

PROGRAM_MAIN = textwrap.dedent('''\
    """The Pulumi program of this repo: the one inside the installed rackform (`rackform init`
    wrote this file). It runs the program of the rackform package the running python imports,
    for the sites of this repo (the folder of Pulumi.yaml); upgrading rackform upgrades it."""

    import runpy

    from rackform.paths import ASSETS_DIR

    runpy.run_path(str(ASSETS_DIR / "stacks" / "__main__.py"), run_name="__main__")
    ''')

PROGRAM_PACKAGE = textwrap.dedent('''\
    """{title}.

    Those of the installed rackform (`rackform init` wrote this file): Pulumi imports them by
    this name, in the program and in the dynamic-provider host it starts in this folder."""

    from rackform.paths import ASSETS_DIR

    __path__[:] = [str(ASSETS_DIR / "stacks" / "{name}")]
    ''')

REQUIREMENTS = """\
# What `pulumi install` installs into the python on PATH: rackform with its pulumi extra. Not
# pinned: the installed rackform satisfies it, so pip only adds the extra's packages.
rackform[pulumi]
"""


def pulumi_files() -> dict[str, str]:
    """Path in the site repo -> text: the Pulumi project, its program folder pointing at the
    installed program."""
    files = {"Pulumi.yaml": PULUMI_PROJECT,
             f"{PROGRAM_DIR}/__main__.py": PROGRAM_MAIN,
             f"{PROGRAM_DIR}/requirements.txt": REQUIREMENTS}
    for name, title in PROGRAM_PACKAGES.items():
        files[f"{PROGRAM_DIR}/{name}/__init__.py"] = PROGRAM_PACKAGE.format(name=name, title=title)
    return files
