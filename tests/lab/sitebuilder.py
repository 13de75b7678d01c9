"""Small lab sites of the lab tests' own, written into a temporary repo root.

Each lab module brings up a site with its own name and addresses, so that no two ever
collide. `build_site` writes one: the repo's real catalog, the site's design and its
Ansible inventory. `one_rack_site`, `two_hosts_on_a_leaf`, `networks`, `ROCE_FABRIC` and
`group_vars` give the parts those designs and inventories share.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import textwrap
from pathlib import Path

from rackform.lab import state

REPO_ROOT = Path(__file__).resolve().parents[2]

# The `fabric:` of a lab site: lossless RoCE (traffic on priority 3, congestion notices on 6).
ROCE_FABRIC = """\
fabric:
  no_single_point_of_failure: false
  roce: {priority: 3, dscp: 26, cnp_priority: 6, cnp_dscp: 48}
  switch:
    trust: dscp
    pfc_priorities: [3]
    dscp_to_priority: {26: 3, 48: 6}
    ecn: {enabled: true, min_kb: 150, max_kb: 1500}
    pfc_watchdog: true
    mtu: 9216
  host: {trust: dscp, pfc_priorities: [3], roce_tos: 106, ecn: true, mtu: 9000}
"""


def networks(management: str, oob: str, fabric: str) -> str:
    """The `networks:` of a site from its three prefixes; the management gateway is its first address."""
    gateway = ipaddress.ip_network(management)[1]
    return ("networks:\n"
            f"  - {{name: mgmt, purpose: management, prefix: {management}, gateway: {gateway}}}\n"
            f"  - {{name: oob, purpose: oob, prefix: {oob}}}\n"
            f"  - {{name: compute, purpose: compute_fabric, prefix: {fabric}}}\n")


# Every lab BMC is an ipmi_sim: it stores the cipher suite privilege levels hardening sets but
# lets suite 0 (and MD5 IPMI 1.5) in anyway, so every lab site records that (docs/ipmi.md).
IPMI_SIM_EXCEPTION = """\
provisioning:
  bmc_exceptions:
    - model: OpenIPMI ipmi_sim
      manufacturer_id: 4753
      allow: [cipher_suite_0, ipmi_1.5]
      reason: a simulator that stores the cipher suite privilege levels without honouring them
"""


def one_rack_site(site: str, description: str, devices: str, rest: str) -> str:
    """A site design whose one rack `r1` holds `devices` (YAML list items); `rest` (YAML) follows the racks,
    then the ipmi_sim exception every lab site records (IPMI_SIM_EXCEPTION). Lab-only, as every lab
    site is: its inventory (`group_vars`) turns host key checking off."""
    return (f"site: {site}\ndescription: {description}\npower_basis: max\nlab_only: true\n"
            "racks:\n  - name: r1\n    height_u: 42\n    power_budget_w: 30000\n    devices:\n"
            + textwrap.indent(devices, " " * 6) + rest + IPMI_SIM_EXCEPTION)


def two_hosts_on_a_leaf(site: str, description: str, site_networks: str) -> str:
    """A site of two HCI hosts, node-1 and node-2, whose fab0 ports are cabled to one Cumulus leaf."""
    return one_rack_site(site, description, """\
- {name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2]}
- name: leaf-1
  block: sn2700
  position_u: 40
  switch: {role: leaf, os: cumulus, fabric: compute, asn: 65101}
""", site_networks + ROCE_FABRIC + """\
cabling:
  - {a: node-1:fab0, b: leaf-1:swp1}
  - {a: node-2:fab0, b: leaf-1:swp2}
""")


def group_vars(site: str, server: str, *, lab_key: bool = False) -> str:
    """group_vars/all.yml: root over SSH (with the key `rackform lab up` keeps for the site, never in
    the repo, if `lab_key`), `server` for NTP and DNS, UTC, and the domain <site>.rackform.test.
    Host key checking is off, as for every lab site: `lab up` gives the machines new keys."""
    key = f"ansible_ssh_private_key_file: {state.LABS_DIR / site / 'ssh' / 'id_ed25519'}\n" if lab_key else ""
    return (f"ansible_user: root\n{key}ntp_servers: [{server}]\ndns_servers: [{server}]\n"
            f"timezone: Etc/UTC\ndomain: {site}.rackform.test\nansible_host_key_checking: false\n")


def build_site(root: Path, site: str, design: str, host_vars: dict[str, str], all_vars: str) -> Path:
    """Write into `root` the real catalog (topologies/blocks and topologies/*.yaml), the design as
    topologies/sites/<site>.yaml, and inventories/<site>/ holding the hosts of `host_vars` (name to
    host_vars text) with `all_vars` as group_vars/all.yml. Returns `root`."""
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    for shared in (REPO_ROOT / "topologies").glob("*.yaml"):  # versions.yaml, defaults.yaml and any other shared file
        shutil.copy(shared, root / "topologies" / shared.name)
    shutil.copytree(REPO_ROOT / "topologies" / "profiles", root / "topologies" / "profiles")
    (root / "topologies" / "sites").mkdir()
    (root / "topologies" / "sites" / f"{site}.yaml").write_text(design)
    inventory = root / "inventories" / site
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars").mkdir()
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n" + "".join(f"    {host}:\n" for host in host_vars))
    (inventory / "group_vars" / "all.yml").write_text(all_vars)
    for host, text in host_vars.items():
        (inventory / "host_vars" / f"{host}.yml").write_text(text)
    return root


def without_data_sets(design: str) -> str:
    """A design derived from the lab's, without its `data_sets:`: they name the lab's tenants
    (topologies/platform/lab.yaml), which a site of another name has no platform file for."""
    lean = re.sub(r"^data_sets:\n(?:  .*\n)+", "", design, flags=re.MULTILINE)
    assert lean != design, "the design has no data_sets section to leave out"
    return lean
