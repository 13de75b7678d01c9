"""The site's /etc/hosts lines, built once at render time.

Kubespray builds /etc/hosts with a loop over every host *on* every host, which is
quadratic in node count and its slowest step at scale. Here the block is one
string in group_vars; each host's template only prints it, and verify checks it
with one substring test.
"""

from __future__ import annotations

from rackform.model.site import Site


def etc_hosts_block(site: Site) -> str:
    """`address fqdn short` for every server and switch with a management address."""
    domain = site.group_vars.domain
    lines = []
    for node in (*site.hosts.values(), *site.switches.values()):
        if node.management_address is not None:
            lines.append(f"{node.management_address} {node.name}.{domain} {node.name}")
    return "\n".join(lines) + "\n" if lines else ""
