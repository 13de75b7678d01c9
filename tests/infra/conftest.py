"""testinfra checks of a deployed site: what `rackform verify SITE` runs.

They need live machines, so plain `pytest` (and `make test`) skips this folder; they
run only when testinfra is given hosts:

    ANSIBLE_CONFIG=build/lab/ansible.cfg pytest tests/infra -p no:cacheprovider \\
        --hosts=ansible://all --connection=ansible --ansible-inventory=build/lab/inventory/hosts.yml

Each check is marked with the groups of machines it applies to (`machines`) and,
where a deployment stage is what makes it true, that stage (`stage`); `--stages`
names the stages that ran (default: all), and checks are deselected for the rest
and for machines outside their groups. Expected values come from the emitted
inventory and from the defaults of the roles in the emitted project, never from
this folder.

testinfra connects as shipped (its own `ansible-inventory --list`); the checks' expected
values and the machines' groups come from `rackform.run.verify_inventory`, which reads
a host's variables without listing every host's.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from rackform.collection import PROJECT_DIR
from rackform.pipeline import STAGE_NAMES
from rackform.run.verify import NOTE_PROPERTY, PROGRESS_PREFIX, UNREACHABLE
from rackform.run.verify_inventory import EmittedInventory

from checklib import Link, parse_sysctl_lines  # tests/infra/checklib.py

HERE = Path(__file__).resolve().parent

_INVENTORY = pytest.StashKey[EmittedInventory]()
_unreachable: dict[str, str | None] = {}  # machine -> why it cannot be reached (None: it can)
_progress_writer: Callable[[str], None] | None = None


# --- options, markers, collection ------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rackform", "rackform verify")
    group.addoption("--stages", default=None,
                    help=f"comma-separated stages that ran ({', '.join(STAGE_NAMES)}); default: all")
    group.addoption("--rackform-progress", action="store_true",
                    help=f"write a `{PROGRESS_PREFIX}` line for each failed check as it happens")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "machines(*groups): inventory groups whose machines the check applies to")
    config.addinivalue_line("markers", "stage(name): the deployment stage that makes the check true")
    inventory_path = config.getoption("ansible_inventory", None)
    if config.getoption("hosts", None) and inventory_path:
        config.stash[_INVENTORY] = EmittedInventory(Path(inventory_path))
    if config.getoption("rackform_progress", False) and not hasattr(config, "workerinput"):
        global _progress_writer
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        _progress_writer = reporter.write_line if reporter else print


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without `--hosts` there is nothing to check: leave this folder out of the run."""
    if not config.getoption("hosts", None) and collection_path.resolve().is_relative_to(HERE):
        return True
    return None


def _selected_stages(config: pytest.Config) -> set[str]:
    option = config.getoption("stages", None)
    if option is None:
        return set(STAGE_NAMES)
    stages = {name.strip() for name in option.split(",") if name.strip()}
    unknown = stages - set(STAGE_NAMES)
    if unknown:
        raise pytest.UsageError(f"--stages: unknown {', '.join(sorted(unknown))} (stages: {', '.join(STAGE_NAMES)})")
    return stages


def _applies(item: pytest.Item, stages: set[str], inventory: EmittedInventory) -> bool:
    stage = item.get_closest_marker("stage")
    if stage is not None and stage.args[0] not in stages:
        return False
    machines = item.get_closest_marker("machines")
    host = getattr(item, "callspec", None) and item.callspec.params.get("_testinfra_host")
    if machines is None or host is None:
        return True
    return not inventory.groups_of.get(host.backend.host, {}).keys().isdisjoint(machines.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each check only for the machines of its groups, and only if its stage ran."""
    inventory = config.stash.get(_INVENTORY, None)
    if inventory is None:
        return
    stages = _selected_stages(config)
    ours: dict[Path, bool] = {}  # per file, not per item: a site has many items per file
    kept, dropped = [], []
    for item in items:
        if item.path not in ours:
            ours[item.path] = item.path.resolve().is_relative_to(HERE)
        (kept if not ours[item.path] or _applies(item, stages, inventory) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _progress_writer is not None and report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        reason = (crash.message if crash else str(report.longrepr)).splitlines()[0] if report.longrepr else ""
        _progress_writer(f"{PROGRESS_PREFIX}\t{report.when}\t{report.nodeid}\t{reason}")


# --- fixtures the checks use ------------------------------------------------------------

@pytest.fixture(scope="module")
def machine(host) -> str:
    """The machine's inventory name."""
    return host.backend.host


@pytest.fixture(scope="module", autouse=True)
def reachable(host, machine: str) -> None:
    """Fail every check of a machine that does not answer, with one clear reason (tried once)."""
    if machine not in _unreachable:
        try:
            host.run("true")
            _unreachable[machine] = None
        except Exception as error:  # testinfra raises RuntimeError(CommandResult) for ssh's exit 255
            result = error.args[0] if error.args else error
            detail = str(getattr(result, "stderr", "") or result).strip().splitlines()
            _unreachable[machine] = detail[-1] if detail else type(error).__name__
    if _unreachable[machine] is not None:
        pytest.fail(f"{UNREACHABLE}{_unreachable[machine]}", pytrace=False)


@pytest.fixture(scope="module")
def machine_vars(request: pytest.FixtureRequest, machine: str) -> Mapping[str, Any]:
    """The machine's variables, merged from the emitted inventory as Ansible merges them."""
    return request.config.stash[_INVENTORY].vars_for(machine)


@pytest.fixture(scope="session")
def group_members(request: pytest.FixtureRequest) -> Mapping[str, list[str]]:
    """Inventory group -> its machines (every level of nesting flattened), as Ansible lists them."""
    return request.config.stash[_INVENTORY].members


@pytest.fixture(scope="session")
def project(request: pytest.FixtureRequest) -> Path:
    """The emitted project's folder (build/<site>/)."""
    return request.config.stash[_INVENTORY].folder.parent


@pytest.fixture(scope="session")
def role_defaults(project: Path) -> Callable[[str], dict[str, Any]]:
    """`role_defaults(role)`: defaults/main.yml of a role of the collection the emitted project carries."""

    @cache
    def load(role: str) -> dict[str, Any]:
        path = project / PROJECT_DIR / "roles" / role / "defaults" / "main.yml"
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}

    return load


@pytest.fixture(scope="module")
def role_setting(machine_vars, role_defaults) -> Callable[[str, str], Any]:
    """`role_setting(role, name)`: the value a role uses, as Ansible picks it (inventory
    over role defaults). Only for literal defaults: templated ones are not evaluated."""

    def setting(role: str, name: str) -> Any:
        return machine_vars[name] if name in machine_vars else role_defaults(role)[name]

    return setting


@pytest.fixture
def note(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """`note(text)`: something the check reports besides its verdict (each certificate's expiry);
    `rackform verify` shows it under the machine, passed or failed (a property of the check's
    JUnit testcase: also kept under xdist, unlike pytest's suite-level properties)."""

    def add(text: str) -> None:
        request.node.user_properties.append((NOTE_PROPERTY, text))

    return add


@pytest.fixture
def links(host) -> dict[str, Link]:
    """The machine's network interfaces now, by name (one `ip -j link show`)."""
    found = {}
    for link in json.loads(host.check_output("ip -j link show")):
        flags = set(link.get("flags", ()))
        found[link["ifname"]] = Link(int(link["mtu"]), {"UP", "LOWER_UP"} <= flags, link.get("ifalias", ""))
    return found


@pytest.fixture
def live_sysctls(host) -> Callable[[list[str]], dict[str, str]]:
    """`live_sysctls(keys)`: the running kernel's values, whitespace-normalised; absent keys left out."""

    def read(keys: list[str]) -> dict[str, str]:
        result = host.run("sysctl " + " ".join(shlex.quote(key) for key in keys))
        return parse_sysctl_lines(result.stdout)

    return read


@pytest.fixture
def unit_state(host) -> Callable[[str], dict[str, str]]:
    """`unit_state(unit)`: systemd's ActiveState, UnitFileState, ConditionResult ... of a unit."""

    def read(unit: str) -> dict[str, str]:
        result = host.run(
            "systemctl show -p ActiveState -p SubState -p UnitFileState -p LoadState "
            "-p ConditionResult -p ConditionTimestamp %s", unit)
        if result.rc != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            pytest.fail(f"cannot ask systemd about {unit}: {detail[-1] if detail else f'exit {result.rc}'}",
                        pytrace=False)
        return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)

    return read
