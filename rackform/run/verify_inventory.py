"""The emitted inventory as `rackform verify`'s testinfra checks need it.

`EmittedInventory` reads `inventory/` the way Ansible merges it, without Ansible:
`ansible-inventory --list` copies every group variable into every host and takes
tens of seconds at 10,000 hosts (docs/verify.md). This reader loads `hosts.yml`
once, each `group_vars/<group>` once, and a host's `host_vars` only when that host
is asked for; merged variables share the group values instead of copying them. It
reads the layout `rackform render` writes (YAML `hosts.yml`, `group_vars/` and
`host_vars/` beside it), not inventory plugins; values are not templated, as in
`ansible-inventory`.

`verify` picks machines with it and the checks read their expected values from it;
testinfra itself, as shipped, lists the inventory with `ansible-inventory --list` to
connect. That listing stays linear in the site because no group variable is
site-sized: /etc/hosts is a file of the project (rackform/render/etc_hosts.py).
`ssh_environment_for_testinfra` passes testinfra what a check run needs (no prompts, a
control socket per run) through the environment testinfra reads.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from rackform.render.groups import host_groups

_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YAML_SUFFIXES = ("", ".yml", ".yaml", ".json")


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


# --- testinfra ---------------------------------------------------------------------------

SSH_EXTRA_ARGS_ENV = "ANSIBLE_SSH_EXTRA_ARGS"
"""Read by testinfra (as shipped) for every SSH host, after ansible.cfg's ssh_args: how
verify adds what a check run needs without changing testinfra."""
CONTROL_DIR_ENV = "RACKFORM_VERIFY_CONTROL_DIR"
"""Folder for SSH control sockets; `verify` makes one per run, so a later run never
reuses a master connection to a machine that has since gone away."""


def ssh_environment_for_testinfra(environ: Mapping[str, str], control_dir: Path) -> dict[str, str]:
    """Environment for the pytest that runs the checks, so testinfra's SSH reaches a
    machine as Ansible does. Host keys are not touched here: ansible.cfg's ssh_args
    (which testinfra reads) already check them, or, in the lab, say not to."""
    # Never prompt for a password or a host key: a check run has no one to answer.
    options = ["BatchMode=yes", f"ControlPath={control_dir}/%C"]
    key = environ.get("ANSIBLE_PRIVATE_KEY_FILE")
    if key:  # Ansible's default key, for machines whose inventory names none
        options.append(f"IdentityFile={key}")
    extra = " ".join(f"-o {shlex.quote(option)}" for option in options)
    return {SSH_EXTRA_ARGS_ENV: f"{environ.get(SSH_EXTRA_ARGS_ENV, '')} {extra}".strip(), CONTROL_DIR_ENV: str(control_dir)}
