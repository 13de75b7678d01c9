"""`switch_configs/<switch>.<os>.conf`: the configuration of every managed switch, for review.

Nothing here pushes anything: the fabric stage does (Ansible: the switch_baseline
role on Cumulus, the onyx_switch role on Onyx), from the inventory. The review files
render those roles' own templates, so a reviewed file and what the stage pushes
cannot drift apart. They are rendered from each switch's inventory variables merged
the way Ansible merges them (group_vars by group depth, then host_vars), the one
place rackform does that, and only to show the values the stage will use.

A leaf's bridge towards the servers holds their gateways, which come from the
servers' own fabric addresses: pass `server_vars` so the render sees them, as
Ansible's `hostvars` does.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import jinja2
import yaml

from rackform.render.assets import ROLES_DIR, project_templates, role_templates
from rackform.render.group_vars import ConcernFiles

ROLE = "switch_baseline"
ONYX_TEMPLATE = "onyx_switch/templates/onyx.conf.j2"


@dataclass(frozen=True, slots=True)
class CumulusFile:
    """One file the switch_baseline role installs on a Cumulus switch."""

    title: str
    template: str
    """Under roles/switch_baseline/templates/."""
    path_default: str | None
    """The role default naming the file's path on the switch (None: `fixed_path`)."""
    fixed_path: str | None = None
    review: bool = True
    """Shown in switch_configs/<switch>.cumulus.conf."""
    fabric_only: bool = False
    """Only on leaves and spines (group fabric_switches)."""


# In the order the role installs them.
CUMULUS_FILES = (
    CumulusFile("/etc/network/interfaces fragment", "interfaces.j2", "switch_baseline_interfaces_file"),
    CumulusFile("/etc/network/interfaces fragment: the bridge towards the servers", "servers.intf.j2",
                "switch_baseline_servers_file"),
    CumulusFile("port settings script", "port-settings.sh.j2", "switch_baseline_port_settings_script",
                review=False),
    CumulusFile("/etc/frr/frr.conf", "frr.conf.j2", None, fixed_path="/etc/frr/frr.conf"),
    CumulusFile("QoS datapath: lossless RoCE", "qos_features.conf.j2", "switch_baseline_qos_file",
                fabric_only=True),
)


def merged_vars(name: str, groups: dict[str, int], group_vars: ConcernFiles, own: dict) -> dict:
    """A machine's variables as Ansible sees them: shallow groups first, then its host_vars."""
    merged: dict = {}
    for group in sorted(groups, key=lambda group: (groups[group], group)):
        for values in group_vars.get(group, {}).values():
            merged.update(values)
    merged.update(own)
    merged["inventory_hostname"] = name
    return merged


@lru_cache(maxsize=1)
def role_defaults() -> dict:
    """switch_baseline's defaults that are plain values (not templated): file paths, bridge name."""
    path = ROLES_DIR / ROLE / "defaults" / "main.yml"
    defaults = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {key: value for key, value in defaults.items() if "{{" not in str(value)}


_DICT_ATTRIBUTES = frozenset(dir(dict))
"""What `getattr` finds on a plain dict (its methods); any other name fails with AttributeError."""


def _dict_first_getattr(environment: jinja2.Environment):
    """Jinja's `getattr` (`link.peer`: the attribute, else the item, else undefined) with plain
    dicts answered first: their only attributes are dict's methods, so a key goes straight
    to the item instead of through an AttributeError per lookup. Same result for every object."""
    general = environment.getattr
    undefined = environment.undefined

    def getattr_(obj, attribute):
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return undefined(obj=obj, name=attribute)
        return general(obj, attribute)

    return getattr_


@lru_cache(maxsize=1)
def _role_environment() -> jinja2.Environment:
    """The role templates' environment plus `quote`, the one Ansible filter they use."""
    environment = role_templates().overlay()
    environment.filters = {**environment.filters, "quote": shlex.quote}
    environment.getattr = _dict_first_getattr(environment)
    return environment


@lru_cache(maxsize=None)
def _role_template(name: str) -> jinja2.Template:
    """A role template, compiled and looked up once per process (the assets do not change)."""
    return _role_environment().get_template(name)


def switch_context(
    name: str,
    groups: dict[str, int],
    group_vars: ConcernFiles,
    own: dict,
    server_vars: Mapping[str, dict] | None = None,
) -> dict:
    """What a switch's templates see: role defaults, merged vars, group_names, peers' hostvars."""
    context = {**role_defaults(), **merged_vars(name, groups, group_vars, own)}
    context["group_names"] = sorted(group for group in groups if group != "all")
    servers = server_vars or {}
    peers = {link["peer"] for link in own.get("switch_ports", {}).values()}
    context["hostvars"] = {peer: servers[peer] for peer in sorted(peers) if peer in servers}
    return context


def cumulus_path(part: CumulusFile, context: Mapping) -> str:
    return part.fixed_path or context[part.path_default]


def cumulus_parts(context: Mapping) -> list[CumulusFile]:
    """The files the role installs on this switch."""
    fabric = "fabric_switches" in context.get("group_names", ())
    return [part for part in CUMULUS_FILES if fabric or not part.fabric_only]


SERVER_BRIDGE_VARIABLE = "rackform_review_server_bridge"
"""What servers.intf.j2 takes instead of working out the bridge's ports and gateways itself."""
SERVER_BRIDGE_TEMPLATE = "servers.intf.j2"

_CIDR = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})", re.ASCII)


@dataclass(frozen=True, slots=True)
class ServerBridge:
    """servers.intf.j2's `servers`: the ports towards servers, in switch_ports' order, and
    their gateways (sorted, each once)."""

    ports: list[str]
    gateways: list[str]


def _gateway(cidr: object, memo: dict[str, str]) -> str | None:
    """The template's `gateway` macro ("10.20.1.15/24" -> "10.20.1.1/24"), or None for any
    text the macro might read differently (the template then works it out itself)."""
    if type(cidr) is not str:
        return None
    known = memo.get(cidr)
    if known is not None:
        return known
    match = _CIDR.fullmatch(cidr)
    if match is None:
        return None
    *octets, prefix = (int(group) for group in match.groups())
    if prefix > 32 or max(octets) > 255:
        return None
    size = 2 ** (32 - prefix)
    first = ((((octets[0] * 256 + octets[1]) * 256 + octets[2]) * 256 + octets[3]) // size) * size + 1
    gateway = f"{first // 16777216}.{first // 65536 % 256}.{first // 256 % 256}.{first % 256}/{match[5]}"
    memo[cidr] = gateway
    return gateway


def server_bridge(context: Mapping) -> ServerBridge | None:
    """What servers.intf.j2's loop finds, worked out in Python (one macro call per server
    port inside Jinja was most of the switch configurations' time), or None where the
    inputs are anything but the plain dicts and addresses rackform renders: the template's
    own loop then decides, errors included. tests/unit/test_render_same_output.py holds the
    two to the same text."""
    switch_ports, hostvars = context.get("switch_ports"), context.get("hostvars")
    if type(switch_ports) is not dict or type(hostvars) is not dict:
        return None
    ports: list[str] = []
    gateways: set[str] = set()
    memo: dict[str, str] = {}
    for port, link in switch_ports.items():
        if type(link) is not dict or "bgp_peer" not in link or "peer" not in link:
            return None
        if link["bgp_peer"]:
            continue
        ports.append(port)
        peer = hostvars.get(link["peer"], {})
        fabric_ports = peer.get("fabric_ports", {}) if type(peer) is dict else None
        if type(fabric_ports) is not dict or "peer_port" not in link:
            return None
        fabric_port = fabric_ports.get(link["peer_port"], {})
        if type(fabric_port) is not dict:
            return None
        address = fabric_port.get("address")
        if address:
            gateway = _gateway(address, memo)
            if gateway is None:
                return None
            gateways.add(gateway)
    return ServerBridge(ports, sorted(gateways))


def cumulus_file_text(part: CumulusFile, context: Mapping) -> str:
    template = _role_template(f"{ROLE}/templates/{part.template}")
    if part.template == SERVER_BRIDGE_TEMPLATE and SERVER_BRIDGE_VARIABLE not in context:
        bridge = server_bridge(context)
        if bridge is not None:
            return template.render(context, **{SERVER_BRIDGE_VARIABLE: bridge})
    return template.render(context)


def cumulus_files(context: Mapping) -> dict[str, str]:
    """Path on the switch -> content, for every file the role installs there."""
    return {cumulus_path(part, context): cumulus_file_text(part, context) for part in cumulus_parts(context)}


def onyx_config_text(context: Mapping) -> str:
    """The onyx_switch role's template: Onyx CLI lines (with `##` comments), ending with
    `configuration write`."""
    return _role_template(ONYX_TEMPLATE).render(context)


def _cumulus_review(name: str, context: dict) -> str:
    parts = [
        {"title": part.title, "template": part.template, "text": cumulus_file_text(part, context)}
        for part in cumulus_parts(context)
        if part.review
    ]
    return (
        project_templates()
        .get_template("switch_configs/cumulus.conf.j2")
        .render(switch=name, site_name=context["site_name"], parts=parts)
    )


def _onyx_review(name: str, context: dict) -> str:
    return onyx_config_text(context)


RENDERERS = {"cumulus": _cumulus_review, "onyx": _onyx_review}


def switch_config_files(
    switch_vars: dict[str, dict],
    host_groups: dict[str, dict[str, int]],
    group_vars: ConcernFiles,
    server_vars: Mapping[str, dict] | None = None,
) -> dict[str, str]:
    """switch_configs/<name>.<os>.conf for every managed switch."""
    files = {}
    for name, own in switch_vars.items():
        os_name = own["switch_os"]
        context = switch_context(name, host_groups.get(name, {"all": 0}), group_vars, own, server_vars)
        files[f"switch_configs/{name}.{os_name}.conf"] = RENDERERS[os_name](name, context)
    return files
