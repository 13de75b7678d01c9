"""The site's lock across the processes of one `pulumi up`, and the day-2 commands that take it.

A `pulumi up` is several processes: the program holds the site's lock for the whole run and
the engine's provider process runs the stages. Here a process named `pulumi` (the engine's
name, what rackform.run.sitelock looks for among a process's ancestors) plays the engine: its
child holds the lock as the program does, a second child takes it as a stage does, and a
process outside that engine is refused. `rackform maintain` and `rackform node remove` are
refused, changing nothing, while another process holds the site.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rackform.cli import main
from rackform.run.sitelock import SiteLocked, engine_pid, site_lock

HOLD = textwrap.dedent("""
    import subprocess, sys, time
    from rackform.run.sitelock import site_lock
    root, python, probe = sys.argv[1], sys.argv[2], sys.argv[3]
    with site_lock(root, "lab"):
        # a stage of the same run: another process under the same engine
        shared = subprocess.run([python, "-c", probe, root], capture_output=True, text=True, timeout=60)
        print(shared.stdout.strip(), flush=True)
        print("held", flush=True)
        sys.stdin.readline()
    """)
PROBE = textwrap.dedent("""
    import sys
    from rackform.run.sitelock import SiteLocked, site_lock
    try:
        with site_lock(sys.argv[1], "lab"):
            print("taken")
    except SiteLocked as error:
        print(f"refused: {error}")
    """)


@pytest.fixture()
def engine(tmp_path: Path):
    """`pulumi` (the Python interpreter under the engine's name) running HOLD: the program's lock."""
    named = tmp_path / "bin" / "pulumi"
    named.parent.mkdir()
    named.symlink_to(sys.executable)
    root = tmp_path / "repo"
    root.mkdir()
    program = subprocess.Popen([str(named), "-c", HOLD, str(root), sys.executable, PROBE], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        yield program, root
    finally:
        program.stdin.close()
        program.wait(timeout=30)


def test_a_process_under_the_same_engine_shares_the_lock_and_others_are_refused(engine):
    program, root = engine
    assert program.stdout.readline().strip() == "taken"  # the stage's process, under the same engine
    assert program.stdout.readline().strip() == "held"
    with pytest.raises(SiteLocked, match=r"(?s)site lab is being deployed by pid \d+ .*\[pulumi engine \d+\]"):
        with site_lock(root, "lab"):
            pass


def test_outside_any_engine_there_is_no_engine():
    assert engine_pid() is None  # pytest does not run under `pulumi`
    assert engine_pid(os.getppid()) is None


HOLD_PLAIN = textwrap.dedent("""
    import sys
    from rackform.run.sitelock import site_lock
    with site_lock(sys.argv[1], "lab"):
        print("held", flush=True)
        sys.stdin.readline()
    """)


@pytest.fixture()
def held(fleet_root: Path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_PLAIN, str(fleet_root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        yield fleet_root
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_maintain_is_refused_while_the_site_is_held(held: Path, capsys):
    assert main(["maintain", "lab", "--root", str(held), "--batch", "1", "--reboot"]) == 1
    said = capsys.readouterr()
    assert "rackform: maintain lab: site lab is being deployed by pid" in said.err and "nothing was done" in said.err
    assert "batch 1/" not in said.out


def test_node_remove_is_refused_while_the_site_is_held(held: Path, capsys):
    before = (held / "topologies/sites/lab.yaml").read_text()
    assert main(["node", "remove", "lab", "gpu-2", "--root", str(held)]) == 1
    assert "rackform: node remove lab: site lab is being deployed by pid" in capsys.readouterr().err
    assert (held / "topologies/sites/lab.yaml").read_text() == before
