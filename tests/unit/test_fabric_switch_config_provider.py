"""The `SwitchConfig` dynamic provider, called directly (Pulumi's mocks never call
providers): check/diff/read/delete, the dill round trip the engine does (in this process
and in a fresh one started in the program directory), and create/update/read against
the Onyx CLI emulator (a rackform stand-in, not Onyx) on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dill
import pytest

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.switch_config import SwitchConfig, SwitchConfigProvider, desired_configs  # noqa: E402
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime._serialization import _deserialize, _serialize  # noqa: E402
from test_fabric_onyx import onyx_lab_root  # noqa: E402

import rackform.fabric.context  # noqa: E402
from rackform.fabric.context import Credentials  # noqa: E402
from rackform.lab.onyx_emulator import OnyxEmulator  # noqa: E402
from rackform.model.loader import load_site  # noqa: E402

PASSWORD = "lab-only-password"
CONFIG = {"running-config": "hostname leaf-2\nlldp\n"}
PROPS = {"site": "lab", "switch": "leaf-2", "os": "onyx", "root": "/srv/rackform", "config": CONFIG}


# ---------------------------------------------------------------- check, diff, delete


def test_check_accepts_a_supported_switch_os():
    assert SwitchConfigProvider().check({}, PROPS).failures == []


def test_check_refuses_an_unknown_switch_os_listing_the_supported_ones():
    failures = SwitchConfigProvider().check({}, PROPS | {"os": "eos"}).failures
    assert [(f.property, f.reason) for f in failures] == [
        ("os", "no configuration driver for switch OS 'eos'; supported: cumulus, onyx")]


def test_check_requires_every_input():
    failures = SwitchConfigProvider().check({}, {"site": "lab"}).failures
    assert sorted(f.property for f in failures) == ["config", "os", "root", "switch"]


def test_diff_same_config_is_no_change():
    assert SwitchConfigProvider().diff("lab/leaf-2", PROPS | {"applied_changes": 3}, PROPS).changes is False


def test_diff_new_config_is_an_update_not_a_replacement():
    news = PROPS | {"config": {"running-config": "hostname leaf-2\n"}}
    result = SwitchConfigProvider().diff("lab/leaf-2", PROPS, news)
    assert (result.changes, result.replaces) == (True, [])


def test_diff_ignores_where_the_repo_sits():
    assert SwitchConfigProvider().diff("lab/leaf-2", PROPS, PROPS | {"root": "/home/ops/rackform"}).changes is False


def test_delete_leaves_the_switch_configured():
    assert SwitchConfigProvider().delete("lab/leaf-2", PROPS) is None


def test_resource_type_names_the_module():
    assert SwitchConfig._resource_type_name == "dynamic/rackform:SwitchConfig"


def test_desired_configs_cover_every_managed_switch_with_its_os():
    configs = desired_configs(load_site("lab", REPO))
    assert {name: os_name for name, (os_name, _) in configs.items()} == {
        "leaf-1": "cumulus", "leaf-2": "cumulus", "spine-1": "cumulus"}


# ---------------------------------------------------------------- engine serialization


def engine_serialize(provider: SwitchConfigProvider) -> str:
    serialized, _contains_secrets = _serialize(True, serialize_provider, provider)
    return serialized


def engine_deserialize(serialized: str) -> SwitchConfigProvider:
    provider = _deserialize(lambda: dill.loads(base64.b64decode(serialized)))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    return provider


def test_provider_is_pickled_by_reference_not_by_value():
    payload = base64.b64decode(engine_serialize(SwitchConfigProvider()))
    assert b"providers.switch_config" in payload and b"SwitchConfigProvider" in payload
    assert len(payload) < 200


def test_round_trip_then_diff_in_this_process():
    provider = engine_deserialize(engine_serialize(SwitchConfigProvider()))
    assert provider.diff("lab/leaf-2", PROPS, PROPS | {"config": {"running-config": ""}}).changes is True


PROVIDER_PROCESS = textwrap.dedent("""
    import base64, json, sys
    import dill
    from pulumi.dynamic import Config, ConfigureRequest
    from pulumi.runtime._serialization import _deserialize
    provider = _deserialize(lambda: dill.loads(base64.b64decode(sys.argv[1])))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    olds, news = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    result = provider.diff("lab/leaf-2", olds, news)
    print(json.dumps({"changes": result.changes, "replaces": result.replaces,
                      "loaded": sorted(m for m in sys.modules if m.startswith(("rackform", "netmiko")))}))
    """)


def test_round_trip_then_diff_in_a_fresh_provider_process():
    news = PROPS | {"config": {"running-config": "hostname leaf-2\n"}}
    completed = subprocess.run(
        [sys.executable, "-c", PROVIDER_PROCESS, engine_serialize(SwitchConfigProvider()), json.dumps(PROPS),
         json.dumps(news)],
        cwd=STACKS, capture_output=True, text=True, timeout=60, check=True,
    )
    assert json.loads(completed.stdout) == {"changes": True, "replaces": [], "loaded": []}


# ---------------------------------------------------------------- create, update, read on the emulator


@pytest.fixture(scope="module")
def onyx_root(tmp_path_factory) -> Path:
    return onyx_lab_root(tmp_path_factory.mktemp("onyx-lab"))


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    with OnyxEmulator("leaf-2", 32, tmp_path_factory.mktemp("onyx-state"), username="root",
                      password=PASSWORD) as running:
        yield running


@pytest.fixture(scope="module")
def props(onyx_root, emulator) -> dict:
    """What the program would give the resource for leaf-2, reaching the emulator."""
    _, config = desired_configs(load_site("lab", onyx_root))["leaf-2"]
    return {"site": "lab", "switch": "leaf-2", "os": "onyx", "root": str(onyx_root), "config": config,
            "endpoint": f"127.0.0.1:{emulator.port}"}


@pytest.fixture(scope="module")
def credentials():
    """The switch password from the environment, as the provider process gets it; no lab key."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RACKFORM_SWITCH_PASSWORD", PASSWORD)
        patch.delenv("ANSIBLE_PRIVATE_KEY_FILE", raising=False)
        patch.setattr(rackform.fabric.context, "lab_credentials", lambda site: Credentials())
        yield


@pytest.fixture(scope="module")
def created(props, credentials):
    return SwitchConfigProvider().create(props)


@pytest.fixture(scope="module")
def updated(created, props, credentials):
    return SwitchConfigProvider().update(created.id, created.outs, props)


def test_create_pushes_the_configuration(created, emulator):
    assert created.id == "lab/leaf-2" and created.outs["applied_changes"] > 0
    assert "   interface ethernet 1/5 qos trust L3\n" in emulator.saved_config_path.read_text()


def test_create_keeps_the_diff_it_showed(created):
    assert "+ dcb priority-flow-control priority 3 enable" in created.outs["diff"].splitlines()


def test_update_with_the_same_config_pushes_nothing(updated):
    assert (updated.outs["applied_changes"], updated.outs["diff"]) == (0, "")


def test_read_after_create_shows_no_drift(updated, props, credentials):
    read = SwitchConfigProvider().read("lab/leaf-2", updated.outs)
    assert SwitchConfigProvider().diff("lab/leaf-2", read.outs, props).changes is False


def test_read_shows_drift_made_by_hand(updated, props, emulator, credentials):
    from netmiko import ConnectHandler

    hand = ConnectHandler(device_type="mellanox_mlnxos", host="127.0.0.1", port=emulator.port, username="root",
                          password=PASSWORD)
    try:
        hand.enable()
        hand.send_config_set(["dcb priority-flow-control priority 4 enable"])
    finally:
        hand.disconnect()
    read = SwitchConfigProvider().read("lab/leaf-2", updated.outs)
    assert "dcb priority-flow-control priority 4 enable" in read.outs["config"]["running-config"]
    assert SwitchConfigProvider().diff("lab/leaf-2", read.outs, props).changes is True
