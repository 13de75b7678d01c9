"""The site's Ansible inventory (`inventories/<site>/`), read the way Ansible reads it.

rackform owns a few keys and validates them: the per-host facts of `schema.HostVars`
(addresses, MACs, serial, fabric ports) and the site-wide settings of `schema.GroupVarsAll`
in the `all` group. Everything else is the user's and is carried unchanged into the
rendered inventory: any host or group variable, inline in `hosts.yml` or in
`host_vars/<host>.yml`, `host_vars/<host>/*.yml`, `group_vars/<group>.yml`,
`group_vars/<group>/*.yml`, and groups with `hosts:`, `children:` and `vars:` in `hosts.yml`.

Nothing is dropped silently: what cannot be carried is a `file:line: key: message` error.
Here are the problems one file shows (a near-miss of an owned key, a variable set twice,
a malformed group); those that need the whole design (a group named like a generated one
with other members, a variable rackform also renders, duplicate serials) are preflight
checks in `rackform.checks.inventory`.
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackform.model.kubespray_names import renamed_message
from rackform.model.plain_host_vars import PlainHostVars, plain_host_vars
from rackform.model import input_files, schema
from rackform.model.site import Host, Switch
from rackform.model.source import BadInput, LineDict, Loc, SourceError, VaultValue

HOST_KEYS = tuple(schema.HostVars.model_fields)
"""What rackform reads per host; every other host variable passes through."""
_HOST_KEY_SET = frozenset(HOST_KEYS)
SITE_KEYS = tuple(schema.GroupVarsAll.model_fields)
"""What rackform reads from the `all` group; every other group variable passes through."""
ANY_GROUP_KEYS = ("ansible_user", "ansible_ssh_private_key_file")
"""Site settings a host or another group may also set: Ansible's precedence applies them."""
ALL_ONLY_KEYS = tuple(key for key in SITE_KEYS if key not in ANY_GROUP_KEYS)
NEAR_MISS_CUTOFF = 0.85
"""How alike a variable must be to an owned key to be taken for a typo of it (`bmc_adress`)."""
VARS_SUFFIXES = (".yml", ".yaml", ".json")
RESERVED_GROUPS = ("all", "ungrouped")
GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GROUP_KEYS = ("hosts", "children", "vars")
_PLAIN_SCALARS = (str, int, float, bool, type(None), datetime.date)


@dataclass(slots=True)
class UserGroup:
    """A group declared in hosts.yml: direct members and child groups, each where it was written."""

    name: str
    loc: Loc
    hosts: dict[str, Loc] = field(default_factory=dict)
    children: dict[str, Loc] = field(default_factory=dict)


@dataclass(slots=True)
class GroupVars:
    """The user's variables of one group, gathered from hosts.yml and group_vars/."""

    values: dict[str, Any] = field(default_factory=dict)
    locs: dict[str, Loc] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    """Display paths the values came from, in reading order."""
    loc: Loc | None = None
    """Where the group's variables were first given: what an error about the group points at."""


@dataclass(slots=True)
class UserInventory:
    """What the user's inventory adds to the generated one."""

    groups: dict[str, UserGroup] = field(default_factory=dict)
    """Groups declared under `all.children` (at any depth), `all` left out."""
    group_vars: dict[str, GroupVars] = field(default_factory=dict)
    """group -> pass-through variables (`all` included)."""
    unlisted_host_vars: dict[str, Loc] = field(default_factory=dict)
    """host_vars of hosts hosts.yml does not list (Ansible would ignore them; a check refuses them)."""


class _Sourced(LineDict):
    """Variables gathered from several places: each key keeps the file and line that set it."""

    __slots__ = ("locs",)

    def key_loc(self, key: Any) -> Loc:
        return self.locs.get(key) or Loc(self.path, self.line)


def _sourced(where: Loc) -> _Sourced:
    data = _Sourced()
    data.path, data.line, data.lines, data.locs = where.path, where.line, {}, {}
    return data


def _add(target: _Sourced, values: LineDict, whose: str, errors: list[SourceError]) -> None:
    """Merge one source of variables into `target`; a key set twice is an error, never a silent override."""
    for key, value in values.items():
        where = values.key_loc(key)
        if key in target.locs:
            errors.append(SourceError(where, str(key), f"{whose} variable set twice (first at {target.locs[key]}); keep one"))
            continue
        target[key] = value
        target.locs[key] = where


def plain(value: Any, where: Loc, key: str) -> Any:
    """A YAML value as plain dicts, lists and scalars (what the rendered files are written from)."""
    if isinstance(value, dict):
        return {item_key: plain(item, where, f"{key}.{item_key}") for item_key, item in value.items()}
    if isinstance(value, list):
        return [plain(item, where, f"{key}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, _PLAIN_SCALARS):
        return value
    raise SourceError(where, key, f"a {type(value).__name__} value cannot be written to the rendered inventory; use a string")


def _vaulted(value: Any) -> bool:
    """Whether an Ansible `!vault` value is in `value` (at any depth)."""
    if isinstance(value, VaultValue):
        return True
    if isinstance(value, dict):
        return any(_vaulted(item) for item in value.values())
    if isinstance(value, list):
        return any(_vaulted(item) for item in value)
    return False


def _refused_vaulted(where: Loc, key: str) -> SourceError:
    return SourceError(where, key, "rackform reads this key itself and never decrypts: give it in plain text "
                                   "(only variables rackform passes on to Ansible may be !vault values)")


def _near_miss(key: Any, owned: tuple[str, ...]) -> str | None:
    if not isinstance(key, str):
        return None
    close = difflib.get_close_matches(key, owned, n=1, cutoff=NEAR_MISS_CUTOFF)
    return close[0] if close and close[0] != key else None


# ---------------------------------------------------------------- hosts.yml


@dataclass(slots=True)
class _HostsFile:
    hosts: dict[str, Loc] = field(default_factory=dict)
    """Every host named anywhere, at its first mention."""
    inline: dict[str, list[LineDict]] = field(default_factory=dict)
    groups: dict[str, UserGroup] = field(default_factory=dict)
    group_vars: dict[str, list[LineDict]] = field(default_factory=dict)


def _read_hosts_file(path: Path, errors: list[SourceError]) -> _HostsFile:
    data = input_files.load_inventory_yaml(path)
    if not isinstance(data, LineDict) or not isinstance(data.get("all"), LineDict):
        where = data.loc if isinstance(data, LineDict) else Loc(input_files.display_path(path), 1)
        raise SourceError(where, "all", "expected an Ansible YAML inventory with a top-level 'all' group")
    found = _HostsFile()
    _walk_group(found, "all", data["all"], data.key_loc("all"), "all", errors)
    _refuse_cycles(found.groups, errors)
    return found


def _walk_group(found: _HostsFile, name: str, group: Any, loc: Loc, where: str, errors: list[SourceError]) -> None:
    if group is None:
        return
    if not isinstance(group, LineDict):
        errors.append(SourceError(loc, where, "expected a mapping (hosts, children, vars)"))
        return
    for key in group:
        if key not in _GROUP_KEYS:
            close = _near_miss(key, _GROUP_KEYS)
            hint = f" (did you mean '{close}'?)" if close else ""
            errors.append(SourceError(group.key_loc(key), f"{where}.{key}", f"unknown key{hint}; expected hosts, children or vars"))
    user_group = found.groups.get(name) if name != "all" else None
    hosts = _mapping(group, "hosts", where, errors)
    for host, inline in hosts.items():
        host_loc = hosts.key_loc(host)
        found.hosts.setdefault(str(host), host_loc)
        if user_group is not None:
            user_group.hosts.setdefault(str(host), host_loc)
        if isinstance(inline, LineDict):
            found.inline.setdefault(str(host), []).append(inline)
        elif inline is not None:
            errors.append(SourceError(host_loc, f"{where}.hosts.{host}", "expected host variables as a mapping (or nothing)"))
    variables = _mapping(group, "vars", where, errors)
    if variables:
        found.group_vars.setdefault(name, []).append(variables)
    children = _mapping(group, "children", where, errors)
    for child, child_group in children.items():
        child_loc = children.key_loc(child)
        child_name = str(child)
        if child_name in RESERVED_GROUPS:
            errors.append(SourceError(child_loc, f"{where}.children.{child}", f"'{child}' is Ansible's own group and cannot be declared"))
            continue
        if not GROUP_NAME.fullmatch(child_name):
            errors.append(SourceError(child_loc, f"{where}.children.{child}", "not a valid Ansible group name (letters, digits and underscores, not starting with a digit)"))
            continue
        found.groups.setdefault(child_name, UserGroup(child_name, child_loc))
        if user_group is not None:
            user_group.children.setdefault(child_name, child_loc)
        _walk_group(found, child_name, child_group, child_loc, f"{where}.children.{child}", errors)


def _mapping(group: LineDict, key: str, where: str, errors: list[SourceError]) -> LineDict:
    value = group.get(key)
    if isinstance(value, LineDict):
        return value
    if value is not None:
        errors.append(SourceError(group.key_loc(key), f"{where}.{key}", f"expected a mapping, found a {type(value).__name__}"))
    empty = LineDict()
    empty.path, empty.line, empty.lines = group.path, group.line, {}
    return empty


def _refuse_cycles(groups: dict[str, UserGroup], errors: list[SourceError]) -> None:
    """A group may not be its own ancestor (Ansible refuses such an inventory)."""
    state: dict[str, str] = {}

    def visit(name: str) -> None:
        state[name] = "open"
        group = groups.get(name)
        for child, loc in (group.children if group else {}).items():
            if state.get(child) == "open":
                errors.append(SourceError(loc, f"{name}.children.{child}", f"group cycle: '{child}' is already an ancestor of '{name}'"))
            elif child not in state:
                visit(child)
        state[name] = "done"

    for name in groups:
        if name not in state:
            visit(name)


# ---------------------------------------------------------------- variables files


class _VarsFolder:
    """One scan of host_vars/ or group_vars/: which names have variables files or folders.

    Scanned once per load: a stat per host for each spelling Ansible accepts cost
    seconds on a 10,000-node site."""

    def __init__(self, base: Path, errors: list[SourceError]):
        self.base = base
        self._base_text = str(base)
        self.files: dict[str, list[str]] = {}
        self.folders: set[str] = set()
        if not base.is_dir():
            return
        with os.scandir(base) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            if entry.name.startswith("."):
                continue
            stem, suffix = os.path.splitext(entry.name)
            if entry.is_dir():
                self.folders.add(entry.name)
            elif suffix in VARS_SUFFIXES:
                self.files.setdefault(stem, []).append(entry.name)
            else:
                errors.append(_not_vars_file(base / entry.name))

    def names(self) -> list[str]:
        return sorted({*self.files, *self.folders})

    def single_file(self, name: str) -> str | None:
        """The name's one variables file, as text, when it has exactly one and no folder (the
        usual host): what `paths` would list, without a Path object per host."""
        files = self.files.get(name)
        if files is None or len(files) != 1 or name in self.folders:
            return None
        return os.path.join(self._base_text, files[0])

    def paths(self, name: str, errors: list[SourceError]) -> list[Path]:
        """`<base>/<name>.yml` and every variables file under `<base>/<name>/`, as Ansible finds them."""
        files = [self.base / file_name for file_name in self.files.get(name, ())]
        if name in self.folders:
            folder = self.base / name
            for path in sorted(folder.rglob("*")):
                if not path.is_file() or any(part.startswith(".") for part in path.relative_to(folder).parts):
                    continue
                if path.suffix in VARS_SUFFIXES:
                    files.append(path)
                else:
                    errors.append(_not_vars_file(path))
        return files


def _not_vars_file(path: Path) -> SourceError:
    return SourceError(Loc(input_files.display_path(path), 0), "", f"not a variables file: Ansible reads only {', '.join(VARS_SUFFIXES)} here")


def _read_vars_file(path: Path | str, errors: list[SourceError]) -> LineDict | None:
    try:
        data = input_files.load_inventory_yaml(path)
    except SourceError as exc:
        errors.append(exc)
        return None
    if data is None:
        return None
    if not isinstance(data, LineDict):
        errors.append(SourceError(Loc(input_files.display_path(path), 1), "", "expected a mapping of variables"))
        return None
    return data


# ---------------------------------------------------------------- hosts


def _one_file(path: Path | str, errors: list[SourceError]) -> tuple[LineDict, Loc] | None:
    """A host's variables from its one variables file, read as is."""
    primary = Loc(input_files.display_path(path), 1)
    unreadable = len(errors)
    values = _read_vars_file(path, errors)
    if values:
        return values, primary
    if len(errors) == unreadable:
        errors.append(SourceError(primary, "", "expected a mapping of host variables"))
    return None


def _host_data(
    host_vars: _VarsFolder, name: str, inline: list[LineDict], declared: Loc, errors: list[SourceError]
) -> tuple[LineDict, Loc] | None:
    """A host's variables from every place they may be, and where they are (its file, else hosts.yml)."""
    single = None if inline else host_vars.single_file(name)
    if single is not None:  # the usual case: one host_vars file, read as is
        return _one_file(single, errors)
    files = host_vars.paths(name, errors)
    if not inline and len(files) == 1:
        return _one_file(files[0], errors)
    primary = Loc(input_files.display_path(files[0]), 1) if files else declared
    data = _sourced(primary)
    for values in inline:
        _add(data, values, "host", errors)
    unreadable = len(errors)
    for path in files:
        values = _read_vars_file(path, errors)
        if values is not None:
            _add(data, values, "host", errors)
    if len(errors) > unreadable:
        return None
    if not data:
        if not files:
            shown = input_files.display_path(host_vars.base / f"{name}.yml")
            errors.append(SourceError(declared, name, f"no variables for this host (expected {shown})"))
        else:
            errors.append(SourceError(primary, "", "expected a mapping of host variables"))
        return None
    return data, primary


def _split_host_data(data: LineDict, errors: list[SourceError]) -> tuple[LineDict, dict[str, Any]]:
    """(rackform's keys, the user's variables as plain data); near-misses of rackform's keys are errors."""
    if _HOST_KEY_SET.issuperset(data) and not _vaulted(data):
        return data, {}
    owned = _sourced(data.loc)
    user: dict[str, Any] = {}
    for key, value in data.items():
        where = data.key_loc(key)
        if key in HOST_KEYS and _vaulted(value):
            errors.append(_refused_vaulted(where, str(key)))
        elif key in HOST_KEYS:
            owned[key] = value
            owned.locs[key] = where
        elif key in ALL_ONLY_KEYS:
            errors.append(SourceError(where, str(key), "a site-wide setting: rackform reads it from group_vars/all only"))
        elif renamed := renamed_message(key):
            errors.append(SourceError(where, str(key), renamed))
        elif close := _near_miss(key, HOST_KEYS):
            errors.append(SourceError(where, str(key), f"unknown key (did you mean '{close}'?); rackform's host keys: {', '.join(HOST_KEYS)}"))
        else:
            try:
                user[key] = plain(value, where, str(key))
            except SourceError as exc:
                errors.append(exc)
    return owned, user


def _apply_host_vars(node: Host | Switch, data: LineDict, where: Loc, errors: list[SourceError]) -> None:
    # The usual host: rackform's keys only, in the plain spelling (no !vault value can be
    # one: it is no plain str). Else the keys are sorted out and pydantic validates them.
    values: schema.HostVars | PlainHostVars | None = plain_host_vars(data)
    if values is not None:
        owned, user = data, {}
    else:
        owned, user = _split_host_data(data, errors)
        try:
            values = input_files.parse(schema.HostVars, owned, where)
        except BadInput as exc:
            errors.extend(exc.errors)
            return
    node.vars_loc = where
    node.var_locs = {key: data.key_loc(key) for key in data}
    node.user_vars = user
    node.management_address = values.management_address
    node.management_mac = values.management_mac
    node.serial = values.serial
    if isinstance(node, Host):
        node.bmc_address = values.bmc_address
        node.bmc_mac = values.bmc_mac
        fabric_ports = owned.get("fabric_ports")
        for port_name, port in values.fabric_ports.items():
            node.var_locs[f"fabric_ports.{port_name}"] = fabric_ports.key_loc(port_name)
            if port.address is not None:
                node.fabric_addresses[port_name] = port.address
            if port.mac is not None:
                node.fabric_macs[port_name] = port.mac
    elif values.bmc_address is not None or values.fabric_ports:
        key = "bmc_address" if values.bmc_address is not None else "fabric_ports"
        errors.append(SourceError(data.key_loc(key), node.name, "switches take management_address, management_mac and serial only"))


# ---------------------------------------------------------------- groups


def _group_vars(
    inventory: Path, found: _HostsFile, errors: list[SourceError]
) -> tuple[dict[str, GroupVars], _Sourced]:
    """Every group's pass-through variables, and the `all` group's settings rackform reads."""
    base = inventory / "group_vars"
    folder = _VarsFolder(base, errors)
    names = list(dict.fromkeys([*found.group_vars, *folder.names()]))
    result: dict[str, GroupVars] = {}
    settings = _sourced(Loc(input_files.display_path(base / "all.yml"), 1))
    for name in names:
        sources: list[tuple[str, LineDict, Loc]] = []
        for values in found.group_vars.get(name, []):
            sources.append((values.path, values, values.loc))
        for path in folder.paths(name, errors):
            shown = input_files.display_path(path)
            values = _read_vars_file(path, errors)
            if values is not None:
                sources.append((shown, values, Loc(shown, 1)))
        if not sources:
            continue
        merged = _sourced(sources[0][2])
        for _, values, _ in sources:
            _add(merged, values, f"group '{name}'", errors)
        group = GroupVars(sources=list(dict.fromkeys(shown for shown, _, _ in sources)), loc=sources[0][2])
        for key, value in merged.items():
            where = merged.key_loc(key)
            if name == "all" and key in SITE_KEYS and _vaulted(value):
                errors.append(_refused_vaulted(where, str(key)))
                continue
            if name == "all" and key in SITE_KEYS:
                settings[key] = value
                settings.locs[key] = where
                continue
            problem = _misplaced_group_key(name, key)
            if problem:
                errors.append(SourceError(where, str(key), problem))
                continue
            try:
                group.values[key] = plain(value, where, str(key))
            except SourceError as exc:
                errors.append(exc)
                continue
            group.locs[key] = where
        result[name] = group
    return result, settings


def _misplaced_group_key(group: str, key: Any) -> str | None:
    if renamed := renamed_message(key):
        return renamed
    if key in HOST_KEYS:
        return f"a per-host fact: set it in host_vars/<host>.yml, not for group '{group}'"
    if key in ALL_ONLY_KEYS:
        return "a site-wide setting: rackform reads it from group_vars/all only"
    owned = SITE_KEYS if group == "all" else (*HOST_KEYS, *ALL_ONLY_KEYS)
    close = _near_miss(key, owned)
    if close:
        return f"unknown key (did you mean '{close}'?)"
    return None


# ---------------------------------------------------------------- the inventory


def load_inventory(
    inventory: Path,
    hosts: dict[str, Host],
    switches: dict[str, Switch],
    unresolved: set[str],
    errors: list[SourceError],
) -> tuple[schema.GroupVarsAll, dict[str, Loc], UserInventory]:
    """Read `inventories/<site>/` onto the placed hosts and switches.

    Returns the site settings (`group_vars/all`), hosts listed but not placed, and what the
    user's inventory adds (groups, group variables); host variables land on each Host/Switch.
    Problems are appended to `errors`.
    """
    if not inventory.is_dir():
        errors.append(SourceError(Loc(input_files.display_path(inventory), 0), "", "inventory folder not found (expected hosts.yml, host_vars/)"))
        return schema.GroupVarsAll(), {}, UserInventory()
    hosts_path = inventory / "hosts.yml"
    try:
        found = _read_hosts_file(hosts_path, errors)
    except SourceError as exc:
        errors.append(exc)
        return schema.GroupVarsAll(), {}, UserInventory()
    host_vars = _VarsFolder(inventory / "host_vars", errors)
    extra = _load_hosts(host_vars, found, hosts, switches, unresolved, errors)
    for name, node in {**hosts, **switches}.items():
        managed = not isinstance(node, Switch) or node.os != "unmanaged"
        if name not in found.hosts and managed:
            errors.append(SourceError(node.loc, name, f"placed in the site design but missing from {input_files.display_path(hosts_path)}"))
    group_vars, settings_data = _group_vars(inventory, found, errors)
    settings = schema.GroupVarsAll()
    if settings_data:
        try:
            settings = input_files.parse(schema.GroupVarsAll, settings_data, settings_data.loc)
        except BadInput as exc:
            errors.extend(exc.errors)
    unlisted = _unlisted_host_vars(host_vars, found, unresolved)
    return settings, extra, UserInventory(groups=found.groups, group_vars=group_vars, unlisted_host_vars=unlisted)


def _load_hosts(host_vars: _VarsFolder, found: _HostsFile, hosts, switches, unresolved, errors) -> dict[str, Loc]:
    extra: dict[str, Loc] = {}
    for name, declared in found.hosts.items():
        node = hosts.get(name) or switches.get(name)
        if node is None and name in unresolved:
            continue
        if node is None:
            extra[name] = declared
            errors.append(SourceError(declared, name, "host is in the inventory but not placed in any rack of the site design"))
            continue
        read = _host_data(host_vars, name, found.inline.get(name, []), declared, errors)
        if read is None:
            continue
        _apply_host_vars(node, *read, errors)
        if isinstance(node, Switch) and node.os == "unmanaged":
            _refuse_unmanaged_extras(node, found, errors)
    return extra


def _refuse_unmanaged_extras(switch: Switch, found: _HostsFile, errors: list[SourceError]) -> None:
    """Unmanaged switches stay out of the rendered inventory: variables or groups given them would be lost."""
    why = "unmanaged switches stay out of the rendered inventory (no Ansible connection)"
    for key in switch.user_vars:
        errors.append(SourceError(switch.var_locs[key], f"{switch.name}.{key}", f"{why}; this variable would be lost"))
    for group in found.groups.values():
        if switch.name in group.hosts:
            errors.append(SourceError(group.hosts[switch.name], f"{group.name}.hosts.{switch.name}", f"{why}; it cannot be in group '{group.name}'"))


def _unlisted_host_vars(host_vars: _VarsFolder, found: _HostsFile, unresolved: set[str]) -> dict[str, Loc]:
    """host_vars files or folders of hosts that hosts.yml does not list: Ansible would ignore them."""
    unlisted = {}
    for name in host_vars.names():
        if name not in found.hosts and name not in unresolved:
            files = host_vars.paths(name, [])
            unlisted[name] = Loc(input_files.display_path(files[0] if files else host_vars.base / name), 1)
    return unlisted
