"""The `BareMetalNode` dynamic provider, called directly against the fake BMC (Pulumi's mocks
never call providers), and through the dill round trip the engine does.

The same provider against the lab's ipmi_sim BMCs is in tests/lab/test_ipmi_fleet.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import dill
import pytest

import rackform

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:  # Pulumi runs the program (and its providers) from stacks/
    sys.path.insert(0, str(STACKS))

from providers import baremetal  # noqa: E402
from providers.baremetal import BareMetalError, BareMetalNode, BareMetalProvider  # noqa: E402
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime._serialization import _deserialize, _serialize  # noqa: E402

from rackform.ipmi.credentials import Credentials  # noqa: E402
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig  # noqa: E402
from rackform.ipmi.fleet import BmcLocks, Fleet, RetryPolicy  # noqa: E402
from rackform.ipmi.session import Timeouts  # noqa: E402

SECRET = "rotated-Pw-9f3e2a7c1"  # 20 characters: the IPMI 2.0 maximum


def props(fake: FakeBmc | None = None, **changes) -> dict:
    base = {"site": "lab", "root": "/srv/rackform", "node": "gpu-1", "bmc_address": "127.0.0.1",
            "bmc_port": fake.port if fake else 623, "power_state": "on", "boot_device": "disk", "login": "factory"}
    return base | changes


@pytest.fixture()
def fake():
    with FakeBmc(FakeBmcConfig(dcmi_power_w=8500, firmware=(1, 0x42))) as bmc:
        yield bmc


# --- check and diff -----------------------------------------------------------------------------


def test_check_accepts_a_node():
    assert BareMetalProvider().check({}, props()).failures == []


@pytest.mark.parametrize(("key", "value"), [("power_state", "sleeping"), ("boot_device", "floppy"),
                                            ("login", "guess"), ("bmc_address", "bmc.example")])
def test_check_refuses_unknown_values(key: str, value: str):
    failures = BareMetalProvider().check({}, props(**{key: value})).failures
    assert [f.property for f in failures] == [key]


def test_check_requires_the_node_and_its_bmc():
    failures = BareMetalProvider().check({}, {"power_state": "on", "boot_device": "disk", "login": "site"}).failures
    assert sorted(f.property for f in failures) == ["bmc_address", "node", "root", "site"]


@pytest.mark.parametrize(("change", "changes", "replaces"), [
    ({}, False, []),
    ({"power_state": "off"}, True, []),
    ({"boot_device": "pxe"}, True, []),
    ({"bmc_address": "10.0.1.9"}, True, []),
    ({"node": "gpu-2"}, True, ["node"]),
    ({"root": "/home/ops/rackform"}, False, []),
    ({"login": "site"}, False, []),
])
def test_diff(change: dict, changes: bool, replaces: list[str]):
    result = BareMetalProvider().diff("lab/gpu-1", props() | {"power_draw_w": 400.0}, props(**change))
    assert (result.changes, result.replaces) == (changes, replaces)


# --- create, read, update, delete on a BMC ---------------------------------------------------------


def test_create_sets_the_boot_device_and_powers_on(fake):
    created = BareMetalProvider().create(props(fake, boot_device="pxe"))
    assert (created.id, fake.power, fake.boot_device) == ("lab/gpu-1", "on", 0x1)


def test_create_reports_readings(fake):
    outs = BareMetalProvider().create(props(fake)).outs
    assert (outs["power_state"], outs["power_draw_w"], outs["firmware"]) == ("on", 8500.0, "1.42")


def test_create_sets_the_boot_device_before_powering_on(fake):
    BareMetalProvider().create(props(fake, boot_device="pxe"))
    sent = [command for command in fake.commands if command in ((0x00, 0x08), (0x00, 0x02))]
    assert sent[-1] == (0x00, 0x02) and (0x00, 0x08) in sent


def test_create_can_leave_a_node_off(fake):
    BareMetalProvider().create(props(fake, power_state="off"))
    assert (fake.power, (0x00, 0x02) in fake.commands) == ("off", False)


def test_read_returns_the_real_power_state(fake):
    created = BareMetalProvider().create(props(fake))
    fake.power = "off"  # someone switched it off by hand
    read = BareMetalProvider().read(created.id, created.outs)
    assert (read.outs["power_state"], read.outs["power_draw_w"]) == ("off", 8500.0)


def test_drift_found_by_read_is_an_update_on_the_next_up(fake):
    created = BareMetalProvider().create(props(fake))
    fake.power = "off"
    refreshed = BareMetalProvider().read(created.id, created.outs).outs
    assert BareMetalProvider().diff(created.id, refreshed, props(fake)).changes is True


def test_read_keeps_the_boot_device_last_set(fake):
    created = BareMetalProvider().create(props(fake, boot_device="pxe"))
    assert BareMetalProvider().read(created.id, created.outs).outs["boot_device"] == "pxe"


def test_update_powers_the_node_to_the_new_state(fake):
    created = BareMetalProvider().create(props(fake))
    BareMetalProvider().update(created.id, created.outs, props(fake, power_state="off"))
    assert fake.power == "off"


def test_update_without_a_boot_change_leaves_the_boot_device_alone(fake):
    created = BareMetalProvider().create(props(fake))
    boots_before = fake.commands.count((0x00, 0x08))
    BareMetalProvider().update(created.id, created.outs, props(fake, power_state="off"))
    assert fake.commands.count((0x00, 0x08)) == boots_before


def test_delete_leaves_the_node_powered(fake):
    created = BareMetalProvider().create(props(fake))
    BareMetalProvider().delete(created.id, created.outs)
    assert fake.power == "on"


def test_an_unreachable_bmc_fails_with_the_reason(monkeypatch):
    monkeypatch.setattr(baremetal, "fleet_for", lambda p: Fleet(lambda node: Credentials("ADMIN", "ADMIN"),
                                                                retry=RetryPolicy(attempts=2, jitter=0.0),
                                                                timeouts=Timeouts(0.1, 0), sleep=lambda s: None,
                                                                locks=BmcLocks()))
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as silent, pytest.raises(BareMetalError) as failed:
        BareMetalProvider().create(props(silent))
    assert "gpu-1 (127.0.0.1): apply failed: unreachable" in str(failed.value)


@pytest.fixture()
def secret_store(monkeypatch):
    """A stand-in for rackform.secrets holding the node's rotated password."""
    store = types.ModuleType("rackform.secrets")
    store.bmc_credentials = lambda site, root: (lambda node: ("ADMIN", SECRET))
    monkeypatch.setitem(sys.modules, "rackform.secrets", store)
    monkeypatch.setattr(rackform, "secrets", store, raising=False)  # `from rackform import secrets` reads this


def test_site_login_comes_from_the_secret_store(secret_store):
    with FakeBmc(FakeBmcConfig(password=SECRET)) as fake:
        created = BareMetalProvider().create(props(fake, login="site"))
    assert created.outs["power_state"] == "on"


def test_no_password_in_outputs_or_the_pickled_provider(secret_store):
    with FakeBmc(FakeBmcConfig(password=SECRET)) as fake:
        created = BareMetalProvider().create(props(fake, login="site"))
        read = BareMetalProvider().read(created.id, created.outs)
    state = json.dumps([created.outs, read.outs]) + base64.b64decode(engine_serialize(BareMetalProvider())).hex()
    assert SECRET not in state and SECRET.encode().hex() not in state


# --- the engine's dill round trip ------------------------------------------------------------------


def engine_serialize(provider: BareMetalProvider) -> str:
    serialized, _contains_secrets = _serialize(True, serialize_provider, provider)
    return serialized


def test_provider_is_pickled_by_reference():
    payload = base64.b64decode(engine_serialize(BareMetalProvider()))
    assert b"providers.baremetal" in payload and len(payload) < 200


def test_round_trip_then_create_in_this_process(fake):
    provider = _deserialize(lambda: dill.loads(base64.b64decode(engine_serialize(BareMetalProvider()))))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    assert provider.create(props(fake)).outs["power_state"] == "on"


PROVIDER_PROCESS = textwrap.dedent("""
    import base64, json, sys
    import dill
    from pulumi.dynamic import Config, ConfigureRequest
    from pulumi.runtime._serialization import _deserialize
    provider = _deserialize(lambda: dill.loads(base64.b64decode(sys.argv[1])))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    props = json.loads(sys.argv[2])
    diff = provider.diff("lab/gpu-1", props, props | {"power_state": "off"})
    loaded_by_diff = sorted(m for m in sys.modules if m.startswith(("rackform", "pyghmi")))
    created = provider.create(props)
    print(json.dumps({"changes": diff.changes, "loaded_by_diff": loaded_by_diff,
                      "power_state": created.outs["power_state"]}))
    """)


def test_round_trip_then_diff_and_create_in_a_fresh_provider_process(fake):
    """As Pulumi runs it: `python -m pulumi.dynamic` started in stacks/, nothing imported first."""
    completed = subprocess.run(
        [sys.executable, "-c", PROVIDER_PROCESS, engine_serialize(BareMetalProvider()), json.dumps(props(fake))],
        cwd=STACKS, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(completed.stdout) == {"changes": True, "loaded_by_diff": [], "power_state": "on"}


def test_resource_type_names_the_module():
    assert BareMetalNode._resource_type_name == "dynamic/rackform:BareMetalNode"
