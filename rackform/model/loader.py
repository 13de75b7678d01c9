"""Catalog + site design + inventory -> one `Site`, parsed once.

Every problem is reported as `file:line: key: message` (a `BadInput` holding
`SourceError`s). Structural problems stop the load; semantic ones (power, addresses,
cabling, RoCE ...) are left to `rackform.checks`, which read the finished model.
"""

from __future__ import annotations

import difflib
import gc
from pathlib import Path
from typing import Any

from rackform.model import layers, schema
from rackform.model.site import (
    HOST_ROLE_BY_CATEGORY,
    SWITCH_PORT_PATTERNS,
    DATA_SETS_ROOT,
    Cable,
    DataSet,
    Device,
    Endpoint,
    Host,
    Port,
    Rack,
    Site,
    Switch,
)
from rackform.model.input_files import display_path, load_yaml, parse, show_paths_under
from rackform.model.inventory import load_inventory
from rackform.model.source import BadInput, LineDict, LineList, Loc, SourceError


def site_paths(root: Path, site: str) -> tuple[Path, Path, Path]:
    """Where a site's catalog, design and inventory live under the repo root."""
    return root / "topologies" / "blocks", root / "topologies" / "sites" / f"{site}.yaml", root / "inventories" / site


# ---------------------------------------------------------------- catalog


def load_catalog(blocks_dir: Path) -> dict[str, schema.BlockType]:
    """Every `topologies/blocks/*.yaml`, keyed by block name."""
    catalog: dict[str, schema.BlockType] = {}
    errors: list[SourceError] = []
    for path in sorted(blocks_dir.glob("*.yaml")):
        try:
            data = load_yaml(path)
            block = parse(schema.BlockType, data, Loc(display_path(path), 1))
            _check_block_shape(block, data)
        except SourceError as exc:
            errors.append(exc)
            continue
        except BadInput as exc:
            errors.extend(exc.errors)
            continue
        if block.name != path.stem:
            errors.append(SourceError(data.key_loc("name"), "name", f"must match the file name '{path.stem}'"))
        catalog[block.name] = block
    if errors:
        raise BadInput(errors)
    if not catalog:
        raise BadInput([SourceError(Loc(display_path(blocks_dir), 0), "", "no building blocks found (*.yaml)")])
    return catalog


def site_catalog(blocks_dir: Path) -> dict[str, schema.BlockType]:
    """The catalog a site is built from: rackform's built-in blocks, with the site repo's own
    `topologies/blocks/*.yaml` added to them or replacing the built-in block of the same name."""
    from rackform.paths import BUILTIN_BLOCKS_DIR

    blocks_dir = Path(blocks_dir)
    own = blocks_dir.is_dir() and any(blocks_dir.glob("*.yaml"))
    if own and blocks_dir.resolve() == BUILTIN_BLOCKS_DIR.resolve():
        return load_catalog(blocks_dir)  # this checkout: the built-in catalog is the repo's own
    catalog = load_catalog(BUILTIN_BLOCKS_DIR)
    return {**catalog, **load_catalog(blocks_dir)} if own else catalog


def _check_block_shape(block: schema.BlockType, data: LineDict) -> None:
    if block.category == "switch":
        if block.switch is None or block.node is not None:
            raise SourceError(data.loc, "switch", "a switch block has a 'switch' section and no 'node' section")
    elif block.node is None or block.switch is not None:
        raise SourceError(data.loc, "node", f"a {block.category} block has a 'node' section and no 'switch' section")
    if block.storage is not None and block.category != "storage":
        raise SourceError(data.key_loc("storage"), "storage",
                          f"only storage blocks serve data sets; a {block.category} block has no 'storage' section")


# ---------------------------------------------------------------- site


def _port_map(groups: list[schema.PortGroup]) -> dict[str, Port]:
    return {name: Port(name, role, speed) for name, role, speed in _port_specs(groups)}


def _port_specs(groups: list[schema.PortGroup]) -> list[tuple[str, str, int]]:
    """(name, role, speed) of each port the groups give, in order."""
    return [(group.pattern.replace("{n}", str(n)), group.role, group.speed_gbps)
            for group in groups for n in range(group.first, group.first + group.count)]


def _switch_ports(block: schema.BlockType, os_name: str) -> dict[str, Port]:
    assert block.switch is not None
    pattern, speed = SWITCH_PORT_PATTERNS[os_name], block.switch.speed_gbps
    names = (pattern.format(n=n) for n in range(1, block.switch.ports + 1))
    return {name: Port(name, "fabric", speed) for name in names}


def _parse_endpoint(text: str) -> Endpoint:
    device, port = text.split(":", 1)
    return Endpoint(device, port)


def load_site(site: str, root: Path | str = Path(".")) -> Site:
    """Load and resolve one site; raise BadInput listing every problem found."""
    root = Path(root)
    show_paths_under(root)
    # The load only allocates: pausing the cyclic GC saves ~40 % on large sites.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        site = _load_site(site, root)
    except SourceError as exc:  # a file that could not be read at all
        raise BadInput([exc]) from None
    finally:
        if gc_was_enabled:
            gc.enable()
    # The model lives as long as the run: keep later collections from re-walking it
    # (without this the checks' cost grew 19-27x from 1k to 10k nodes).
    gc.freeze()
    return site


def load_design(root: Path, site_path: Path) -> tuple[schema.SiteFile, Any]:
    """The site file over its profiles and the fleet defaults (rackform.model.layers), parsed.

    Returns the design and the merged line-aware data, whose `key_loc` names the file and
    line that set each key, so schema errors point there too."""
    raw = layers.layered_site(load_yaml(site_path), root, load_yaml, display_path)
    return parse(schema.SiteFile, raw, Loc(display_path(site_path), 1)), raw


def _load_site(site: str, root: Path) -> Site:
    blocks_dir, site_path, inventory = site_paths(root, site)
    if not site_path.exists():
        known = sorted(p.stem for p in site_path.parent.glob("*.yaml"))
        raise BadInput(
            [SourceError(Loc(display_path(site_path), 0), "", f"no such site '{site}'; known sites: {', '.join(known) or 'none'}")]
        )
    catalog = site_catalog(blocks_dir)
    design, raw = load_design(root, site_path)
    errors: list[SourceError] = []

    if design.site != site:
        errors.append(SourceError(raw.key_loc("site"), "site", f"must match the file name '{site}'"))

    racks, hosts, switches, unresolved = _resolve_racks(design, raw, catalog, errors)
    networks = {net.name: net for net in design.networks}
    network_locs = {}
    for index, net in enumerate(design.networks):
        loc = raw["networks"].item_loc(index)
        if net.name in network_locs:
            errors.append(SourceError(loc, f"networks[{net.name}]", f"network name used twice (first at line {network_locs[net.name].line})"))
        network_locs[net.name] = loc
    for switch in switches.values():
        if switch.fabric is not None and switch.fabric not in networks:
            errors.append(SourceError(switch.loc, f"{switch.name}.switch.fabric", f"no network named '{switch.fabric}'; networks: {', '.join(networks)}"))

    cables = [
        Cable(_parse_endpoint(cable.a), _parse_endpoint(cable.b), raw["cabling"].item_loc(index))
        for index, cable in enumerate(design.cabling)
    ]

    data_sets = _resolve_data_sets(design, raw, hosts)
    group_vars, extra_keys, user_inventory = load_inventory(inventory, hosts, switches, unresolved, errors)
    if errors:
        raise BadInput(errors)
    return Site(
        name=design.site,
        description=design.description,
        power_basis=design.power_basis,
        racks=racks,
        networks=networks,
        network_locs=network_locs,
        fabric=design.fabric,
        fabric_loc=layers.site_section_loc(raw, "fabric"),
        cables=cables,
        kubernetes=design.kubernetes,
        kubernetes_loc=raw.key_loc("kubernetes") if design.kubernetes else None,
        hosts=hosts,
        switches=switches,
        catalog=catalog,
        group_vars=group_vars,
        site_path=site_path,
        inventory_path=inventory,
        loc=raw.loc,
        extra_inventory_keys=extra_keys,
        user_inventory=user_inventory,
        provisioning=design.provisioning,
        origins=layers.origins(raw),
        mirror=design.mirror,
        mirror_loc=raw.key_loc("mirror") if design.mirror else None,
        lab_only=design.lab_only,
        data_sets=data_sets,
    )


def _resolve_data_sets(design, raw, hosts: dict[str, Host]) -> list[DataSet]:
    """The site's `data_sets:` with their defaults filled in, each with the line that declares it.

    Names are not checked here (rackform.checks.storage reports a server or client that is
    not a fitting host of the site, at these lines)."""
    if not design.data_sets:
        return []
    entries = raw["data_sets"]
    gpu_hosts = tuple(sorted(host.name for host in hosts.values() if host.role == "gpu"))
    return [_data_set(spec, entries.item_loc(index), entries[index], gpu_hosts)
            for index, spec in enumerate(design.data_sets)]


def _data_set(spec: schema.DataSet, loc: Loc, entry: LineDict, gpu_hosts: tuple[str, ...]) -> DataSet:
    clients, client_locs = gpu_hosts, ()
    if spec.clients is not None:
        # sorted, and each name once (at its first line), so the rendered exports do not
        # change with the order a person listed them in
        listed = entry["clients"]
        first: dict[str, Loc] = {}
        for index, name in enumerate(spec.clients):
            first.setdefault(name, listed.item_loc(index))
        clients = tuple(sorted(first))
        client_locs = tuple(first[name] for name in clients)
    return DataSet(
        name=spec.name, tenant=spec.tenant, size_gb=spec.size_gb, mode=spec.mode, server=spec.server,
        path=spec.path or f"{DATA_SETS_ROOT}/{spec.name}", clients=clients, loc=loc, client_locs=client_locs,
    )


def _resolve_racks(design, raw, catalog, errors):
    racks: list[Rack] = []
    hosts: dict[str, Host] = {}
    switches: dict[str, Switch] = {}
    device_names: dict[str, Loc] = {}
    unresolved: set[str] = set()  # names of devices already reported, so the inventory does not repeat them
    port_specs: dict[str, list[tuple[str, str, int]]] = {}
    for rack_index, rack in enumerate(design.racks):
        raw_rack = raw["racks"][rack_index]
        devices: list[Device] = []
        raw_devices = raw_rack.get("devices") or LineList()
        for index, placed in enumerate(rack.devices):
            loc = raw_devices.item_loc(index)
            block = catalog.get(placed.block)
            unresolved.update(placed.hosts or [placed.name])
            if block is None:
                close = difflib.get_close_matches(placed.block, catalog, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                errors.append(SourceError(raw_devices[index].key_loc("block"), f"racks[{rack.name}].devices[{placed.name}].block", f"unknown block type '{placed.block}'{hint}; catalog: {', '.join(sorted(catalog))}"))
                continue
            if placed.name in device_names:
                errors.append(SourceError(loc, f"devices[{placed.name}]", f"device name used twice (first at {device_names[placed.name]})"))
                continue
            device_names[placed.name] = loc
            device = _place_device(rack.name, placed, block, loc, raw_devices[index], errors)
            if device is None:
                continue
            unresolved.difference_update(placed.hosts or [placed.name])
            devices.append(device)
            if placed.switch is not None:
                switches[device.name] = Switch(
                    name=device.name, device=device, role=placed.switch.role, os=placed.switch.os,
                    fabric=placed.switch.fabric, asn=placed.switch.asn,
                    ports=_switch_ports(block, placed.switch.os), loc=loc,
                )
                continue
            assert block.node is not None
            for host_name in device.host_names:
                if host_name in hosts or host_name in device_names and host_name != device.name:
                    errors.append(SourceError(loc, f"devices[{placed.name}].hosts", f"host name '{host_name}' used twice"))
                    continue
                specs = port_specs.get(block.name)
                if specs is None:  # each block's port names worked out once, not once per host
                    specs = port_specs[block.name] = _port_specs(block.node.ports)
                hosts[host_name] = Host(
                    name=host_name, device=device, role=HOST_ROLE_BY_CATEGORY[block.category],
                    ports={name: Port(name, role, speed) for name, role, speed in specs}, loc=loc,
                )
        racks.append(
            Rack(
                name=rack.name, height_u=rack.height_u, power_budget_w=rack.power_budget_w,
                devices=devices, loc=raw["racks"].item_loc(rack_index),
                budget_loc=raw_rack.key_loc("power_budget_w"),
                height_loc=raw_rack.key_loc("height_u") if "height_u" in raw_rack else raw_rack.loc,
            )
        )
    return racks, hosts, switches, unresolved


def _place_device(rack_name, placed, block, loc, raw_device, errors) -> Device | None:
    key = f"racks[{rack_name}].devices[{placed.name}]"
    if block.category == "switch" and placed.switch is None:
        errors.append(SourceError(loc, f"{key}.switch", f"block '{block.name}' is a switch: give switch: {{role, os}}"))
        return None
    if block.category != "switch" and placed.switch is not None:
        errors.append(SourceError(raw_device.key_loc("switch"), f"{key}.switch", f"block '{block.name}' is a {block.category} block, not a switch"))
        return None
    if placed.switch is not None and block.switch is not None and placed.switch.os not in block.switch.os:
        errors.append(SourceError(raw_device.key_loc("switch"), f"{key}.switch.os", f"'{placed.switch.os}' does not run on {block.name}; it ships with: {', '.join(block.switch.os)}"))
        return None
    if placed.hosts is not None:
        if placed.switch is not None:
            errors.append(SourceError(raw_device.key_loc("hosts"), f"{key}.hosts", "switches have no host list"))
            return None
        if len(placed.hosts) > block.nodes:
            errors.append(SourceError(raw_device.key_loc("hosts"), f"{key}.hosts", f"{len(placed.hosts)} hosts given but a {block.name} block holds {block.nodes} node(s)"))
            return None
        host_names = list(placed.hosts)
    elif placed.switch is not None or block.nodes == 1:
        host_names = [placed.name]
    else:
        host_names = [f"{placed.name}-n{i}" for i in range(1, block.nodes + 1)]
    return Device(
        name=placed.name, block=block, rack=rack_name, position_u=placed.position_u,
        host_names=host_names, loc=loc, switch=placed.switch, roce_overrides=placed.roce_overrides,
        storage=placed.storage,
    )
