"""`known_hosts`: the SSH host keys of the site's machines, rendered from the inventory.

Host key checking is on for every site: Ansible (ansible.cfg), `rackform verify`
(testinfra reads the same ssh_args) and rackform's own SSH to switches check each
machine's key against this file and refuse one that is unknown or changed. The keys
come from each host's `ssh_host_keys` in `host_vars/<host>.yml` (OpenSSH public keys,
`TYPE BASE64`, as in /etc/ssh/ssh_host_*_key.pub). A site turns checking off only by
saying so in `group_vars/all.yml`: `ansible_host_key_checking: false` (Ansible's own
variable), as the lab does, whose machines get new keys at every `rackform lab up`.
A machine reached on a port other than 22 (`ansible_port`) is written `[address]:port`,
as OpenSSH looks it up (rackform.render.ssh_address). `rackform ssh-keys SITE --collect`
records the keys (rackform.commands.ssh_keys).
"""

from __future__ import annotations

import base64
import binascii
import struct

from rackform.model.source import BadInput, Loc, SourceError
from rackform.model.site import Host, Site, Switch
from rackform.render.ssh_address import DEFAULT_SSH_PORT, known_hosts_name, ssh_ports

KNOWN_HOSTS_FILE = "known_hosts"
"""Where the file lies in the emitted project (ansible.cfg's UserKnownHostsFile)."""
HOST_KEYS_VARIABLE = "ssh_host_keys"
CHECKING_VARIABLE = "ansible_host_key_checking"
KEY_TYPES = frozenset({
    "ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
})
MISSING_NAMED_MAX = 10
"""How many machines without keys the file's header names (then a count)."""


def host_key_checking(site: Site) -> bool:
    """False only where the inventory's group_vars/all says `ansible_host_key_checking: false`."""
    user = site.user_inventory
    group = user.group_vars.get("all") if user else None
    value = group.values.get(CHECKING_VARIABLE, True) if group else True
    return str(value).strip().lower() not in ("false", "no", "0", "off")


def key_problem(text: str) -> str | None:
    """Why `text` is not an OpenSSH public key `TYPE BASE64 [comment]` (None: it is)."""
    fields = text.split()
    if len(fields) < 2:
        return f"expected 'TYPE BASE64' (an /etc/ssh/ssh_host_*_key.pub line), found {text!r}"
    kind, blob = fields[0], fields[1]
    if kind not in KEY_TYPES:
        return f"unknown key type {kind!r} (known: {', '.join(sorted(KEY_TYPES))})"
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        named = raw[4:4 + length].decode()
    except (binascii.Error, struct.error, UnicodeDecodeError):
        return f"the {kind} key is not valid base64 key data"
    if named != kind:
        return f"the key data is a {named!r} key, the line says {kind!r}"
    return None


def machine_host_keys(node: Host | Switch, errors: list[SourceError]) -> list[str]:
    """`TYPE BASE64` of each of the machine's `ssh_host_keys` (a string or a list)."""
    value = node.user_vars.get(HOST_KEYS_VARIABLE)
    if value is None:
        return []
    where = node.var_locs.get(HOST_KEYS_VARIABLE) or node.vars_loc or Loc(node.name, 0)
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        errors.append(SourceError(where, HOST_KEYS_VARIABLE, "expected a list of 'TYPE BASE64' public keys"))
        return []
    found = []
    for key in keys:
        problem = key_problem(key)
        if problem:
            errors.append(SourceError(where, HOST_KEYS_VARIABLE, f"{node.name}: {problem}"))
        else:
            found.append(" ".join(key.split()[:2]))
    return found


def known_hosts_file(site: Site) -> str:
    """One line per key: `address,name,fqdn TYPE BASE64`. Raises BadInput for a malformed key."""
    errors: list[SourceError] = []
    lines, missing = [], []
    domain = site.group_vars.domain
    try:
        ports = ssh_ports(site)
    except BadInput as error:  # reported with the key errors, all at once
        errors.extend(error.errors)
        ports = {}
    for node in (*site.hosts.values(), *site.switches.values()):
        keys = machine_host_keys(node, errors)
        if node.management_address is None and not keys:
            continue
        if not keys and getattr(node, "os", None) != "unmanaged":  # an unmanaged switch has no SSH of ours
            missing.append(node.name)
        if not keys:  # no line to write: the names are not worked out (most machines of a new site)
            continue
        port = ports.get(node.name, DEFAULT_SSH_PORT)
        names = ",".join(known_hosts_name(str(name), port)
                         for name in (node.management_address, node.name, f"{node.name}.{domain}") if name)
        lines.extend(f"{names} {key}" for key in keys)
    if errors:
        raise BadInput(errors)
    header = [f"# SSH host keys of site {site.name}: {HOST_KEYS_VARIABLE} in the inventory's host_vars.",
              "# Rendered by rackform; render again instead of editing."]
    if not host_key_checking(site):
        header.append(f"# Host key checking is OFF for this site ({CHECKING_VARIABLE}: false in group_vars/all).")
    elif missing:
        named = ", ".join(missing[:MISSING_NAMED_MAX]) + (f" and {len(missing) - MISSING_NAMED_MAX} more"
                                                           if len(missing) > MISSING_NAMED_MAX else "")
        header.append(f"# No key in the inventory for {len(missing)} machine(s), refused until one is added "
                      f"(`rackform ssh-keys {site.name} --collect`): {named}")
    return "\n".join(header + lines) + "\n"
