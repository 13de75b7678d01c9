"""`rackform fabric apply`: exit codes and messages when there is nothing it can push.
(Pushes themselves: tests/unit/test_fabric_onyx.py and tests/lab/test_fabric_lab.py.)"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from rackform.fabric import apply_cli

REPO = Path(__file__).resolve().parents[2]


def apply(capsys, *argv: str) -> tuple[int, str, str]:
    code = apply_cli.main(["lab", "--root", str(REPO), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unknown_switch_is_bad_input(capsys):
    code, _, err = apply(capsys, "--switch", "leaf-9")
    assert (code, err.strip()) == (2, "rackform: site lab has no managed switch leaf-9; "
                                      "managed switches: leaf-1, leaf-2, spine-1")


def test_malformed_endpoint_is_bad_input(capsys):
    code, _, err = apply(capsys, "--endpoint", "leaf-1")
    assert (code, err.strip()) == (2, "rackform: --endpoint 'leaf-1': expected SWITCH=HOST[:PORT]")


def test_design_error_is_bad_input_with_file_and_line(capsys, tmp_path):
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    profile = tmp_path / "topologies" / "profiles" / "roce.yaml"  # the lab's fabric settings
    profile.write_text(profile.read_text().replace("pfc_priorities: [3]\n    roce_tos", "pfc_priorities: [4]\n    roce_tos"))
    code = apply_cli.main(["lab", "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "topologies/profiles/roce.yaml:" in err


def test_unreachable_switch_fails_the_run_naming_it(capsys):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    code, _, err = apply(capsys, "--switch", "leaf-1", "--endpoint", f"leaf-1=127.0.0.1:{port}", "--dry-run")
    assert code == 1
    assert f"rackform: leaf-1: cannot log in to 127.0.0.1:{port} as root" in err
    assert "rackform: lab: 1 switch(es) not configured: leaf-1" in err


@pytest.mark.parametrize("option", ["--dry-run", "--private-key", "--user", "--endpoint", "--switch"])
def test_help_names_the_option(option, capsys):
    with pytest.raises(SystemExit):
        apply_cli.main(["--help"])
    assert option in capsys.readouterr().out
