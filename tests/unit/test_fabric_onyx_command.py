"""Ad-hoc commands against an Onyx switch: the collection's read-only module
`rackform.site.onyx_command`, run on the controller as the inventory's local connection for
the `onyx` group says, against the Onyx CLI emulator (a rackform stand-in, not Onyx)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from collection_support import load_onyx_module
from rackform.lab.onyx_emulator import OnyxEmulator

PASSWORD = "lab-only-password-c0de"


def onyx_command_module():
    return load_onyx_module("onyx_command.py", "rackform_onyx_command_module")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with OnyxEmulator("leaf-7", 8, tmp_path_factory.mktemp("onyx"), password=PASSWORD) as running:
        yield running


def run(emulator: OnyxEmulator, commands: list[str], monkeypatch) -> tuple[dict, str]:
    # The password only from the controller's environment, as the onyx_switch role takes it.
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD", PASSWORD)
    args = {"host": "127.0.0.1", "port": emulator.port, "username": "admin", "commands": commands,
            "known_hosts": str(emulator.scanned_known_hosts()), "timeout_s": 10}
    printed = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(printed), pytest.raises(SystemExit):
        onyx_command_module().main()
    return json.loads(printed.getvalue()), printed.getvalue()


def test_show_commands_return_what_the_switch_prints(emulator, monkeypatch):
    result, _ = run(emulator, ["show version", "show running-config"], monkeypatch)
    assert result["changed"] is False and not result.get("failed")
    assert "Host ID:           leaf-7" in result["stdout"][0]
    assert "hostname leaf-7" in result["stdout_lines"][1][-1]


def test_configuration_commands_are_refused_before_login(emulator, monkeypatch):
    result, _ = run(emulator, ["show version", "interface ethernet 1/1 shutdown"], monkeypatch)
    assert result["failed"] and "only show commands" in result["msg"]
    assert "shutdown" not in emulator.running_config()


def test_password_never_appears_in_the_result(emulator, monkeypatch):
    _, printed = run(emulator, ["show version"], monkeypatch)
    assert PASSWORD not in printed
