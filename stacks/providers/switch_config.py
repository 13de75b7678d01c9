"""`SwitchConfig`: RETIRED. Kept importable because existing Pulumi state names its type.

Switches are configured by the fabric stage (fabric.yml: the switch_baseline role on
Cumulus, the onyx_switch role on Onyx: difference, push, save, rollback), which the
`Playbook` resource of stage `fabric` runs through the same stage runner as `rackform
deploy`. A SwitchConfig pushing the same switch would be a second owner and a second
push path, so this provider no longer talks to any switch:

- `create`/`update` only remember their inputs (outputs: `applied_changes` 0, an empty
  `diff`, a note saying who configures the switch); a stack that still declares one
  previews and applies cleanly while the program drops it;
- `read` returns the stored state (no switch is read);
- `delete` forgets: nothing on the switch is undone.

Shipped like `providers.playbook.PlaybookProvider`: dill pickles the instance by
reference, so it holds no state.
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

from providers.pickling import one_sorting_pickler

if TYPE_CHECKING:
    from rackform.model.site import Site

INPUT_KEYS = ("site", "switch", "os", "root", "config")
OPTIONAL_INPUT_KEYS = ("endpoint",)
OUTPUT_KEYS = ("applied_changes", "diff", "notes")
SWITCH_OSES = ("cumulus", "onyx")
CONFIGURED_BY = "configured by the fabric stage (fabric.yml); this resource only remembers its inputs"


@dataclass(frozen=True, slots=True)
class SwitchConfigArgs:
    site: pulumi.Input[str]
    """Site name (topologies/sites/<site>.yaml)."""
    switch: pulumi.Input[str]
    """The managed switch's name in the design."""
    os: pulumi.Input[str]
    """Its switch OS (cumulus, onyx)."""
    root: pulumi.Input[str]
    """Repo root holding topologies/ and inventories/."""
    config: pulumi.Input[dict[str, str]]
    """The switch's rendered configuration, part -> text (`desired_configs`)."""
    endpoint: pulumi.Input[str] | None = None
    """Unused; kept so stored inputs still check."""


class SwitchConfigProvider(ResourceProvider):
    """Remembers one switch's rendered configuration; never pushes it (the fabric stage does)."""

    serialize_as_secret_always = False  # no secret in the pickled provider or its inputs

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [CheckFailure(key, "required") for key in INPUT_KEYS if not news.get(key)]
        if news.get("os") and news["os"] not in SWITCH_OSES:
            failures.append(CheckFailure("os", f"unknown switch OS '{news['os']}'; supported: {', '.join(SWITCH_OSES)}"))
        return CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [key for key in ("config", "os", "endpoint") if olds.get(key) != news.get(key)]
        return DiffResult(changes=bool(changed), replaces=[], stables=["site", "switch"],
                          delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=f"{props['site']}/{props['switch']}", outs=remembered(props))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=remembered(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Forgets only: the switch keeps its configuration (un-configuring a fabric switch
        # is a separate, explicit operation).
        return None


class SwitchConfig(Resource, module="rackform", name="SwitchConfig"):
    """Retired (type `pulumi-python:dynamic/rackform:SwitchConfig`): see the module doc."""

    site: pulumi.Output[str]
    switch: pulumi.Output[str]
    os: pulumi.Output[str]
    config: pulumi.Output[dict[str, str]]
    applied_changes: pulumi.Output[int]
    """Always 0: nothing is pushed by this resource."""
    diff: pulumi.Output[str]
    notes: pulumi.Output[list[str]]

    def __init__(self, name: str, args: SwitchConfigArgs, opts: pulumi.ResourceOptions | None = None):
        props = {key: getattr(args, key) for key in (*INPUT_KEYS, *OPTIONAL_INPUT_KEYS)}
        with one_sorting_pickler():  # providers/pickling.py: linear, and no RecursionError at 1,000 nodes
            super().__init__(SwitchConfigProvider(), name, props | dict.fromkeys(OUTPUT_KEYS), opts)


def remembered(props: dict[str, Any]) -> dict[str, Any]:
    """The resource's outputs: its inputs, and that nothing was pushed."""
    return {
        **{key: props.get(key) for key in (*INPUT_KEYS, *OPTIONAL_INPUT_KEYS)},
        "applied_changes": 0,
        "diff": "",
        "notes": [f"{props.get('switch')}: {CONFIGURED_BY}"],
    }


def desired_configs(site: Site) -> dict[str, tuple[str, dict[str, str]]]:
    """Switch name -> (switch OS, {review file: text}): each managed switch's rendered
    configuration (`switch_configs/<switch>.<os>.conf`), as the fabric stage pushes it."""
    from rackform.render.groups import host_groups, managed_switches
    from rackform.render.project import build_inventory
    from rackform.render.switch_configs import switch_config_files

    inventory = build_inventory(site)
    files = switch_config_files(inventory.switch_vars, host_groups(inventory.tree), inventory.group_vars,
                                inventory.server_vars)
    configs = {}
    for switch in managed_switches(site):
        path = f"switch_configs/{switch.name}.{switch.os}.conf"
        configs[switch.name] = (switch.os, {path: files[path]})
    return configs
