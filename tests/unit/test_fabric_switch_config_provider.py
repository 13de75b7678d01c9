"""The retired `SwitchConfig` dynamic provider, called directly (Pulumi's mocks never call
providers): kept loadable for existing state, it checks and diffs as before, and its
create/update/read only remember (no switch is reached: the fabric stage configures
switches); the dill round trip the engine does, in this process and in a fresh one
started in the program directory.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dill

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.switch_config import SwitchConfig, SwitchConfigProvider, desired_configs  # noqa: E402
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime._serialization import _deserialize, _serialize  # noqa: E402

from rackform.model.loader import load_site  # noqa: E402
from rackform.render.project import render_files  # noqa: E402

CONFIG = {"running-config": "hostname leaf-2\nlldp\n"}
PROPS = {"site": "lab", "switch": "leaf-2", "os": "onyx", "root": "/srv/rackform", "config": CONFIG}


# ---------------------------------------------------------------- check, diff, delete


def test_check_accepts_a_supported_switch_os():
    assert SwitchConfigProvider().check({}, PROPS).failures == []


def test_check_refuses_an_unknown_switch_os_listing_the_supported_ones():
    failures = SwitchConfigProvider().check({}, PROPS | {"os": "eos"}).failures
    assert [(f.property, f.reason) for f in failures] == [("os", "unknown switch OS 'eos'; supported: cumulus, onyx")]


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


def test_desired_config_is_the_rendered_review_file():
    site = load_site("reference", REPO)
    os_name, config = desired_configs(site)["leaf-1"]
    assert (os_name, config) == ("onyx", {"switch_configs/leaf-1.onyx.conf":
                                          render_files(site)["switch_configs/leaf-1.onyx.conf"].decode()})


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


# ---------------------------------------------------------------- create, update, read: remembered only


UNREACHABLE = PROPS | {"root": "/nonexistent/rackform", "endpoint": "127.0.0.1:1"}
"""Inputs no push could act on: a create or update that tried would fail."""


def test_create_only_remembers_its_inputs():
    created = SwitchConfigProvider().create(UNREACHABLE)
    assert created.id == "lab/leaf-2"
    assert {key: created.outs[key] for key in UNREACHABLE} == UNREACHABLE
    assert (created.outs["applied_changes"], created.outs["diff"]) == (0, "")
    assert created.outs["notes"] == ["leaf-2: configured by the fabric stage (fabric.yml); this resource only "
                                     "remembers its inputs"]


def test_update_only_remembers_the_new_inputs():
    news = UNREACHABLE | {"config": {"running-config": "hostname leaf-2\n"}}
    updated = SwitchConfigProvider().update("lab/leaf-2", UNREACHABLE, news)
    assert updated.outs["config"] == news["config"] and updated.outs["applied_changes"] == 0


def test_read_keeps_the_stored_state_without_reaching_the_switch():
    stored = SwitchConfigProvider().create(UNREACHABLE).outs
    read = SwitchConfigProvider().read("lab/leaf-2", stored)
    assert (read.id, read.outs) == ("lab/leaf-2", stored)
