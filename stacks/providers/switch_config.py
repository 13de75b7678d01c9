"""`SwitchConfig`: one switch's configuration as a Pulumi resource (a dynamic provider).

The program renders each managed switch's desired configuration (`config`: part ->
text; `desired_configs` below) and the engine compares it with the configuration
stored in the state, so `pulumi preview --diff` shows exactly the configuration
lines and file lines that would change. `create`/`update` push it through the
switch's driver (`rackform.fabric`: Onyx over netmiko, Cumulus as files over SSH):
read the running config, apply the difference, roll back on failure, save.
`read` (`pulumi refresh`) reads the running config back, so hand-made drift
shows up as a difference against the design.

Credentials never travel in the state: the provider process finds them as the
CLI does (`rackform.fabric.context.credentials_from_environment`: an SSH key from
$ANSIBLE_PRIVATE_KEY_FILE or the site's lab, a password from $RACKFORM_SWITCH_PASSWORD).

Shipped like `providers.playbook.PlaybookProvider`: dill pickles the instance by
reference, so it holds no state and imports rackform inside its methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

if TYPE_CHECKING:
    from rackform.model.site import Site

INPUT_KEYS = ("site", "switch", "os", "root", "config")
OPTIONAL_INPUT_KEYS = ("endpoint",)
OUTPUT_KEYS = ("applied_changes", "diff", "notes")


@dataclass(frozen=True, slots=True)
class SwitchConfigArgs:
    site: pulumi.Input[str]
    """Site name (topologies/sites/<site>.yaml)."""
    switch: pulumi.Input[str]
    """The managed switch's name in the design."""
    os: pulumi.Input[str]
    """Its switch OS: picks the driver (cumulus, onyx)."""
    root: pulumi.Input[str]
    """Repo root holding topologies/ and inventories/."""
    config: pulumi.Input[dict[str, str]]
    """The desired configuration, part -> text (`desired_configs`)."""
    endpoint: pulumi.Input[str] | None = None
    """HOST[:PORT] to reach the switch at instead of its management address."""


class SwitchConfigProvider(ResourceProvider):
    """CRUD for one switch's configuration: its diff is the configuration diff."""

    serialize_as_secret_always = False  # no secret in the pickled provider or its inputs

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        from rackform.fabric.dispatch import DRIVERS

        failures = [CheckFailure(key, "required") for key in INPUT_KEYS if not news.get(key)]
        if news.get("os") and news["os"] not in DRIVERS:
            reason = f"no configuration driver for switch OS '{news['os']}'; supported: {', '.join(sorted(DRIVERS))}"
            failures.append(CheckFailure("os", reason))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in ("config", "os", "endpoint") if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changed), replaces=[], stables=["site", "switch"],
                          delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"{props['site']}/{props['switch']}", outs=push(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=push(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        """What the switch runs, as `config`: the stored config when the driver finds no
        difference (line order aside), else the running parts, so a refresh shows drift.
        The stored state when the switch cannot be reached (a refresh must not wipe it)."""
        from rackform.fabric.driver import FabricError

        desired = dict(props.get("config") or {})
        try:
            with _driver(props) as driver:
                running = driver.running()
                drift = driver.diff(desired, running)
        except FabricError as error:
            pulumi.log.warn(f"{props.get('switch')}: running config not read back: {error}")
            return ReadResult(id_=id_, outs=props)
        config = desired if drift.empty else {part: running.get(part, "") for part in desired}
        return ReadResult(id_=id_, outs={**props, "config": config})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # A switch keeps its configuration when the program forgets it: un-configuring
        # a fabric switch is a separate, explicit operation.
        return None


class SwitchConfig(Resource, module="rackform", name="SwitchConfig"):
    """One switch's configuration (type `pulumi-python:dynamic/rackform:SwitchConfig`)."""

    site: pulumi.Output[str]
    switch: pulumi.Output[str]
    os: pulumi.Output[str]
    config: pulumi.Output[dict[str, str]]
    applied_changes: pulumi.Output[int]
    """Changes the last push applied (0: the switch already ran its configuration)."""
    diff: pulumi.Output[str]
    """The last push's difference, as shown before applying."""
    notes: pulumi.Output[list[str]]

    def __init__(self, name: str, args: SwitchConfigArgs, opts: pulumi.ResourceOptions | None = None):
        props = {key: getattr(args, key) for key in (*INPUT_KEYS, *OPTIONAL_INPUT_KEYS)}
        super().__init__(SwitchConfigProvider(), name, props | dict.fromkeys(OUTPUT_KEYS), opts)


def desired_configs(site: Site) -> dict[str, tuple[str, dict[str, str]]]:
    """Switch name -> (switch OS, desired configuration), for every managed switch."""
    from rackform.fabric.context import switch_targets
    from rackform.fabric.dispatch import driver_class
    from rackform.fabric.driver import Connection

    configs = {}
    for name, target in switch_targets(site).items():
        driver = driver_class(target.os)(Connection(host=target.address or name, username=target.username), name)
        configs[name] = (target.os, driver.render(target.context))
    return configs


def _driver(props: dict[str, Any]):
    from pathlib import Path

    from rackform.fabric.context import connection_for, credentials_from_environment, switch_targets
    from rackform.fabric.dispatch import connect
    from rackform.model.loader import load_site

    site = load_site(props["site"], Path(props["root"]))
    target = switch_targets(site, [props["switch"]])[props["switch"]]
    credentials = credentials_from_environment(site.name)
    return connect(props["os"], connection_for(target, credentials, props.get("endpoint")), props["switch"])


def push(props: dict[str, Any]) -> dict[str, Any]:
    """Apply `props['config']` to the switch (show, apply, save); the resource's outputs.

    Raises the driver's FabricError (ApplyFailed after a rollback) when it cannot.
    """
    from rackform.fabric.sync import sync

    shown: list[str] = []
    with _driver(props) as driver:
        result = sync(driver, dict(props["config"]), show=shown.append)
    for line in shown:
        pulumi.log.info(line)
    return {
        **{key: props.get(key) for key in (*INPUT_KEYS, *OPTIONAL_INPUT_KEYS)},
        "applied_changes": len(result.diff.changes) if result.applied else 0,
        "diff": result.diff.text,
        "notes": result.notes,
    }
