"""Stage kubernetes (role kubeadm): the cluster itself, asked as a person would ask it.

On every cluster node the kubelet runs and the node's own Node object is Ready (asked with
the kubelet's credentials). On each control-plane node: the API answers /readyz through the
API's virtual IP, every cluster machine of the inventory is a Ready node, the local etcd
member reports healthy and the cluster has one started etcd member per control-plane node,
and the cluster DNS resolves kubernetes.default to the API's service address; no kubeadm
certificate (nor the client certificates of the kubeconfigs kubeadm writes) expires within the
site's margin (kubernetes.cert_expiry_margin_days, default 30 days), and every certificate's
expiry is shown as the check's note, passed or failed. On every cluster node the kubelet renews
its own client certificate (rotateCertificates in the configuration kubeadm writes, kubelet.conf
naming the rotated file). A host where the stage stopped visibly (no Kubernetes packages to be
had) is skipped, with the reason.
"""

from __future__ import annotations

import ipaddress
import json
import shlex

import pytest
import yaml

from checklib import certificate_summary, certificates_inside, kubeadm_certificates  # tests/infra/checklib.py

pytestmark = [pytest.mark.stage("kubernetes"), pytest.mark.machines("k8s_cluster")]

ROLE = "kubeadm"
ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
"""The KubeletConfiguration kubeadm writes on every node it inits or joins."""
KUBELET_ROTATED_CLIENT = "/var/lib/kubelet/pki/kubelet-client-current.pem"
"""The kubelet's client certificate and key as it rotates them (a link to the newest)."""
ETCD_CERTS = ("--cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt "
              "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key")
# A DNS A query from the node with Python's standard library (no dig on a minimal node):
# prints the first A record's address, or nothing.
DNS_QUERY = r"""
import socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
query = struct.pack(">HHHHHH", 0x5246, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
# UDP: a lost datagram is asked again, as a resolver would, each time from a new socket: a new
# source port is a new conntrack entry, so a retry is never pinned to a DNS pod that a drain
# just evicted (the old entry keeps its translation while retries refresh it).
for attempt in range(5):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.sendto(query, (server, 53)); reply = s.recv(4096); break
    except socket.timeout:
        if attempt == 4: sys.exit("no answer from %s after 5 tries" % server)
    finally:
        s.close()
count = struct.unpack(">H", reply[6:8])[0]; at = len(query)
for _ in range(count):
    at += 2 if reply[at] >= 0xC0 else reply.index(b"\0", at) + 1 - at
    kind, _cls, _ttl, size = struct.unpack(">HHIH", reply[at:at + 10]); at += 10
    if kind == 1 and size == 4: print(socket.inet_ntoa(reply[at:at + 4])); break
    at += size
"""


@pytest.fixture(autouse=True)
def bootstrapped(host, role_setting) -> None:
    """Skip, saying why, on a host where the kubernetes stage stopped visibly (no Kubernetes
    packages to be had: the role's local fact says so): there is no cluster to check there."""
    fact = host.file(role_setting(ROLE, "kubeadm_local_fact_file"))
    if fact.exists:
        try:
            stop = json.loads(fact.content_string or "{}")
        except ValueError:
            stop = {}
        if stop.get("bootstrap") == "stopped":
            pytest.skip(f"the Kubernetes bootstrap stopped on this host ({stop.get('reason', 'no reason recorded')}): "
                        "the kubernetes stage said STOPPED, there is no cluster to check")


def _ready(node: dict) -> str:
    return next((c["status"] for c in node.get("status", {}).get("conditions", []) if c["type"] == "Ready"), "Unknown")


def test_kubelet_enabled_and_running(host):
    service = host.service("kubelet")
    assert (service.is_enabled, service.is_running) == (True, True), "the kubelet is not enabled and running"


def test_this_node_is_ready(host, machine):
    result = host.run("kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node %s -o json", machine)
    assert result.rc == 0, f"the kubelet's own credentials cannot read node {machine}: {result.stderr.strip()}"
    assert _ready(json.loads(result.stdout)) == "True", f"node {machine} is not Ready"


@pytest.mark.machines("kube_control_plane")
def test_api_ready_through_the_virtual_ip(host, machine_vars):
    vip = machine_vars.get("kube_vip_address")
    if vip is None:
        pytest.skip("the site has no API virtual IP (kubernetes.api_vip)")
    result = host.run("curl --silent --insecure --max-time 5 https://%s:6443/readyz", str(vip))
    assert result.stdout.strip() == "ok", f"https://{vip}:6443/readyz: {result.stdout.strip() or result.stderr.strip()}"


@pytest.mark.machines("kube_control_plane")
def test_every_cluster_machine_is_a_ready_node(host, group_members):
    result = host.run(f"{ADMIN} get nodes -o json")
    assert result.rc == 0, f"kubectl get nodes: {result.stderr.strip()}"
    nodes = {item["metadata"]["name"]: _ready(item) for item in json.loads(result.stdout)["items"]}
    missing = sorted(set(group_members["k8s_cluster"]) - set(nodes))
    not_ready = sorted(name for name, ready in nodes.items() if ready != "True")
    assert not missing and not not_ready, f"not registered: {missing}; not Ready: {not_ready}"


@pytest.mark.machines("kube_control_plane")
def test_local_etcd_member_healthy(host):
    result = host.run("curl --silent --max-time 5 http://127.0.0.1:2381/health")
    assert result.rc == 0 and json.loads(result.stdout or "{}").get("health") == "true", \
        f"etcd /health: {result.stdout.strip() or result.stderr.strip()}"


@pytest.mark.machines("kube_control_plane")
def test_one_started_etcd_member_per_control_plane_node(host, machine, group_members):
    result = host.run(f"{ADMIN} -n kube-system exec etcd-{machine} -- etcdctl --endpoints=https://127.0.0.1:2379 "
                      f"{ETCD_CERTS} member list -w json")
    assert result.rc == 0, f"etcdctl member list: {result.stderr.strip()}"
    members = {member.get("name", "") for member in json.loads(result.stdout)["members"]}
    assert members == set(group_members["kube_control_plane"]), \
        f"etcd members {sorted(members)}; want one started member per control-plane node"


def test_cluster_dns_resolves_kubernetes_default(host, machine_vars, role_setting):
    services = ipaddress.ip_network(machine_vars["kube_service_addresses"])
    dns, api = str(services.network_address + 10), str(services.network_address + 1)
    name = f"kubernetes.default.svc.{role_setting(ROLE, 'kubeadm_dns_domain')}"
    result = host.run(f"python3 -c {shlex.quote(DNS_QUERY)} {name} {dns}")
    assert result.stdout.strip() == api, f"{name} at {dns}: {result.stdout.strip() or result.stderr.strip()}, want {api}"


@pytest.mark.machines("kube_control_plane")
def test_no_kubeadm_certificate_expires_within_the_margin(host, role_setting, note):
    """kubeadm reads each certificate under /etc/kubernetes/pki (etcd's included) and the client
    certificate each kubeconfig of /etc/kubernetes embeds; the note lists them all."""
    margin_days = int(role_setting(ROLE, "kubeadm_cert_expiry_margin_days"))
    result = host.run("kubeadm certs check-expiration -o json")
    assert result.rc == 0, f"kubeadm certs check-expiration: {(result.stderr or result.stdout).strip()[-300:]}"
    certificates = kubeadm_certificates(result.stdout)
    assert certificates, "kubeadm certs check-expiration listed no certificate"
    note(f"certificate expiry: {certificate_summary(certificates)}")
    inside = certificates_inside(certificates, margin_days)
    assert not inside, (f"{len(inside)} kubeadm certificate(s) expire within {margin_days} days: {'; '.join(inside)}"
                        " (renew: rackform certs renew SITE)")


def test_the_kubelet_rotates_its_client_certificate(host):
    config = host.file(KUBELET_CONFIG)
    assert config.exists, f"{KUBELET_CONFIG} is missing"
    rotate = (yaml.safe_load(config.content_string) or {}).get("rotateCertificates")
    assert rotate is True, f"{KUBELET_CONFIG}: rotateCertificates is {rotate!r}, want true"
    kubeconfig = yaml.safe_load(host.file("/etc/kubernetes/kubelet.conf").content_string) or {}
    clients = {user.get("user", {}).get("client-certificate") for user in kubeconfig.get("users") or ()}
    assert clients == {KUBELET_ROTATED_CLIENT}, \
        f"/etc/kubernetes/kubelet.conf: client-certificate {sorted(map(str, clients))}, want {KUBELET_ROTATED_CLIENT}"
