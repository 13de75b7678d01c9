"""What the drivers need per switch: its template variables and how to log in.

The variables are the rendered inventory's (`rackform.render.project.build_inventory`),
merged as Ansible merges them, with the servers' variables as `hostvars` (a leaf's
bridge holds its servers' gateways). The RoCE values of leaves and spines come from
`rackform.checks.roce.switch_settings`: the same effective settings (site values
with the device's overrides) that the preflight and consistency checks compare.

Credentials never come from the design or the inventory: an SSH key from
--private-key / $ANSIBLE_PRIVATE_KEY_FILE (else the site's lab key when its lab is
up here), a password from $RACKFORM_SWITCH_PASSWORD (Onyx logins), never a command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.checks.roce import SwitchRoceSettings, switch_settings
from rackform.fabric.driver import Connection, FabricError
from rackform.model.site import Site
from rackform.render.groups import host_groups, managed_switches
from rackform.render.project import build_inventory
from rackform.render.switch_configs import switch_context

PASSWORD_VARIABLE = "RACKFORM_SWITCH_PASSWORD"
KEY_VARIABLE = "ANSIBLE_PRIVATE_KEY_FILE"


@dataclass(frozen=True, slots=True)
class SwitchTarget:
    """One managed switch: its OS, template variables and management address."""

    name: str
    os: str
    context: dict[str, Any]
    address: str | None
    username: str
    become: bool


@dataclass(frozen=True, slots=True)
class Credentials:
    key_file: str | None = None
    password: str | None = field(default=None, repr=False)
    username: str | None = None
    """Overrides the inventory's ansible_user (Onyx logins are often `admin`)."""
    known_hosts: str | None = None


def roce_vars(settings: SwitchRoceSettings) -> dict[str, Any]:
    """A switch's effective RoCE settings as the fabric_switch_* variables its templates read."""
    return {
        "fabric_switch_trust": settings.trust,
        "fabric_switch_pfc_priorities": list(settings.pfc_priorities),
        "fabric_switch_dscp_to_priority": dict(sorted(settings.dscp_to_priority.items())),
        "fabric_switch_ecn_enabled": settings.ecn,
        "fabric_switch_ecn_min_kb": settings.ecn_min_kb,
        "fabric_switch_ecn_max_kb": settings.ecn_max_kb,
        "fabric_switch_pfc_watchdog": settings.pfc_watchdog,
        "fabric_switch_mtu": settings.mtu,
    }


def switch_targets(site: Site, names: list[str] | None = None) -> dict[str, SwitchTarget]:
    """The managed switches (all, or those named), in design order."""
    switches = {switch.name: switch for switch in managed_switches(site)}
    unknown = sorted(set(names or ()) - set(switches))
    if unknown:
        raise FabricError(f"site {site.name} has no managed switch {', '.join(unknown)}; "
                          f"managed switches: {', '.join(switches) or 'none'}")
    inventory = build_inventory(site)
    groups = host_groups(inventory.tree)
    targets = {}
    for name, switch in switches.items():
        if names and name not in names:
            continue
        own = inventory.switch_vars[name]
        context = switch_context(name, groups.get(name, {"all": 0}), inventory.group_vars, own,
                                 inventory.server_vars)
        if "fabric_switches" in context["group_names"]:
            context.update(roce_vars(switch_settings(site.fabric, switch.device.roce_overrides)))
        targets[name] = SwitchTarget(
            name=name, os=switch.os, context=context,
            address=context.get("ansible_host"),
            username=str(context.get("ansible_user", "root")),
            become=bool(context.get("ansible_become", False)) and context.get("ansible_user") != "root",
        )
    return targets


def lab_credentials(site_name: str) -> Credentials:
    """The site's lab key and known_hosts, when its lab is up on this machine."""
    from rackform.lab import state

    lab_state = state.load(site_name)
    if lab_state is None or not lab_state.ssh_key.exists():
        return Credentials()
    return Credentials(key_file=str(lab_state.ssh_key), known_hosts=str(lab_state.known_hosts))


def credentials_from_environment(site_name: str, key_file: Path | None = None,
                                 username: str | None = None) -> Credentials:
    """--private-key, else $ANSIBLE_PRIVATE_KEY_FILE, else the lab's key; $RACKFORM_SWITCH_PASSWORD."""
    password = os.environ.get(PASSWORD_VARIABLE) or None
    if key_file is None and os.environ.get(KEY_VARIABLE):
        key_file = Path(os.environ[KEY_VARIABLE])
    if key_file is not None:
        return Credentials(key_file=str(key_file), password=password, username=username)
    lab = lab_credentials(site_name)
    return Credentials(key_file=lab.key_file, password=password, username=username, known_hosts=lab.known_hosts)


def connection_for(target: SwitchTarget, credentials: Credentials, endpoint: str | None = None) -> Connection:
    """How to log in to the switch: its management address (or `endpoint`, HOST[:PORT])."""
    host, port = target.address, 22
    if endpoint:
        host, _, port_text = endpoint.partition(":")
        port = int(port_text) if port_text else 22
    if not host:
        raise FabricError(f"{target.name}: no management address in the inventory, and no endpoint given")
    return Connection(host=host, port=port, username=credentials.username or target.username,
                      password=credentials.password, key_file=credentials.key_file,
                      known_hosts=None if endpoint else credentials.known_hosts, become=target.become)
