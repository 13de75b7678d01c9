"""The emitted inventory as `rackform verify`'s testinfra checks need it.

`EmittedInventory` reads `inventory/` the way Ansible merges it, without Ansible:
Ansible's `ansible-inventory --list` (what testinfra calls) copies every group
variable into every host, `site_etc_hosts_block` included, so its output grows with
the square of the site: gigabytes at 10,000 nodes. This reader loads `hosts.yml`
once, each `group_vars/<group>` once, and a host's `host_vars` only when that host
is asked for; merged variables share the group values instead of copying them. It
reads the layout `rackform render` writes (YAML `hosts.yml`, `group_vars/` and
`host_vars/` beside it), not inventory plugins; values are not templated, as in
`ansible-inventory`.

`install_for_testinfra` hands that inventory to testinfra's Ansible runner, each
host's connection settings adapted (`connection_view`) so that testinfra's SSH
backend reaches a machine the way Ansible does.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import yaml

from rackform.render.groups import host_groups

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")
HostView = Callable[[str, dict[str, Any]], dict[str, Any]]


class _InventoryLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe YAML that reads Ansible's tags (`!vault`, `!unsafe`) as plain strings."""


def _tagged_as_string(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return "<vault-encrypted>" if suffix == "vault" else loader.construct_scalar(node)
    raise yaml.constructor.ConstructorError(None, None, f"unexpected !{suffix} on a collection", node.start_mark)


_InventoryLoader.add_multi_constructor("!", _tagged_as_string)


class InventoryError(ValueError):
    """The inventory cannot be read; the message names the file."""


def _load(path: Path) -> Any:
    try:
        with path.open(encoding="utf-8") as stream:
            return yaml.load(stream, Loader=_InventoryLoader)
    except (OSError, yaml.YAMLError) as error:
        raise InventoryError(f"{path}: {error}") from None


def _vars_file(path: Path) -> dict[str, Any]:
    data = _load(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError(f"{path}: expected a mapping of variables, found {type(data).__name__}")
    return data


def _vars_at(base: Path) -> dict[str, Any]:
    """Variables of `base` as Ansible finds them: `base.yml` (or .yaml, .json, no suffix),
    then every file of the folder `base/`, in name order; later files win."""
    merged: dict[str, Any] = {}
    for suffix in _YAML_SUFFIXES:
        candidate = base.with_name(base.name + suffix)
        if candidate.is_file():
            merged.update(_vars_file(candidate))
    if base.is_dir():
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.suffix in _YAML_SUFFIXES[1:]:
                merged.update(_vars_file(path))
    return merged


class EmittedInventory:
    """Groups and per-host variables of `inventory/hosts.yml` and its vars folders."""

    def __init__(self, hosts_file: Path):
        self.hosts_file = Path(hosts_file)
        document = _load(self.hosts_file)
        if not isinstance(document, dict) or not isinstance(document.get("all"), dict):
            raise InventoryError(f"{self.hosts_file}: expected a top-level `all` group")
        self.tree: dict = document["all"]
        self._host_vars: dict[str, dict[str, Any]] = {}
        self._group_vars: dict[str, dict[str, Any]] = {}

    @property
    def folder(self) -> Path:
        return self.hosts_file.parent

    @cached_property
    def groups_of(self) -> dict[str, dict[str, int]]:
        """host -> {group: depth}, `all` included (one walk over the tree)."""
        return host_groups(self.tree)

    @cached_property
    def members(self) -> dict[str, list[str]]:
        """group -> its hosts, children's hosts included, in inventory order."""
        found: dict[str, list[str]] = {}
        for host, groups in self.groups_of.items():
            for group in groups:
                found.setdefault(group, []).append(host)
        return found

    @cached_property
    def _tree_index(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """(group -> hosts listed directly under it, group -> its direct child groups)."""
        direct: dict[str, list[str]] = {}
        children: dict[str, list[str]] = {}

        def walk(name: str, group: dict | None) -> None:
            group = group or {}
            # A group may be listed under two parents: keep the union, in order.
            direct[name] = list(dict.fromkeys([*direct.get(name, ()), *(group.get("hosts") or {})]))
            children[name] = list(dict.fromkeys([*children.get(name, ()), *(group.get("children") or {})]))
            for child, child_group in (group.get("children") or {}).items():
                walk(child, child_group)

        walk("all", self.tree)
        return direct, children

    @property
    def hosts(self) -> list[str]:
        return list(self.groups_of)

    def group_names(self, host: str) -> list[str]:
        """The host's groups, sorted, without `all` (Ansible's `group_names`)."""
        return sorted(group for group in self.groups_of.get(host, {}) if group != "all")

    def match(self, pattern: str) -> list[str]:
        """Hosts a testinfra `ansible://PATTERN` selects: members of matching groups,
        and hosts whose name matches (shell-style wildcards), sorted."""
        chosen = {host for group, hosts in self.members.items() if fnmatch.fnmatch(group, pattern) for host in hosts}
        chosen.update(host for host in self.groups_of if fnmatch.fnmatch(host, pattern))
        return sorted(chosen)

    def group_vars(self, group: str) -> dict[str, Any]:
        if group not in self._group_vars:
            self._group_vars[group] = _vars_at(self.folder / "group_vars" / group)
        return self._group_vars[group]

    def vars_for(self, host: str) -> dict[str, Any]:
        """The host's variables, merged as Ansible does: groups from shallow to deep
        (then by name), `host_vars` last. Values are shared, not copied: do not mutate."""
        if host not in self._host_vars:
            if host not in self.groups_of:
                raise KeyError(f"{host}: not in {self.hosts_file}")
            merged: dict[str, Any] = {}
            groups = self.groups_of[host]
            for group in sorted(groups, key=lambda name: (groups[name], name)):
                merged.update(self.group_vars(group))
            merged.update(_vars_at(self.folder / "host_vars" / host))
            self._host_vars[host] = merged
        return self._host_vars[host]

    def as_ansible_list(self, host_view: HostView | None = None) -> dict[str, Any]:
        """The shape of `ansible-inventory --list` (what testinfra reads), with
        `_meta.hostvars` computed per host on first use. `host_view(name, vars)` may
        adapt each host's variables on the way out."""
        direct, children = self._tree_index
        listing: dict[str, Any] = {group: {"hosts": direct[group], "children": children[group]} for group in direct}
        listing["_meta"] = {"hostvars": _LazyHostVars(self, host_view)}
        return listing


class _LazyHostVars(Mapping):
    """`_meta.hostvars`: a host's merged variables, computed when first looked up."""

    def __init__(self, inventory: EmittedInventory, host_view: HostView | None):
        self._inventory = inventory
        self._view = host_view
        self._cache: dict[str, dict[str, Any]] = {}

    def __getitem__(self, host: str) -> dict[str, Any]:
        if host not in self._cache:
            values = self._inventory.vars_for(host)
            self._cache[host] = self._view(host, values) if self._view else values
        return self._cache[host]

    def __iter__(self) -> Iterator[str]:
        return iter(self._inventory.groups_of)

    def __len__(self) -> int:
        return len(self._inventory.groups_of)


# --- testinfra ---------------------------------------------------------------------------

# Ansible's fully qualified connection names -> the names testinfra knows.
CONNECTION_ALIASES = {
    "ansible.builtin.ssh": "ssh",
    "ansible.legacy.ssh": "ssh",
    "ansible.builtin.paramiko_ssh": "paramiko_ssh",
    "ansible.builtin.local": "local",
    "ansible.legacy.local": "local",
}
SSH_CONNECTIONS = ("ssh", "smart", "paramiko_ssh")
CONTROL_DIR_ENV = "RACKFORM_VERIFY_CONTROL_DIR"
"""Folder for SSH control sockets; `verify` makes one per run, so a later run never
reuses a master connection to a machine that has since gone away."""


@dataclass(frozen=True, slots=True)
class SshDefaults:
    """What Ansible's SSH connection does that testinfra's SSH backend does not on its own."""

    options: tuple[str, ...]
    """Extra `ssh -o` options for every SSH host."""
    private_key_file: str | None
    """Ansible's default key (ANSIBLE_PRIVATE_KEY_FILE, or private_key_file in ansible.cfg)."""

    @classmethod
    def from_ansible(cls, config: configparser.ConfigParser, environ: Mapping[str, str]) -> SshDefaults:
        # Never prompt for a password or a host key: a check run has no one to answer.
        options = ["BatchMode=yes"]
        checking = environ.get("ANSIBLE_HOST_KEY_CHECKING") or config.get(
            "defaults", "host_key_checking", fallback="true", raw=True)
        if checking.strip().lower() in ("false", "no", "0", "off"):
            options.append("StrictHostKeyChecking=no")
        # ansible.cfg asks for ControlMaster/ControlPersist; testinfra keeps them only
        # with a control path, which ansible.cfg does not name (Ansible picks its own).
        ssh_args = config.get("ssh_connection", "ssh_args", fallback="", raw=True)
        if "controlmaster" in ssh_args.lower() and not config.has_option("ssh_connection", "control_path"):
            options.append(f"ControlPath={_control_dir(environ)}/%C")
        key = environ.get("ANSIBLE_PRIVATE_KEY_FILE") or config.get(
            "defaults", "private_key_file", fallback=None, raw=True)
        return cls(tuple(options), key)


def _control_dir(environ: Mapping[str, str]) -> Path:
    folder = Path(environ.get(CONTROL_DIR_ENV) or "~/.ansible/cp/rackform").expanduser()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def connection_view(host: str, values: Mapping[str, Any], ssh: SshDefaults) -> dict[str, Any]:
    """A host's variables as testinfra must see them to connect as Ansible would."""
    view = dict(values)
    connection = str(view.get("ansible_connection", "ssh"))
    view["ansible_connection"] = CONNECTION_ALIASES.get(connection, connection)
    if view["ansible_connection"] in SSH_CONNECTIONS:
        extra = " ".join(f"-o {shlex.quote(option)}" for option in ssh.options)
        view["ansible_ssh_common_args"] = f"{view.get('ansible_ssh_common_args', '')} {extra}".strip()
        has_key = "ansible_ssh_private_key_file" in view or "ansible_private_key_file" in view
        if ssh.private_key_file and not has_key:
            view["ansible_ssh_private_key_file"] = ssh.private_key_file
    return view


def install_for_testinfra(inventory_path: str) -> EmittedInventory:
    """Give testinfra's runner for `inventory_path` (the `--ansible-inventory` value) our
    listing instead of `ansible-inventory --list`; returns the inventory."""
    from testinfra.utils.ansible_runner import AnsibleRunner  # only where testinfra runs

    inventory = EmittedInventory(Path(inventory_path))
    runner = AnsibleRunner.get_runner(inventory_path)
    ssh = SshDefaults.from_ansible(runner.ansible_config, os.environ)
    # `inventory` is a functools.cached_property: a value in the instance dict wins.
    runner.__dict__["inventory"] = inventory.as_ansible_list(partial(connection_view, ssh=ssh))
    return inventory
