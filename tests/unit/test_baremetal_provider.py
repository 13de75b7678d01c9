"""The `BareMetalNode` dynamic provider, called directly against the fake BMC (Pulumi's mocks
never call providers), and through the dill round trip the engine does. The site login
reads a real ansible-vault file (rackform.secrets), decrypted with the stack's
rackform:vaultPassword as the engine hands it to `configure`.

The same provider against the lab's ipmi_sim BMCs is in tests/lab/test_ipmi_fleet.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import dill
import pulumi
import pytest

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:  # Pulumi runs the program (and its providers) from stacks/
    sys.path.insert(0, str(STACKS))

from providers import baremetal  # noqa: E402
from providers.baremetal import TELEMETRY_KEYS, BareMetalError, BareMetalNode, BareMetalProvider  # noqa: E402
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime._serialization import _deserialize, _serialize  # noqa: E402

from rackform.ipmi.credentials import Credentials  # noqa: E402
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig  # noqa: E402
from rackform.ipmi.fleet import BmcLocks, Fleet, RetryPolicy  # noqa: E402
from rackform.ipmi.session import Timeouts  # noqa: E402
from rackform.secrets import SiteVault  # noqa: E402

VAULT_PASSWORD = "stack-vault-Pw-4e1d"  # what `pulumi config set --secret rackform:vaultPassword` holds


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


def test_create_reports_state_and_inventory_but_no_telemetry(fake):
    outs = BareMetalProvider().create(props(fake)).outs
    assert (outs["power_state"], outs["firmware"]) == ("on", "1.42")
    assert not set(TELEMETRY_KEYS) & set(outs)


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
    assert read.outs["power_state"] == "off"


def test_read_drops_telemetry_an_earlier_version_stored(fake):
    """Watts and temperatures change on every read: as state they made every refresh drift."""
    created = BareMetalProvider().create(props(fake))
    stored = created.outs | {"power_draw_w": 8100.0, "temperatures_c": {"inlet": 24.0}}
    read = BareMetalProvider().read(created.id, stored)
    assert not set(TELEMETRY_KEYS) & set(read.outs)
    assert BareMetalProvider().diff(created.id, read.outs, props(fake)).changes is False


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


def test_delete_sends_the_bmc_nothing(fake):
    """Deleting only forgets the node (and the program marks it retain_on_delete)."""
    created = BareMetalProvider().create(props(fake))
    sent = len(fake.commands)
    BareMetalProvider().delete(created.id, created.outs)
    assert (fake.power, len(fake.commands)) == ("on", sent)


@pytest.fixture()
def quick_fleet(monkeypatch):
    """Short timeouts and one retry: an unreachable BMC gives up in a fraction of a second."""
    monkeypatch.setattr(baremetal, "fleet_for", lambda p, c: Fleet(lambda node: Credentials("ADMIN", "ADMIN"),
                                                                   retry=RetryPolicy(attempts=2, jitter=0.0),
                                                                   timeouts=Timeouts(0.1, 0), sleep=lambda s: None,
                                                                   locks=BmcLocks()))


def test_an_unreachable_bmc_fails_create_with_the_reason(quick_fleet):
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as silent, pytest.raises(BareMetalError) as failed:
        BareMetalProvider().create(props(silent))
    assert "gpu-1 (127.0.0.1): apply failed: unreachable" in str(failed.value)


def test_refresh_of_an_unreachable_bmc_warns_and_keeps_the_stored_state(quick_fleet, monkeypatch, capsys):
    """One dead BMC must not fail a whole `pulumi refresh`. In the provider process there is
    no engine connection: pulumi.log.warn writes to stderr, which the engine shows."""
    monkeypatch.setattr(pulumi.log, "get_engine", lambda: None)
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as silent:
        stored = props(silent) | {"firmware": "1.42", "serial": "S1", "product": "DGX", "power_draw_w": 900.0}
        read = BareMetalProvider().read("lab/gpu-1", stored)
    assert (read.id, read.outs) == ("lab/gpu-1", {k: v for k, v in stored.items() if k != "power_draw_w"})
    assert "warning: gpu-1 (127.0.0.1): read failed: unreachable" in capsys.readouterr().err


# --- the site login: the site's vault, decrypted with the stack's vault password -------------------


@pytest.fixture()
def site_vault(tmp_path, monkeypatch) -> SiteVault:
    """The lab's BMC vault (a real ansible-vault file) encrypted with the stack's vault password."""
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    password_file = tmp_path / "stack-vault-password"
    password_file.write_text(VAULT_PASSWORD + "\n")
    password_file.chmod(0o600)
    vault = SiteVault("lab", environ={"RACKFORM_SECRETS_DIR": str(tmp_path / "secrets"),
                                      "RACKFORM_VAULT_PASSWORD_FILE": str(password_file)})
    vault.ensure(["gpu-1"])
    password_file.unlink()  # from here on only the stack config knows it
    return vault


def configured(vault_password: str | None) -> BareMetalProvider:
    provider = BareMetalProvider()
    config = {"rackform:vaultPassword": vault_password} if vault_password is not None else {}
    provider.configure(ConfigureRequest(config=Config(raw_config=config, project_name="rackform")))
    return provider


def rotated_login(vault: SiteVault) -> tuple[str, str]:
    """The node's rotated login, read back the way a person would (with the password in a file)."""
    with tempfile.TemporaryDirectory() as folder:
        password_file = Path(folder) / "pw"
        password_file.write_text(VAULT_PASSWORD + "\n")
        password_file.chmod(0o600)
        entry = SiteVault("lab", vault.directory.parent, {"RACKFORM_VAULT_PASSWORD_FILE": str(password_file)}
                          ).load()["gpu-1"]
    return entry.user, entry.password


def test_site_login_reads_the_vault_with_the_stack_vault_password(site_vault, tmp_path, monkeypatch):
    user, password = rotated_login(site_vault)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with FakeBmc(FakeBmcConfig(user=user, password=password)) as fake:
        created = configured(VAULT_PASSWORD).create(props(fake, login="site"))
    assert created.outs["power_state"] == "on"
    assert list((tmp_path / "tmp").iterdir()) == []  # the vault password file is gone


def test_a_wrong_vault_password_fails_naming_the_vault_not_the_password(site_vault):
    with FakeBmc(FakeBmcConfig()) as fake, pytest.raises(BareMetalError) as failed:
        configured("not-the-password").create(props(fake, login="site"))
    assert "site lab: BMC vault: cannot decrypt" in str(failed.value)
    assert "not-the-password" not in str(failed.value)


def test_without_a_stack_vault_password_the_sites_own_password_file_is_used(site_vault):
    """As the CLI: the vault was made with another password, so the site's own file cannot open it."""
    with FakeBmc(FakeBmcConfig()) as fake, pytest.raises(BareMetalError, match="no vault password file at"):
        configured(None).create(props(fake, login="site"))


def test_no_password_in_outputs_or_the_pickled_configured_provider(site_vault):
    user, password = rotated_login(site_vault)
    provider = configured(VAULT_PASSWORD)
    with FakeBmc(FakeBmcConfig(user=user, password=password)) as fake:
        created = provider.create(props(fake, login="site"))
        read = provider.read(created.id, created.outs)
    state = json.dumps([created.outs, read.outs]) + base64.b64decode(engine_serialize(provider)).hex()
    for secret in (password, VAULT_PASSWORD):
        assert secret not in state and secret.encode().hex() not in state


# --- the engine's dill round trip ------------------------------------------------------------------


def engine_serialize(provider: BareMetalProvider) -> str:
    serialized, _contains_secrets = _serialize(True, serialize_provider, provider)
    return serialized


def test_provider_is_pickled_by_reference():
    payload = base64.b64decode(engine_serialize(BareMetalProvider()))
    assert b"providers.baremetal" in payload and len(payload) < 200


def test_round_trip_then_create_in_this_process(fake):
    provider = _deserialize(lambda: dill.loads(base64.b64decode(engine_serialize(configured(VAULT_PASSWORD)))))
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
