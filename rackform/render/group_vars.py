"""`inventory/group_vars/<group>/<concern>.yml`: site-wide values, one file per concern.

Values are named for the site, not for a role (`fabric_host_mtu`, `site_ntp_servers`):
several roles read the same fact, and each role's `defaults/main.yml` maps them
onto its own prefixed variables. The RoCE intent shared by both ends of a link
lives in `all/`; switch-only and host-only QoS live in `fabric_switches/` and `servers/`,
Kubernetes settings in `k8s_cluster/` (as in Kubespray), so changing a switch-only
value leaves the inputs of the host stages untouched (see `render.digest`). The
inventory's own group variables are carried unchanged in `<group>/inventory.yml`.
"""

from __future__ import annotations

from rackform.k8s.kubeadm import config_api_version
from rackform.k8s.site_mirror import mirror_group_vars
from rackform.model.site import Site

from rackform.render.groups import managed_switches
from rackform.render.known_hosts import KNOWN_HOSTS_FILE, host_key_checking

USER_CONCERN = "inventory"
"""The file (group_vars/<group>/inventory.yml) that carries the inventory's own group variables."""
CONNECTION_DEFAULTS = frozenset({
    "ansible_user", "ansible_ssh_private_key_file", "ansible_become", "ansible_become_method",
    "ansible_connection", "ansible_network_os", "ansible_python_interpreter",
})
"""How Ansible reaches a machine: rackform only defaults these per group, so a host's or a
deeper group's value applies by Ansible's precedence, and a value for the same group replaces rackform's."""
ConcernFiles = dict[str, dict[str, dict]]
"""group -> concern -> variables (written to group_vars/<group>/<concern>.yml)."""

CONCERN_TITLES = {
    ("all", "site"): "the site and how Ansible reaches its machines",
    ("all", "network"): "networks of the site (design: networks)",
    ("all", "ntp"): "time: NTP servers and timezone (inventory: group_vars/all.yml)",
    ("all", "fabric"): "RoCE intent both ends of a fabric link implement (design: fabric.roce)",
    ("all", "mirror"): "the site mirror every node installs packages and images from (design: mirror)",
    ("k8s_cluster", "kubernetes"): "Kubernetes cluster settings (design: kubernetes)",
    ("servers", "fabric"): "host side of the lossless fabric (design: fabric.host)",
    ("fabric_switches", "fabric"): "switch side of the lossless fabric, leaves and spines (design: fabric.switch)",
    ("cumulus", "connection"): "how Ansible reaches Cumulus Linux switches: plain SSH, they are Linux",
    ("onyx", "connection"): "how Onyx switches are reached: rackform's Onyx modules run on the controller and log in with netmiko",
}


def _site(site: Site) -> dict:
    settings = site.group_vars
    values = {
        "site_name": site.name,
        "site_description": site.description,
        "site_domain": settings.domain,
        "ansible_user": settings.ansible_user,
    }
    if settings.ansible_user != "root":
        values["ansible_become"] = True
    if settings.ansible_ssh_private_key_file:
        values["ansible_ssh_private_key_file"] = settings.ansible_ssh_private_key_file
    return values


def _network(site: Site) -> dict:
    networks = {}
    for network in site.networks.values():
        networks[network.name] = {"purpose": network.purpose, "prefix": str(network.prefix)}
        if network.gateway is not None:
            networks[network.name]["gateway"] = str(network.gateway)
    return {"site_networks": networks, "site_dns_servers": [str(server) for server in site.group_vars.dns_servers]}


def _ntp(site: Site) -> dict:
    return {"site_ntp_servers": list(site.group_vars.ntp_servers), "site_timezone": site.group_vars.timezone}


def _fabric_intent(site: Site) -> dict:
    roce = site.fabric.roce
    return {
        "fabric_no_single_point_of_failure": site.fabric.no_single_point_of_failure,
        "fabric_roce_priority": roce.priority,
        "fabric_roce_dscp": roce.dscp,
        "fabric_cnp_priority": roce.cnp_priority,
        "fabric_cnp_dscp": roce.cnp_dscp,
    }


def _fabric_host(site: Site) -> dict:
    host = site.fabric.host
    return {
        "fabric_host_trust": host.trust,
        "fabric_host_pfc_priorities": list(host.pfc_priorities),
        "fabric_host_roce_tos": host.roce_tos,
        "fabric_host_ecn": host.ecn,
        "fabric_host_mtu": host.mtu,
    }


def _fabric_switch(site: Site) -> dict:
    switch = site.fabric.switch
    return {
        "fabric_switch_trust": switch.trust,
        "fabric_switch_pfc_priorities": list(switch.pfc_priorities),
        "fabric_switch_dscp_to_priority": dict(sorted(switch.dscp_to_priority.items())),
        "fabric_switch_ecn_enabled": switch.ecn.enabled,
        "fabric_switch_ecn_min_kb": switch.ecn.min_kb,
        "fabric_switch_ecn_max_kb": switch.ecn.max_kb,
        "fabric_switch_pfc_watchdog": switch.pfc_watchdog,
        "fabric_switch_mtu": switch.mtu,
    }


def _kubernetes(site: Site) -> dict:
    kube = site.kubernetes
    if kube is None:
        return {"kube_enabled": False}
    # Kubespray's names (docs/kubernetes.md lists rackform's former ones).
    values = {
        "kube_enabled": True,
        "kube_version": kube.version,
        "kube_pods_subnet": str(kube.pod_prefix),
        "kube_service_addresses": str(kube.service_prefix),
        "kube_network_plugin": kube.cni,
        # kubeadm's config API for this release (v1beta3 before 1.31): the templates' apiVersion.
        "kubeadm_config_api_version": config_api_version(kube.version),
        # cgroup v1 nodes are refused, except on a lab (docs/kubernetes.md).
        "kubeadm_allow_cgroup_v1": site.lab_only,
        # rackform verify's margin for kubeadm's certificates (tests/infra/test_host_kubeadm.py).
        "kubeadm_cert_expiry_margin_days": kube.cert_expiry_margin_days,
    }
    if kube.api_vip is not None:
        values["kube_vip_address"] = str(kube.api_vip)
    return values


# The short name: testinfra (rackform verify) knows `ssh`, not `ansible.builtin.ssh`.
_CUMULUS_CONNECTION = {"ansible_connection": "ssh"}
# No Ansible connection plugin talks to an Onyx switch: rackform's modules (onyx_config,
# onyx_command) run on the controller with the Python running Ansible and log in with netmiko
# themselves. So the inventory says exactly that (a local connection), and names no plugin or
# network_os of a collection rackform neither ships nor installs (mellanox.onyx): an ad-hoc
# command against an Onyx switch runs one of those modules (docs/fabric.md).
_ONYX_CONNECTION = {
    "ansible_connection": "ansible.builtin.local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
    "ansible_become": False,
    "netmiko_device_type": "mellanox_mlnxos",
}


def _add_user_group_vars(files: ConcernFiles, site: Site) -> None:
    """The inventory's group variables, unchanged, in group_vars/<group>/inventory.yml.

    Where the user sets a connection default for the same group rackform writes it for,
    the user's value is the one written (rackform's is left out, so no file order decides)."""
    user = site.user_inventory
    for group, variables in (user.group_vars.items() if user else ()):
        if not variables.values:
            continue
        concerns = files.get(group, {})
        for concern, values in list(concerns.items()):
            for key in CONNECTION_DEFAULTS.intersection(variables.values):
                values.pop(key, None)
            if not values:
                del concerns[concern]
        files.setdefault(group, {})[USER_CONCERN] = dict(variables.values)


def build_group_vars(site: Site) -> ConcernFiles:
    files: ConcernFiles = {
        "all": {
            "site": _site(site),
            "network": _network(site),
            "ntp": _ntp(site),
            "fabric": _fabric_intent(site),
        },
        "k8s_cluster": {"kubernetes": _kubernetes(site)},
        "servers": {"fabric": _fabric_host(site)},
        "fabric_switches": {"fabric": _fabric_switch(site)},
    }
    mirror = mirror_group_vars(site)
    if mirror:
        files["all"]["mirror"] = mirror
    switch_oses = {switch.os for switch in managed_switches(site)}
    if "cumulus" in switch_oses:
        files["cumulus"] = {"connection": dict(_CUMULUS_CONNECTION)}
    if "onyx" in switch_oses:
        files["onyx"] = {"connection": dict(_ONYX_CONNECTION)}
        if host_key_checking(site):  # the module checks the switch's key as ssh does for servers
            files["onyx"]["connection"]["onyx_switch_known_hosts"] = "{{ playbook_dir }}/" + KNOWN_HOSTS_FILE
    _add_user_group_vars(files, site)
    return files
