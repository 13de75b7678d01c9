"""How the Pulumi engine launches this project, reproduced as far as the SDK allows (no CLI here).

- The language host resolves `runtime.options.virtualenv` against the project folder
  (the folder of Pulumi.yaml) and runs the program in the program folder (`main`).
- The dynamic-provider host (`pulumi-resource-pulumi-python`, a shell script shipped with
  the CLI) is started in the program folder with PULUMI_RUNTIME_VIRTUALENV set to the
  option *as written*, makes it absolute against $PWD, and runs
  `<virtualenv>/bin/python -u -m pulumi.dynamic`, which prints its gRPC port. The engine
  then calls Configure (the whole stack config, namespaced) and Check/Diff/... with the
  pickled provider in `__provider` (upstream pulumi/pulumi#7061: relative to the program
  folder, not the project's, hence the stacks/.venv link).
- Pulumi.yaml's config schema follows the engine's project validation rules.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECT = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.baremetal import BareMetalProvider  # noqa: E402
from providers.credentials import PRIVATE_KEY_FILE_KEY, SECRET_KEYS  # noqa: E402
from providers.playbook import PlaybookProvider  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime import proto, rpc  # noqa: E402
from pulumi.runtime._serialization import _serialize  # noqa: E402
from pulumi.runtime.proto import provider_pb2_grpc  # noqa: E402

from rackform.secrets import SiteVault  # noqa: E402


def program_folder() -> Path:
    """The engine's `pwd` for the program and its plugins: `main` when it names a folder."""
    main = REPO / PROJECT.get("main", ".")
    return main if main.is_dir() else REPO


def virtualenv_option() -> str:
    return PROJECT["runtime"]["options"]["virtualenv"]


def language_host_virtualenv() -> Path:
    """As the python language host: relative to the project root (the folder of Pulumi.yaml)."""
    option = Path(virtualenv_option())
    return option if option.is_absolute() else REPO / option


def provider_host_virtualenv(pwd: Path) -> Path:
    """As pulumi-resource-pulumi-python: trailing slash dropped, relative to its $PWD."""
    option = virtualenv_option().rstrip("/")
    return Path(option) if option.startswith("/") else Path(f"{pwd}/{option}")


def test_the_program_runs_from_stacks():
    assert program_folder() == STACKS and (STACKS / "__main__.py").is_file()


def test_the_language_host_finds_the_repos_virtualenv():
    venv = language_host_virtualenv()
    assert venv == REPO / ".venv" and (venv / "bin" / "python").is_file()


def test_the_provider_host_finds_the_same_virtualenv_from_the_program_folder():
    venv = provider_host_virtualenv(program_folder())
    assert (venv / "bin" / "python").is_file()  # the script's own test before it runs python
    assert venv.resolve() == (REPO / ".venv").resolve()


def test_pulumi_install_reads_requirements_from_the_program_folder():
    """`pulumi install` runs pip in the program folder on its requirements.txt: the locks of
    rackform and of its pulumi extra (pulumi, pulumi-kubernetes), hashes and all; the checkout
    itself is installed by `make install` (pip's hash checking refuses a folder)."""
    lines = [line.strip() for line in (program_folder() / "requirements.txt").read_text().splitlines()]
    included = [(program_folder() / line.split(maxsplit=1)[1]).resolve() for line in lines if line.startswith("-r ")]
    assert included == [(REPO / "requirements.lock").resolve(), (REPO / "requirements-pulumi.lock").resolve()]
    assert [line for line in lines if line and not line.startswith(("#", "-r "))] == []


# ---------------------------------------------------------------- the provider host, as the engine starts it

STACK_CONFIG = {"rackform:site": "lab", "rackform:vaultPassword": "stack-vault-Pw-4e1d",
                "rackform:switchPassword": "switch-Pw-77"}


def provider_host_environment(venv: Path) -> dict[str, str]:
    """What the engine and the script give the host: runtime options, project, config, PATH."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"PULUMI_RUNTIME_VIRTUALENV": virtualenv_option(), "PULUMI_RUNTIME_TOOLCHAIN": "pip",
            "PULUMI_PROJECT": PROJECT["name"], "PULUMI_CONFIG": json.dumps(STACK_CONFIG),
            "PATH": f"{venv}/bin:{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)  # nothing of this test process leaks in
    return env


@dataclass
class ProviderHost:
    stub: provider_pb2_grpc.ResourceProviderStub
    stderr: Path
    """What the host wrote to stderr (the engine shows it; pulumi.log.warn lands here)."""


@pytest.fixture(scope="module")
def provider_host(tmp_path_factory):
    """`<venv>/bin/python -u -m pulumi.dynamic <engine>` in stacks/; a gRPC stub on its port.

    The lab's BMC vault (a real ansible-vault file) is encrypted with the stack's
    rackform:vaultPassword, which reaches the host only through Configure."""
    folder = tmp_path_factory.mktemp("provider-host")
    password_file = folder / "vault-password"
    password_file.write_text(STACK_CONFIG["rackform:vaultPassword"] + "\n")
    password_file.chmod(0o600)
    secrets = {"RACKFORM_SECRETS_DIR": str(folder / "secrets")}
    SiteVault("lab", environ=secrets | {"RACKFORM_VAULT_PASSWORD_FILE": str(password_file)}).ensure(["gpu-1"])
    password_file.unlink()
    venv = provider_host_virtualenv(program_folder())
    stderr = folder / "stderr"
    with stderr.open("w") as stderr_file:
        host = subprocess.Popen([f"{venv}/bin/python", "-u", "-m", "pulumi.dynamic", "127.0.0.1:1"],
                                cwd=program_folder(), env=provider_host_environment(venv) | secrets,
                                stdout=subprocess.PIPE, stderr=stderr_file, text=True)
    try:
        port = int(host.stdout.readline().strip() or 0)
        assert port, stderr.read_text()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            stub.Configure(proto.ConfigureRequest(args=marshal({
                key: rpc.wrap_rpc_secret(value) if key in SECRET_KEYS else value
                for key, value in STACK_CONFIG.items()}), acceptSecrets=True))
            yield ProviderHost(stub, stderr)
    finally:
        host.terminate()
        host.wait(timeout=30)


def marshal(values: dict):
    return asyncio.run(rpc.serialize_properties(values, {}))


def unmarshal(struct) -> dict:
    return rpc.deserialize_properties(struct)


def pickled(provider) -> str:
    """What `pulumi.dynamic.Resource` stores in `__provider`."""
    return _serialize(True, serialize_provider, provider)[0]


def test_the_host_unpickles_the_bare_metal_provider_and_checks(provider_host):
    news = {"__provider": pickled(BareMetalProvider()), "site": "lab", "root": str(REPO), "node": "gpu-1",
            "bmc_address": "not-an-address", "bmc_port": 623, "power_state": "on", "boot_device": "disk",
            "login": "site"}
    response = provider_host.stub.Check(proto.CheckRequest(urn="urn:x", olds=marshal({}), news=marshal(news)))
    assert [(f.property, f.reason) for f in response.failures] == [
        ("bmc_address", "'not-an-address' is not an IP address")]


def test_the_host_unpickles_the_playbook_provider_and_imports_rackform(provider_host):
    """Playbook's check imports rackform.pipeline: the venv's editable install is on the path."""
    news = {"__provider": pickled(PlaybookProvider()), "site": "lab", "stage": "deploy", "root": str(REPO),
            "digest": "sha256:x"}
    response = provider_host.stub.Check(proto.CheckRequest(urn="urn:x", olds=marshal({}), news=marshal(news)))
    assert [f.property for f in response.failures] == ["stage"]


def test_the_host_diffs_a_stage_by_its_digest(provider_host):
    olds = {"__provider": pickled(PlaybookProvider()), "site": "lab", "stage": "os", "root": str(REPO),
            "digest": "sha256:a"}
    response = provider_host.stub.Diff(proto.DiffRequest(id="lab/os", urn="urn:x", olds=marshal(olds),
                                                    news=marshal(olds | {"digest": "sha256:b"})))
    assert response.changes == proto.DiffResponse.DIFF_SOME


def test_the_host_hands_the_secret_vault_password_to_configure(provider_host):
    """A refresh with the site login: the host decrypts the lab's vault with the stack's
    vault password (else the warning would say `cannot decrypt`), then finds no BMC on
    port 9 and keeps the stored state with a warning. No secret comes back."""
    stored = {"__provider": pickled(BareMetalProvider()), "site": "lab", "root": str(REPO), "node": "gpu-1",
              "bmc_address": "127.0.0.1", "bmc_port": 9, "power_state": "on", "boot_device": "disk",
              "login": "site", "firmware": "1.42", "serial": "S1", "product": "P"}
    response = provider_host.stub.Read(proto.ReadRequest(id="lab/gpu-1", urn="urn:x", properties=marshal(stored)),
                                       timeout=120)
    outs = unmarshal(response.properties)
    assert {key: outs[key] for key in ("power_state", "serial")} == {"power_state": "on", "serial": "S1"}
    assert "warning: gpu-1 (127.0.0.1): read failed: unreachable" in provider_host.stderr.read_text()
    secrets = {STACK_CONFIG[key] for key in SECRET_KEYS}
    assert not secrets & {str(value) for value in outs.values()}


# ---------------------------------------------------------------- the config schema in Pulumi.yaml

TYPES = {"string": str, "boolean": bool, "integer": int}


def test_every_config_key_is_the_projects_typed_and_has_a_default():
    """The engine's rules: a key with a type or default must be in the project's namespace, and
    a stack that lacks a declared key without a default is refused before the program starts
    ("Stack 'x' is missing configuration values ..."): every key rackform declares is optional."""
    assert PROJECT["config"], "Pulumi.yaml declares the stack config keys"
    for key, schema in PROJECT["config"].items():
        assert ":" not in key or key.startswith(f"{PROJECT['name']}:"), key
        assert schema["type"] in TYPES and schema.get("description"), key
        assert "default" in schema and isinstance(schema["default"], TYPES[schema["type"]]), key


def test_the_keys_the_code_reads_are_declared_or_secret_and_secrets_are_not_declared():
    """The engine refuses a default for a `secret: true` key (the default is plaintext), so the
    passwords stay undeclared and the program refuses them in plaintext (stacks/__main__.py)."""
    declared = PROJECT["config"]
    read = {"rackform:site", "rackform:bareMetalNodes", PRIVATE_KEY_FILE_KEY}
    assert read == set(declared)
    assert not set(SECRET_KEYS) & set(declared)


def _stack_config_problems(stack_file: Path) -> list[str]:
    """What a stack file sets that the engine or the program would refuse or keep in plaintext."""
    problems = []
    for key, value in (yaml.safe_load(stack_file.read_text()) or {}).get("config", {}).items():
        schema = PROJECT["config"].get(key)
        if key in SECRET_KEYS and not (isinstance(value, dict) and "secure" in value):
            problems.append(f"{stack_file.name}: {key} is a secret: set it with --secret, never in the file")
        elif key in SECRET_KEYS:
            continue
        elif schema is None:
            problems.append(f"{stack_file.name}: {key} is not declared in Pulumi.yaml")
        elif not (isinstance(value, TYPES[schema["type"]]) or (schema["type"] == "boolean" and value in ("true", "false"))):
            problems.append(f"{stack_file.name}: {key} is not a {schema['type']}")
    return problems


def test_a_stack_file_with_a_plaintext_secret_or_an_undeclared_key_is_caught(tmp_path):
    stack_file = tmp_path / "Pulumi.edge.yaml"
    stack_file.write_text("config:\n  rackform:site: edge\n  rackform:vaultPassword: hunter2\n  rackform:sight: edge\n")
    assert _stack_config_problems(stack_file) == [
        "Pulumi.edge.yaml: rackform:vaultPassword is a secret: set it with --secret, never in the file",
        "Pulumi.edge.yaml: rackform:sight is not declared in Pulumi.yaml"]


@pytest.mark.parametrize("stack_file", sorted(REPO.glob("Pulumi.*.yaml")), ids=lambda path: path.name)
def test_the_committed_stack_files_set_only_declared_keys_and_no_secret(stack_file: Path):
    assert _stack_config_problems(stack_file) == []


def test_stack_files_written_with_secrets_configured_hold_no_secret(tmp_path, monkeypatch):
    """`rackform init` writes a repo's Pulumi.yaml and stack file while the stack's secrets are
    in this process's environment (the vault password file, the switch password), then
    `rackform secrets` makes the site's BMC vault: no secret value lands in a Pulumi file,
    and the stack file sets only declared keys, no secret one."""
    from rackform.cli import main
    from rackform.secrets import SiteVault

    vault_password, switch_password = "vault-pw-3f9c1e7a", "switch-pw-8d2b4a61"
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    password_file = secrets_dir / "vault-password"
    password_file.write_text(vault_password + "\n")
    password_file.chmod(0o600)
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(secrets_dir))
    monkeypatch.setenv("RACKFORM_VAULT_PASSWORD_FILE", str(password_file))
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD", switch_password)
    repo = tmp_path / "sites"

    assert main(["init", str(repo)]) == 0
    assert main(["secrets", "edge", "--root", str(repo)]) == 0

    bmc_passwords = {credential.password for credential in SiteVault("edge").load().values()}
    assert bmc_passwords, "rackform secrets made BMC passwords for edge"
    stack_files = sorted(repo.glob("Pulumi*.yaml"))
    assert [path.name for path in stack_files] == ["Pulumi.edge.yaml", "Pulumi.yaml"]
    for secret in {vault_password, switch_password, *bmc_passwords}:
        assert [path.name for path in stack_files if secret in path.read_text()] == []
    assert _stack_config_problems(repo / "Pulumi.edge.yaml") == []
