"""Where SSH reaches each machine: the address and port Ansible connects to.

The address is `ansible_host`, which rackform renders from the machine's management_address
(rackform.render.host_vars; the inventory may not set it). The port is `ansible_port`, a
pass-through variable: the host's own value, else the deepest group's that sets it (groups of
equal depth by name, the later winning), as Ansible merges them; 22 where none does. The
rendered known_hosts and `rackform ssh-keys` both take it from here: OpenSSH files a key for a
port other than 22 under `[address]:port`, so an entry without the port would not match.
"""

from __future__ import annotations

from rackform.model.site import Host, Site, Switch
from rackform.model.source import BadInput, Loc, SourceError

PORT_VARIABLE = "ansible_port"
DEFAULT_SSH_PORT = 22


def _port(value: object, where: Loc, errors: list[SourceError]) -> int:
    """The TCP port `value` names (Ansible takes `2222` and `"2222"` alike)."""
    text = str(value).strip()
    if not isinstance(value, bool) and text.isdigit() and 1 <= int(text) <= 65535:
        return int(text)
    hint = " (rackform does not template values: write the number)" if "{{" in text else ""
    errors.append(SourceError(where, PORT_VARIABLE, f"expected a TCP port 1-65535, found {value!r}{hint}"))
    return DEFAULT_SSH_PORT


def ssh_ports(site: Site) -> dict[str, int]:
    """Machine name -> its SSH port, for the machines whose port is not 22. BadInput for a
    port that is not one."""
    from rackform.render.groups import build_groups, host_groups  # groups only when a group sets a port

    errors: list[SourceError] = []
    group_ports: dict[str, int] = {}
    user = site.user_inventory
    for group, variables in (user.group_vars.items() if user else ()):
        if PORT_VARIABLE in variables.values:
            where = variables.locs.get(PORT_VARIABLE) or variables.loc or site.loc
            group_ports[group] = _port(variables.values[PORT_VARIABLE], where, errors)
    memberships = host_groups(build_groups(site)) if set(group_ports) - {"all"} else {}
    ports: dict[str, int] = {}
    for node in (*site.hosts.values(), *site.switches.values()):
        if PORT_VARIABLE in node.user_vars:
            where = node.var_locs.get(PORT_VARIABLE) or node.vars_loc or node.loc
            port = _port(node.user_vars[PORT_VARIABLE], where, errors)
        else:
            groups = memberships.get(node.name, {"all": 0})
            setting = sorted((depth, name) for name, depth in groups.items() if name in group_ports)
            port = group_ports[setting[-1][1]] if setting else DEFAULT_SSH_PORT
        if port != DEFAULT_SSH_PORT:
            ports[node.name] = port
    if errors:
        raise BadInput(errors)
    return ports


def ssh_address(node: Host | Switch, ports: dict[str, int]) -> tuple[str, int] | None:
    """(address, port) Ansible connects to; None for a machine without a management_address."""
    if node.management_address is None:
        return None
    return str(node.management_address), ports.get(node.name, DEFAULT_SSH_PORT)


def known_hosts_name(name: str, port: int) -> str:
    """How OpenSSH writes a host in known_hosts: bare on port 22, `[name]:port` otherwise."""
    return name if port == DEFAULT_SSH_PORT else f"[{name}]:{port}"
