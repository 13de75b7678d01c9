"""`rackform init DIR`: start a site repo of your own, against the installed rackform.

    DIR/
      README.md                  what is where, and the commands
      topologies/defaults.yaml   fleet-wide settings (copied from rackform's)
      topologies/profiles/       the shared profiles (roce, kubernetes)
      topologies/blocks/         your own catalog entries: add block types, or replace a
                                 built-in one by its name (rackform's catalog is built in)
      topologies/sites/SITE.yaml the example site (default: edge), to edit or copy
      topologies/rollout.yaml    one wave with the example site
      inventories/SITE/          its inventory
      Pulumi.yaml, Pulumi.SITE.yaml   the Pulumi program of the installed rackform, one stack
      stacks/                    the program folder: points at the program inside the installed
                                 rackform (rackform.commands.init_pulumi)
      .gitignore                 build/ (rendered projects, locks), never state/

DIR becomes a git repository (`git init`) where git is installed and DIR is not inside a work
tree already: its README says to commit it, state/ included. No file names a path of this
machine: the repo works wherever it is cloned and rackform is installed (Pulumi runs the python
on PATH, and stacks/ finds the program through the installed rackform).
The example is a real site in DIR, even when rackform ships it as a lab: its `lab_only` and
the inventory settings that turn SSH host key checking off are not copied, so checking is on
(`rackform ssh-keys SITE --collect` records the machines' keys).
The version matrix is rackform's own unless DIR/topologies/versions.yaml exists.
Refuses a DIR that already holds topologies/, inventories/, Pulumi.yaml or stacks/ (exit 2);
writes nothing then.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from rackform.process_environment import tool_environment

HELP = "Start a site repo of your own (sites, inventories, shared settings, rollout, Pulumi) for the installed rackform."
EXAMPLE_DEFAULT = "edge"
VARIABLE_FOLDERS = ("group_vars", "host_vars")
GIT_TIMEOUT_S = 60
"""`git init` of an empty folder; only a hung git (a network home, a lock) takes longer."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", type=Path, help="the new repo's folder (created if missing)")
    parser.add_argument("--example", default=EXAMPLE_DEFAULT, metavar="SITE",
                        help=f"the shipped site to start from (default: {EXAMPLE_DEFAULT}; see the README's list)")


def run(args: argparse.Namespace) -> int:
    from rackform.commands.init_pulumi import PROGRAM_DIR
    from rackform.paths import ASSETS_DIR

    target: Path = args.directory
    shipped = ASSETS_DIR / "topologies" / "sites"
    known = sorted(path.stem for path in shipped.glob("*.yaml"))
    if args.example not in known:
        print(f"rackform init: --example {args.example!r}: no such shipped site; choose one of {', '.join(known)}",
              file=sys.stderr)
        return 2
    taken = [name for name in ("topologies", "inventories", "Pulumi.yaml", PROGRAM_DIR) if (target / name).exists()]
    if taken:
        print(f"rackform init: {target} already holds {', '.join(taken)}; nothing was written", file=sys.stderr)
        return 2
    written = write_repo(target, args.example)
    print(f"rackform init: wrote {len(written)} files to {target}")
    print(f"rackform init: {git_init(target)}")
    print(f"next: cd {target} && rackform validate {args.example} && rackform render {args.example}; "
          f"once its machines answer, `rackform ssh-keys {args.example} --collect` records their SSH host keys")
    return 0


def write_repo(target: Path, example: str) -> list[Path]:
    from rackform.commands.init_pulumi import pulumi_files
    from rackform.paths import ASSETS_DIR
    from rackform.site_scaffold import real_site_design, real_site_vars

    topologies = ASSETS_DIR / "topologies"
    written: list[Path] = []

    def copy(source: Path, relative: str) -> None:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination)
        written.append(destination)

    def write(relative: str, text: str) -> None:
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text, encoding="utf-8")
        written.append(destination)

    copy(topologies / "defaults.yaml", "topologies/defaults.yaml")
    for profile in sorted((topologies / "profiles").glob("*.yaml")):
        copy(profile, f"topologies/profiles/{profile.name}")
    # The example becomes a real site of the new repo: a lab's `lab_only` and the inventory
    # settings that turn host key checking off are left out (rackform.site_scaffold).
    site_file = topologies / "sites" / f"{example}.yaml"
    write(f"topologies/sites/{example}.yaml", real_site_design(site_file.read_text(encoding="utf-8"), str(site_file)))
    platform = topologies / "platform" / f"{example}.yaml"
    if platform.is_file():
        copy(platform, f"topologies/platform/{example}.yaml")
    inventory = ASSETS_DIR / "inventories" / example
    for path in sorted(inventory.rglob("*")):
        if not path.is_file():
            continue
        relative = f"inventories/{example}/{path.relative_to(inventory).as_posix()}"
        if path.relative_to(inventory).parts[0] in VARIABLE_FOLDERS:
            text = path.read_text(encoding="utf-8")
            write(relative, real_site_vars(text, str(path), example, f"rackform's example {example}"))
        else:
            copy(path, relative)
    write("topologies/blocks/README.txt", BLOCKS_README)
    write("topologies/rollout.yaml", ROLLOUT.format(site=example))
    for relative, text in pulumi_files().items():
        write(relative, text)
    write(f"Pulumi.{example}.yaml", f"# Stack for the '{example}' site (topologies/sites/{example}.yaml).\n"
                                    f"config:\n  rackform:site: {example}\n")
    write(".gitignore", "# rendered projects, locks and rollout progress; state/ is committed\nbuild/\n"
                        "# Python's caches of the program folder's modules (stacks/)\n__pycache__/\n")
    write("README.md", README.format(site=example))
    return written


def git_init(target: Path) -> str:
    """Make `target` a git repository, unless git is missing or `target` is inside a work tree
    already (a folder of an existing repo); what was done, as a line to show."""
    git = shutil.which("git")
    if git is None:
        return "git is not installed: no git repository was made; make one to commit the repo (README.md)"
    env = tool_environment("git")
    inside = subprocess.run([git, "-C", str(target), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                            timeout=GIT_TIMEOUT_S, check=False, env=env)
    if inside.returncode == 0:
        return f"{target} is inside the git repository {inside.stdout.strip()}: no new one was made"
    made = subprocess.run([git, "init", "-q", str(target)], capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
                          check=False, env=env)
    if made.returncode != 0:
        return f"git init {target} failed ({made.stderr.strip() or f'exit {made.returncode}'}): make the repository yourself"
    return f"made {target} a git repository: commit it, state/ included (`git add -A && git commit`)"


BLOCKS_README = """\
# Your own building blocks

rackform's catalog is built in (`rackform/_assets/topologies/blocks/` of the installed
package). A `<name>.yaml` here adds a block type, or replaces the built-in block of the same
name; the format is the built-in files' (docs/site-format.md in the rackform repo).
"""

ROLLOUT = """\
# The order in which this repo's sites roll out (`rackform rollout`).
waves:
  - name: first
    sites: [{site}]
gates: [verify, fabric-check]
routed: []
"""

README = textwrap.dedent("""\
    # Sites

    A site repo for rackform: the designs and inventories of our sites, the shared settings,
    the order of rollouts, and `state/` (what was applied: commit it).

    Every command runs from this folder, with `rackform` (and `pulumi`) on PATH: activate the
    environment rackform is installed in first (`source <its folder>/bin/activate`).

    ```sh
    rackform validate --all            # every site, and the checks across sites
    rackform render {site}               # build/{site}/: the standalone Ansible project
    rackform plan --all                # what a deploy would run now
    rackform deploy {site}               # or: rackform rollout
    rackform new-site NAME --from {site} --management-prefix ... --oob-prefix ...
    ```

    - `topologies/sites/`, `inventories/`: one design and one inventory per site
    - `topologies/defaults.yaml`, `topologies/profiles/`: settings every site, or every site
      that `extends:` a profile, shares
    - `topologies/blocks/`: building blocks of our own (rackform's catalog is built in)
    - `topologies/rollout.yaml`: waves, gates, sites routed to each other
    - `Pulumi.yaml`, `stacks/`: the Pulumi program of the installed rackform, one stack per
      site (`Pulumi.{site}.yaml`). Pulumi runs it on the python on PATH, which needs the
      `rackform[pulumi]` extra (`pulumi install` adds it); `stacks/` only points at the program
      inside the installed rackform, so nothing here names a path of any machine:

      ```sh
      pulumi login --local                     # state in ~/.pulumi; teams: rackform's docs/pulumi.md
      pulumi stack init {site}                 # once per site and backend
      pulumi preview -s {site}
      pulumi up -s {site}
      ```

    rackform itself is the installed package: `pip show rackform` says which and where.
    """)
