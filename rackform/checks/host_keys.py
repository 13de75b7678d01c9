"""Preflight checks: SSH host key checking stays on outside a lab-only site.

A real site's machines are checked against the keys recorded in its inventory
(rackform.render.known_hosts); turning checking off there lets Ansible log in to, and hand
the site's secrets to, whatever machine answers at a host's address. Only a site marked
`lab_only: true` in its site file may turn it off: `rackform lab up` gives its machines new
keys at every start. Every inventory variable Ansible reads for it counts, in any group's
or host's variables: the boolean switches of its connection plugins, and SSH options in the
argument variables. The switches count as on only for a value Ansible reads as true: Ansible
reads any other value, a typo included, as false.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE

from rackform.checks.registry import check
from rackform.checks.findings import Finding
from rackform.model.site import Site
from rackform.model.source import Loc

CHECKING_SWITCHES = (
    "ansible_host_key_checking",           # ssh, paramiko, libssh, network_cli, netconf
    "ansible_ssh_host_key_checking",       # ssh, paramiko
    "ansible_paramiko_host_key_checking",  # paramiko (network_cli's default transport)
    "ansible_libssh_host_key_checking",    # ansible.netcommon's libssh
    "ansible_netconf_host_key_checking",   # ansible.netcommon's netconf
)
"""Variables by which Ansible's connection plugins turn host key checking on or off."""
SSH_ARGUMENT_VARIABLES = (
    "ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args",
    "ansible_scp_extra_args", "ansible_sftp_extra_args",
)
"""Variables whose text the ssh connection plugin passes to ssh, scp or sftp."""
_OPTIONS_OFF = (
    # OpenSSH reads option names and values case-insensitively, `Name=value` or `Name value`
    re.compile(r"StrictHostKeyChecking\s*[=\s]\s*[\"']?(no|off|accept-new)\b", re.IGNORECASE),
    re.compile(r"UserKnownHostsFile\s*[=\s]\s*[\"']?/dev/null\b", re.IGNORECASE),
)
CHECKING_VARIABLES = CHECKING_SWITCHES + SSH_ARGUMENT_VARIABLES


def _normalized(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _shown(value: Any) -> str:
    """The value as the YAML that gave it reads."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


def checking_off(key: str, value: Any) -> str | None:
    """How `key: value` turns host key checking off, said for a person; None when it does not."""
    if key in CHECKING_SWITCHES:
        normalized = _normalized(value)
        try:
            if normalized in BOOLEANS_TRUE:
                return None
            if normalized in BOOLEANS_FALSE:
                return f"`{key}: {_shown(value)}` turns host key checking off"
        except TypeError:  # a list or mapping: not hashable, not a boolean
            pass
        if isinstance(value, str) and "{{" in value:
            return f"`{key}` is a template, which cannot be checked before Ansible runs (write true, or leave it out)"
        return f"Ansible reads `{key}: {_shown(value)}` as false: host key checking off (write true, or leave it out)"
    if key in SSH_ARGUMENT_VARIABLES:
        for option in _OPTIONS_OFF:
            found = option.search(str(value))
            if found:
                return f"`{key}` passes ssh `{found.group(0)}`, which turns host key checking off"
    return None


def _refusal(site: Site, loc: Loc, key_path: str, how: str) -> Finding:
    return Finding(
        "host_key_checking", "error", loc, key_path,
        f"{how} on a site that is not lab-only: Ansible would trust whatever machine answers at a host's "
        f"address. Record the machines' keys instead (`rackform ssh-keys {site.name} --collect`, compare the "
        f"fingerprints on the console, commit inventories/{site.name}/) and remove this setting; only a site "
        f"marked `lab_only: true` in its site file may turn checking off",
    )


@check
def host_key_checking(site: Site) -> Iterator[Finding]:
    """No variable of the inventory turns SSH host key checking off, unless the site is lab-only."""
    if site.lab_only:
        return
    user = site.user_inventory
    for group, variables in (user.group_vars.items() if user else ()):
        for key in CHECKING_VARIABLES:
            if key in variables.values:
                how = checking_off(key, variables.values[key])
                if how:
                    yield _refusal(site, variables.locs.get(key) or variables.loc or site.loc, f"{group}.{key}", how)
    for node in (*site.hosts.values(), *site.switches.values()):
        for key in CHECKING_VARIABLES:
            if key in node.user_vars:
                how = checking_off(key, node.user_vars[key])
                if how:
                    loc = node.var_locs.get(key) or node.vars_loc or node.loc
                    yield _refusal(site, loc, f"{node.name}.{key}", how)
