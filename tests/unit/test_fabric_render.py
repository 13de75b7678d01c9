"""What the fabric stage's switch templates render from the shipped lab site, through
rackform's review renderer (`rackform.render.switch_configs`): the Cumulus files (the
switch_baseline role's templates) and the Onyx CLI lines (the onyx_switch role's
template), with the RoCE values of `rackform.checks.roce.switch_settings`."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import ipaddress
from pathlib import Path

import pytest

from rackform.checks.roce import switch_settings
from rackform.checks.roce import SwitchRoceSettings
from rackform.fabric import onyx_lines as onyx_line_model
from rackform.model.loader import load_site
from rackform.model.schema import RoceOverrides
from rackform.render.groups import host_groups, managed_switches
from rackform.render.project import build_inventory
from rackform.render.switch_configs import (
    cumulus_files,
    merged_vars,
    onyx_config_text,
    role_defaults,
    switch_config_files,
    switch_context,
)

ROOT = Path(__file__).resolve().parents[2]
HOST_SCRIPT = ROOT / "roles" / "roce_host" / "files" / "rackform-roce-host"
SERVERS_FILE = role_defaults()["switch_baseline_servers_file"]
QOS_FILE = role_defaults()["switch_baseline_qos_file"]


@pytest.fixture(scope="module")
def lab():
    return load_site("lab", ROOT)


def switch_contexts(site) -> dict[str, dict]:
    """Switch -> the variables its templates see (the inventory, merged as Ansible does)."""
    inventory = build_inventory(site)
    groups = host_groups(inventory.tree)
    return {switch.name: switch_context(switch.name, groups.get(switch.name, {"all": 0}), inventory.group_vars,
                                        inventory.switch_vars[switch.name], inventory.server_vars)
            for switch in managed_switches(site)}


@pytest.fixture(scope="module")
def targets(lab):
    return switch_contexts(lab)


def rendered(targets, switch: str) -> dict[str, str]:
    """Path on the switch -> content, for every file the switch_baseline role installs there."""
    return cumulus_files(targets[switch])


def roce_vars(settings: SwitchRoceSettings) -> dict:
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


def host_script():
    loader = importlib.machinery.SourceFileLoader("rackform_roce_host", str(HOST_SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


# ---------------------------------------------------------------- gateways: leaf and host agree


GATEWAYS = [
    ("10.20.1.15/24", "10.20.1.1/24"),
    ("10.20.17.200/20", "10.20.16.1/20"),
    ("192.168.3.77/26", "192.168.3.65/26"),
    ("10.0.0.6/30", "10.0.0.5/30"),
]


def _servers_file(targets, address: str) -> str:
    context = copy.deepcopy(targets["leaf-1"])
    context["hostvars"]["gpu-1"]["fabric_ports"]["fab0"]["address"] = address
    context["hostvars"] = {"gpu-1": context["hostvars"]["gpu-1"]}
    return cumulus_files(context)[SERVERS_FILE]


@pytest.mark.parametrize("address, gateway", GATEWAYS)
def test_leaf_bridge_holds_the_first_address_of_each_server_subnet(targets, address, gateway):
    assert f"    address {gateway}" in _servers_file(targets, address).splitlines()


@pytest.mark.parametrize("address, gateway", GATEWAYS)
def test_host_script_routes_via_the_same_first_address(address, gateway):
    interface = ipaddress.IPv4Interface(address)
    assert f"{host_script().gateway(interface)}/{interface.network.prefixlen}" == gateway


# ---------------------------------------------------------------- Cumulus files


@pytest.mark.parametrize(
    "switch, line",
    [
        ("leaf-1", "iface br-servers"),
        ("leaf-1", "    bridge-ports swp1 swp2 swp3 swp4 swp5 swp6"),
        ("leaf-1", "    address 10.20.1.1/24"),
        ("leaf-1", "    mtu 9216"),
        ("leaf-2", "    address 10.20.2.1/24"),
    ],
)
def test_leaf_bridges_its_server_ports(targets, switch, line):
    assert line in rendered(targets, switch)[SERVERS_FILE].splitlines()


def test_uplink_stays_out_of_the_server_bridge(targets):
    assert "swp31" not in rendered(targets, "leaf-1")[SERVERS_FILE]


def test_spine_has_no_server_bridge(targets):
    assert "iface" not in rendered(targets, "spine-1")[SERVERS_FILE]


@pytest.mark.parametrize(
    "line",
    [
        "ip prefix-list FABRIC seq 10 permit 10.20.0.0/16 le 32",
        "route-map FABRIC-CONNECTED permit 10",
        "  redistribute connected route-map FABRIC-CONNECTED",
        " neighbor swp31 interface peer-group fabric",
    ],
)
def test_bgp_announces_only_the_fabric_subnets(targets, line):
    assert line in rendered(targets, "leaf-1")["/etc/frr/frr.conf"].splitlines()


def test_bgp_never_announces_the_management_network(targets):
    assert "10.10.0.0" not in rendered(targets, "leaf-1")["/etc/frr/frr.conf"]


@pytest.mark.parametrize(
    "line",
    [
        "traffic.packet_priority_source_set = [dscp]",
        "traffic.cos_3.priority_source.dscp = [26]",
        "traffic.cos_6.priority_source.dscp = [48]",
        "pfc.roce_ports.cos_list = [3]",
        "pfc.roce_ports.port_set = swp1,swp2,swp3,swp4,swp5,swp6,swp31",
        "ecn_red.roce_ports.cos_list = [3]",
        "ecn_red.roce_ports.ecn_enable = true",
        "ecn_red.roce_ports.min_threshold_bytes = 153600",
        "ecn_red.roce_ports.max_threshold_bytes = 1536000",
    ],
)
def test_datapath_file_makes_roce_lossless(targets, line):
    assert line in rendered(targets, "leaf-1")[QOS_FILE].splitlines()


def test_datapath_file_sets_the_pfc_watchdog_on_every_cabled_port(targets):
    # As Onyx gets `pfc-wd` per port: the design's fabric.switch.pfc_watchdog holds on both OSes.
    lines = rendered(targets, "leaf-1")[QOS_FILE].splitlines()
    assert "pfc_watchdog.port_group_list = [pfc_wd_port_group]" in lines
    assert "pfc_watchdog.pfc_wd_port_group.port_set = swp1,swp2,swp3,swp4,swp5,swp6,swp31" in lines


def test_datapath_file_without_the_watchdog_when_the_design_turns_it_off(targets):
    context = {**targets["leaf-1"], "fabric_switch_pfc_watchdog": False}
    assert "pfc_watchdog." not in cumulus_files(context)[QOS_FILE]


def test_datapath_file_only_on_fabric_switches(lab):
    inventory = build_inventory(lab)
    own = inventory.switch_vars["leaf-1"]
    context = switch_context("leaf-1", {"all": 0, "cumulus": 2}, inventory.group_vars, own, inventory.server_vars)
    assert QOS_FILE not in cumulus_files(context)


def test_review_file_shows_every_file_the_role_installs(lab, targets):
    inventory = build_inventory(lab)
    review = switch_config_files(inventory.switch_vars, host_groups(inventory.tree), inventory.group_vars,
                                 inventory.server_vars)["switch_configs/leaf-1.cumulus.conf"]
    pushed = rendered(targets, "leaf-1")
    shown = {path for path, text in pushed.items() if text in review}
    assert shown == set(pushed) - {role_defaults()["switch_baseline_port_settings_script"]}


# ---------------------------------------------------------------- RoCE values: one source


def _switch_roce_from_inventory(site, switch: str) -> dict:
    inventory = build_inventory(site)
    groups = host_groups(inventory.tree)[switch]
    merged = merged_vars(switch, groups, inventory.group_vars, inventory.switch_vars[switch])
    return {key: merged[key] for key in roce_vars(switch_settings(site.fabric))}


@pytest.mark.parametrize("overrides", [None, RoceOverrides(mtu=9100, ecn=True, pfc_priorities=[3])],
                         ids=["site values", "leaf-1 override"])
def test_switch_roce_values_are_the_inventorys(lab, overrides):
    site = copy.deepcopy(lab)
    site.switches["leaf-1"].device.roce_overrides = overrides
    from_settings = roce_vars(switch_settings(site.fabric, overrides))
    assert _switch_roce_from_inventory(site, "leaf-1") == from_settings


def test_override_reaches_the_rendered_files(lab):
    site = copy.deepcopy(lab)
    site.switches["leaf-1"].device.roce_overrides = RoceOverrides(mtu=9100)
    assert "    mtu 9100" in rendered(switch_contexts(site), "leaf-1")[role_defaults()["switch_baseline_interfaces_file"]]


# ---------------------------------------------------------------- Onyx lines


@pytest.fixture(scope="module")
def onyx_lines(targets):
    context = {**targets["leaf-2"], "switch_ports": {
        "Eth1/5": {"peer": "gpu-1", "peer_port": "fab1", "description": "gpu-1:fab1", "bgp_peer": False},
        "Eth1/7": {"peer": "spare", "peer_port": "p", "description": "spare port", "bgp_peer": False},
    }}
    return onyx_line_model.config_lines(onyx_config_text(context))


def test_onyx_config_enables_lldp(onyx_lines):
    assert "lldp" in onyx_lines


def test_onyx_description_with_spaces_is_quoted_as_the_switch_prints_it(onyx_lines):
    assert 'interface ethernet 1/7 description "spare port"' in onyx_lines


def test_onyx_desired_config_leaves_comments_and_the_save_command_out(onyx_lines):
    assert [line for line in onyx_lines if line.startswith("#") or line == "configuration write"] == []
