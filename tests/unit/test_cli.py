"""The `rackform` command line: exit codes, output a person reads, JSON for machines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rackform.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED_SITES = sorted(p.stem for p in (REPO / "topologies/sites").glob("*.yaml"))


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    return tmp_path


@pytest.mark.parametrize("site", SHIPPED_SITES)
def test_every_shipped_site_validates(site: str, capsys):
    assert main(["validate", site, "--root", str(REPO)]) == 0
    assert f"{site}: valid" in capsys.readouterr().out


def test_validate_prints_rack_power_and_space(capsys):
    main(["validate", "lab", "--root", str(REPO)])
    out = capsys.readouterr().out
    assert "lab: 6 hosts (16 GPUs), 4 switches, 14 cables, 1 rack(s)" in out
    assert "rack r1:" in out and " U, " in out and "kW" in out


def test_validate_json_is_machine_readable(capsys):
    assert main(["validate", "lab", "--json", "--root", str(REPO)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["errors"] == []
    assert data["summary"]["racks"][0]["rack"] == "r1"


def test_bad_input_json_lists_errors_and_exits_2(root: Path, capsys):
    path = root / "topologies/sites/lab.yaml"
    path.write_text(path.read_text().replace("power_basis: max", "power_basis: peak"))
    assert main(["validate", "lab", "--json", "--root", str(root)]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert data["errors"][0]["file"] == "topologies/sites/lab.yaml"
    assert data["errors"][0]["key"] == "power_basis"


def test_unknown_site_exits_2_without_traceback(capsys):
    assert main(["validate", "atlantis", "--root", str(REPO)]) == 2
    err = capsys.readouterr().err
    assert "no such site 'atlantis'" in err and "Traceback" not in err


def test_console_script_help_lists_commands():
    result = subprocess.run(
        [sys.executable, "-m", "rackform.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("validate", "render", "diagram"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["validate", "render", "diagram"])
def test_each_command_has_help(command: str):
    result = subprocess.run(
        [sys.executable, "-m", "rackform.cli", command, "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0 and "SITE" in result.stdout


def test_render_writes_project_and_second_render_changes_nothing(root: Path, capsys):
    assert main(["render", "lab", "--root", str(root)]) == 0
    assert (root / "build/lab/site.yml").is_file()
    capsys.readouterr()
    assert main(["render", "lab", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "(0 added, 0 changed, 0 removed)" in out and "already up to date" in out


def test_diagram_writes_one_svg_per_rack(root: Path):
    assert main(["diagram", "lab", "--root", str(root)]) == 0
    assert [p.name for p in (root / "build/lab/diagrams").glob("*.svg")] == ["r1.svg"]


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`rackform validate lab --show-origin | head -0`: the reader has closed the pipe before
    rackform writes; rackform stops quietly with the shell's SIGPIPE status, no traceback."""
    command = [str(Path(sys.executable).with_name("rackform")), "validate", "lab", "--show-origin", "--root", str(REPO)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
