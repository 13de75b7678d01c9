"""The Onyx CLI emulator (a rackform stand-in, not Onyx), driven the way the fabric stage
drives a switch: netmiko's unchanged `mellanox_mlnxos` driver over SSH.

One netmiko login serves the module (each login costs netmiko ~2.5 s of settling);
tests that need a plain SSH client (paging left on, keys, dropped sessions) use asyncssh.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import asyncssh
import pytest
from netmiko import ConnectHandler
from netmiko.exceptions import NetmikoAuthenticationException

from rackform.lab import LabError
from rackform.lab.onyx_emulator import (
    FAULT_MESSAGE,
    PAGER_MARKER,
    EmulatedSwitch,
    Mode,
    OnyxCliSession,
    OnyxEmulator,
)

PASSWORD = "lab-only-password"
PORT_COUNT = 8
HOSTNAME = "leaf-emu"
# The Onyx block of docs/domain.md ("Onyx: the explicit DCB form") for port 1/1.
ROCE_LINES = [
    "roce lossless",
    "dcb priority-flow-control enable force",
    "dcb priority-flow-control priority 3 enable",
    "interface ethernet 1/1 dcb priority-flow-control mode on force",
    "interface ethernet 1/1 qos trust L3",
    "interface ethernet 1/1 traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "interface ethernet 1/1 pfc-wd",
    "interface ethernet 1/1 mtu 9216 force",
]
USER_PROMPT = f"{HOSTNAME} [standalone: master] > "
ENABLE_PROMPT = f"{HOSTNAME} [standalone: master] # "


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with OnyxEmulator(HOSTNAME, PORT_COUNT, tmp_path_factory.mktemp("onyx"), password=PASSWORD) as running:
        yield running


@pytest.fixture(scope="module")
def switch(emulator):
    """A netmiko session in enable mode."""
    connection = ConnectHandler(device_type="mellanox_mlnxos", host="127.0.0.1", port=emulator.port,
                                username="admin", password=PASSWORD)
    connection.enable()
    yield connection
    connection.disconnect()


@pytest.fixture(scope="module")
def roce_push(switch):
    """The RoCE lines pushed and saved; returns what netmiko saw while pushing."""
    output = switch.send_config_set(ROCE_LINES)
    switch.save_config()
    return output


@pytest.fixture
def fresh_emulator(tmp_path):
    with OnyxEmulator(HOSTNAME, PORT_COUNT, tmp_path / "state", password=PASSWORD) as running:
        yield running


async def _read_until(stream: asyncssh.SSHReader, marker: str | None) -> str:
    """Read until `marker` arrives (None: until the server closes the session)."""
    received = ""
    while marker is None or marker not in received:
        chunk = await asyncio.wait_for(stream.read(4096), timeout=5)
        if not chunk:
            break
        received += chunk
    return received


def converse(port: int, steps: list[tuple[str, str | None]], **auth) -> list[str]:
    """Log in with a plain SSH client; for each (text to send, text to wait for) return what came back."""
    async def run() -> list[str]:
        auth.setdefault("password", PASSWORD)
        auth.setdefault("client_keys", None)
        async with asyncssh.connect("127.0.0.1", port, username="admin", known_hosts=None,
                                    agent_path=None, **auth) as connection:
            process = await connection.create_process(term_type="vt100")
            replies = []
            for send, wait_for in steps:
                process.stdin.write(send)
                replies.append(await _read_until(process.stdout, wait_for))
            return replies
    return asyncio.run(run())


# --- netmiko, as the fabric stage uses it --------------------------------------------------

def test_show_version_says_it_is_an_emulator(switch):
    output = switch.send_command("show version")
    assert "Product release:" in output
    assert "not NVIDIA Onyx" in output


def test_login_lands_in_user_mode_with_an_onyx_prompt(emulator):
    (greeting,) = converse(emulator.port, [("", USER_PROMPT)])
    assert greeting.endswith(USER_PROMPT)


def test_prompts_follow_enable_and_config_modes(switch):
    enable_prompt = switch.find_prompt()
    switch.config_mode()
    config_prompt = switch.find_prompt()
    switch.exit_config_mode()
    assert (enable_prompt, config_prompt) == (f"{HOSTNAME} [standalone: master] #",
                                              f"{HOSTNAME} [standalone: master] (config) #")


def test_roce_push_is_accepted_without_errors(roce_push):
    assert "%" not in roce_push


@pytest.mark.parametrize("line", ROCE_LINES)
def test_running_config_shows_each_pushed_line(switch, roce_push, line):
    assert f"   {line}\n" in switch.send_command("show running-config") + "\n"


@pytest.mark.parametrize("line", ROCE_LINES)
def test_saved_config_file_holds_each_pushed_line(emulator, roce_push, line):
    assert f"   {line}\n" in emulator.saved_config_path.read_text()


def test_running_config_file_matches_show_running_config(switch, emulator, roce_push):
    shown = switch.send_command("show running-config")
    assert emulator.running_config_path.read_text().strip() == shown.strip()


def test_resending_the_same_config_leaves_running_config_unchanged(switch, emulator, roce_push):
    before = emulator.running_config()
    switch.send_config_set(ROCE_LINES)
    assert emulator.running_config() == before


def test_unknown_command_is_unrecognized(switch):
    output = switch.send_command("frobnicate the fabric")
    assert output.startswith('% Unrecognized command "frobnicate".')


@pytest.mark.parametrize("ports", ["1/9", "1/0", "2/1", "1/7-1/9"])
def test_port_the_switch_lacks_is_rejected(switch, emulator, ports):
    output = switch.send_config_set([f"interface ethernet {ports} description ghost"])
    assert f"% Interface ethernet {ports} does not exist" in output
    assert "ghost" not in emulator.running_config()


def test_wrong_password_is_rejected(emulator):
    with pytest.raises(NetmikoAuthenticationException):
        ConnectHandler(device_type="mellanox_mlnxos", host="127.0.0.1", port=emulator.port,
                       username="admin", password="not-the-password")


def test_netmiko_session_is_not_paged(switch):
    output = switch.send_command(f"show interfaces ethernet 1/1-1/{PORT_COUNT}")
    assert "--More--" not in output
    assert output.count("Admin state") == PORT_COUNT


def test_interface_mode_lines_land_in_running_config(switch, emulator):
    output = switch.send_config_set(["interface ethernet 1/3", "mtu 9216 force", "qos trust L3", "exit"])
    assert "(config interface ethernet 1/3) #" in output
    assert {"interface ethernet 1/3 mtu 9216 force", "interface ethernet 1/3 qos trust L3"} <= {
        line.strip() for line in emulator.running_config().splitlines()}


def test_no_form_removes_the_setting(switch, emulator):
    switch.send_config_set(["interface ethernet 1/4 pfc-wd", "no interface ethernet 1/4 pfc-wd"])
    assert "interface ethernet 1/4 pfc-wd" not in emulator.running_config()


def test_fault_knob_refuses_lines_after_the_first_n(switch, emulator):
    lines = ["interface ethernet 1/5 mtu 9216 force", "interface ethernet 1/5 pfc-wd",
             "interface ethernet 1/5 qos trust L3"]
    emulator.inject_config_failure(after_lines=2)
    try:
        output = switch.send_config_set(lines)
    finally:
        emulator.inject_config_failure(None)
    running = emulator.running_config()
    assert FAULT_MESSAGE in output
    assert [line in running for line in lines] == [True, True, False]


# --- plain SSH client: paging, keys, dropped sessions ----------------------------------------

def test_output_is_paged_until_paging_is_disabled(emulator):
    paged, after_quit = converse(emulator.port, [
        (f"show interfaces ethernet 1/1-1/{PORT_COUNT}\n", PAGER_MARKER),
        ("q", USER_PROMPT),
    ])
    assert "Eth1/1:" in paged and f"Eth1/{PORT_COUNT}:" not in paged
    assert f"Eth1/{PORT_COUNT}:" not in after_quit


def test_fault_knob_in_disconnect_mode_drops_the_session(fresh_emulator):
    fresh_emulator.inject_config_failure(after_lines=1, mode="disconnect")
    with pytest.raises(asyncssh.ConnectionLost):
        converse(fresh_emulator.port, [("enable\nconfigure terminal\nlldp\nroce lossless\n", None)])
    running = fresh_emulator.running_config()
    assert "   lldp\n" in running and "roce" not in running


@pytest.fixture
def client_key(tmp_path):
    """A client key whose public half is the emulator's only authorized key."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = tmp_path / "authorized_keys"
    authorized.write_bytes(key.export_public_key())
    with OnyxEmulator(HOSTNAME, PORT_COUNT, tmp_path / "state", authorized_keys=authorized) as running:
        yield running, key


def test_authorized_key_logs_in(client_key):
    emulator, key = client_key
    (greeting,) = converse(emulator.port, [("", USER_PROMPT)], password=None, client_keys=[key])
    assert greeting.endswith(USER_PROMPT)


def test_unknown_key_is_rejected(client_key):
    emulator, _ = client_key
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        converse(emulator.port, [("", USER_PROMPT)], password=None, client_keys=[stranger])


# --- state files: boot from the saved config -------------------------------------------------

def test_start_replays_the_saved_config(emulator, roce_push, tmp_path):
    saved = emulator.saved_config_path.read_text()
    (tmp_path / "saved-config.txt").write_text(saved)
    with OnyxEmulator("other-name", PORT_COUNT, tmp_path, password=PASSWORD) as rebooted:
        assert rebooted.running_config() == saved


def test_bad_saved_config_names_file_and_line(tmp_path):
    saved = tmp_path / "saved-config.txt"
    saved.write_text("##\n   lldp\n   interface ethernet 1/1 mtu 99999 force\n")
    with pytest.raises(LabError, match=rf"{saved}:3: % MTU 99999 is out of range"):
        OnyxEmulator(HOSTNAME, PORT_COUNT, tmp_path, password=PASSWORD).start()


def test_endpoint_file_names_the_listening_port(emulator):
    endpoint = json.loads((emulator.state_dir / "endpoint.json").read_text())
    assert (endpoint["host"], endpoint["port"]) == ("127.0.0.1", emulator.port)


def test_detached_entry_point_serves_until_sigterm(tmp_path):
    env = {**os.environ, "ONYX_EMULATOR_PASSWORD": PASSWORD}
    process = subprocess.Popen([sys.executable, "-m", "rackform.lab.onyx_emulator", "--state-dir", str(tmp_path),
                                "--hostname", HOSTNAME, "--ports", "4"], env=env, stderr=subprocess.PIPE)
    try:
        endpoint = tmp_path / "endpoint.json"
        deadline = time.monotonic() + 10
        while not endpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (greeting,) = converse(json.loads(endpoint.read_text())["port"], [("", USER_PROMPT)])
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=10)
    assert greeting.endswith(USER_PROMPT) and returncode == 0


# --- the CLI without SSH: abbreviations and modes -----------------------------------------------

@pytest.fixture
def enabled_session(tmp_path) -> OnyxCliSession:
    switch = EmulatedSwitch(HOSTNAME, PORT_COUNT, tmp_path)
    switch.boot()
    return OnyxCliSession(switch, mode=Mode.ENABLE)


@pytest.mark.parametrize(("line", "mode"), [("conf t", Mode.CONFIG), ("disable", Mode.USER), ("ena", Mode.ENABLE)])
def test_abbreviated_keywords_change_mode(enabled_session, line, mode):
    enabled_session.execute(line)
    assert enabled_session.mode is mode


def test_ambiguous_abbreviation_is_refused(enabled_session):
    assert enabled_session.execute("show r").output == '% Ambiguous command "r".'


def test_user_mode_cannot_configure(enabled_session):
    enabled_session.execute("disable")
    assert enabled_session.execute("configure terminal").output.startswith('% Unrecognized command "configure".')


def test_configuration_lines_need_config_mode(enabled_session):
    assert enabled_session.execute("lldp").output.startswith('% Unrecognized command "lldp".')


@pytest.mark.parametrize("line", [
    "interface ethernet 1/1 mtu 1000 force",
    "interface ethernet 1/1 traffic-class 8 congestion-control ecn minimum-absolute 150 maximum-absolute 1500",
    "interface ethernet 1/1 traffic-class 3 congestion-control ecn minimum-absolute 1500 maximum-absolute 150",
    "dcb priority-flow-control priority 9 enable",
    "hostname bad_name!",
])
def test_out_of_range_values_are_refused(enabled_session, line):
    enabled_session.execute("configure terminal")
    before = enabled_session.switch.running_config_text()
    output = enabled_session.execute(line).output
    assert output.startswith("% ") and enabled_session.switch.running_config_text() == before
