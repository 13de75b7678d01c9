"""`files/etc_hosts`: the site's /etc/hosts, one file of the project built at render time.

Kubespray builds /etc/hosts with a loop over every host *on* every host, which is
quadratic in node count and its slowest step at scale. Here the file is rendered once
and the base_os role copies it as it is. It is a file, not a group variable: Ansible
copies every group variable into every host when it lists the inventory (what
testinfra reads), so a site-sized value there made that listing grow with the square
of the site.
"""

from __future__ import annotations

from rackform.model.site import Site

ETC_HOSTS_FILE = "files/etc_hosts"
"""Where the file lies in the emitted project (base_os: `base_os_etc_hosts_file`)."""

_HEADER = """\
# Managed by rackform (role base_os); local edits are overwritten.
127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters

# Every machine of the site (rackform render: {path})
"""


def etc_hosts_block(site: Site) -> str:
    """`address fqdn short` for every server and switch with a management address."""
    domain = site.group_vars.domain
    lines = []
    for node in (*site.hosts.values(), *site.switches.values()):
        if node.management_address is not None:
            lines.append(f"{node.management_address} {node.name}.{domain} {node.name}")
    return "\n".join(lines) + "\n" if lines else ""


def etc_hosts_file(site: Site) -> str:
    """The whole /etc/hosts every server of the site gets."""
    return _HEADER.format(path=ETC_HOSTS_FILE) + etc_hosts_block(site)
