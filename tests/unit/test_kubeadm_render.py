"""The kubeadm role's templates rendered with the lab site's inventory, checked by
rackform.k8s.kubeadm: what kubeadm init/join would read on the nodes.

Plain Jinja with the role's variables set as Ansible would resolve them for the
lab (the lab test renders them with Ansible itself on the nodes)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

from rackform.k8s.kubeadm import ClusterConfiguration, InitConfiguration, JoinConfiguration, validate_documents
from rackform.model.loader import load_site
from rackform.render import render_files
from collection_support import ROLES_IN_PROJECT

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "0" * 64
CERT_KEY = "e6a2eb8581237ab72a4f494f30285ec12a9694d750b9785706a83bfcbbbd2204"


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def _inventory(files) -> tuple[dict, dict]:
    groups_tree = yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]["k8s_cluster"]["children"]
    groups = {name: list((group or {}).get("hosts") or {}) for name, group in groups_tree.items()}
    hostvars = {path.split("/")[-1][:-4]: yaml.safe_load(text) for path, text in files.items()
                if path.startswith("inventory/host_vars/") and path.endswith(".yml")}
    return groups, hostvars


def render(files, template: str, host: str, **extra) -> str:
    groups, hostvars = _inventory(files)
    kube = yaml.safe_load(files["inventory/group_vars/k8s_cluster/kubernetes.yml"])
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}kubeadm/defaults/main.yml"])
    variables = {
        **defaults, **kube, **hostvars[host], "groups": groups, "hostvars": hostvars, "inventory_hostname": host,
        # The defaults that are templates, as Ansible resolves them for the lab:
        "kubeadm_cluster_name": "lab", "kubeadm_init_host": groups["kube_control_plane"][0],
        "kubeadm_kube_vip_enabled": True, "kubeadm_kube_vip_interface": "mgmt0",
        **extra,
    }
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    environment.filters["bool"] = bool
    return environment.from_string(files[f"{ROLES_IN_PROJECT}kubeadm/templates/{template}"].decode()).render(variables)


def join(files, host: str, role: str) -> JoinConfiguration:
    text = render(files, "kubeadm-join.yaml.j2", host, kubeadm_node_role=role, kubeadm_join_token=TOKEN,
                  kubeadm_ca_cert_hash=CA_HASH, kubeadm_certificate_key=CERT_KEY)
    return validate_documents(text)[0]


@pytest.fixture(scope="module")
def init_documents(files):
    return validate_documents(render(files, "kubeadm-init.yaml.j2", "mgmt-1", kubeadm_node_role="control_plane"))


def cluster(documents) -> ClusterConfiguration:
    return next(document for document in documents if isinstance(document, ClusterConfiguration))


def test_init_file_holds_init_cluster_and_kubelet_configuration(init_documents):
    assert [document.kind for document in init_documents] == [
        "InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"]


def test_kubernetes_version_comes_from_the_design(init_documents):
    assert cluster(init_documents).kubernetesVersion == "v1.31.4"


def test_networks_come_from_the_site_prefixes(init_documents):
    networking = cluster(init_documents).networking
    assert (networking.podSubnet, networking.serviceSubnet) == ("10.244.0.0/16", "10.96.0.0/12")


def test_api_vip_is_the_control_plane_endpoint(init_documents):
    assert cluster(init_documents).controlPlaneEndpoint == "10.10.0.5:6443"


def test_cert_sans_name_the_vip_and_every_control_plane_host(init_documents):
    assert cluster(init_documents).apiServer.certSANs == [
        "10.10.0.5", "mgmt-1", "10.10.0.11", "mgmt-2", "10.10.0.12", "mgmt-3", "10.10.0.13"]


def test_first_node_advertises_its_management_address(init_documents):
    init = init_documents[0]
    assert isinstance(init, InitConfiguration) and init.localAPIEndpoint.advertiseAddress == "10.10.0.11"


def test_kubelet_uses_the_systemd_cgroup_driver_like_containerd(init_documents):
    assert init_documents[2].cgroupDriver == "systemd"


def test_control_plane_join_carries_the_certificate_key(files):
    config = join(files, "mgmt-2", "control_plane")
    assert (config.controlPlane.certificateKey, config.controlPlane.localAPIEndpoint.advertiseAddress) == (
        CERT_KEY, "10.10.0.12")


def test_worker_join_is_not_a_control_plane_join(files):
    assert join(files, "gpu-1", "worker").controlPlane is None


def test_joins_discover_the_api_through_the_vip(files):
    assert join(files, "gpu-1", "worker").discovery.bootstrapToken.apiServerEndpoint == "10.10.0.5:6443"


@pytest.mark.parametrize("host, kubeconfig", [("mgmt-1", "super-admin.conf"), ("mgmt-2", "admin.conf")])
def test_kube_vip_uses_super_admin_only_on_the_init_node(files, host, kubeconfig):
    pod = yaml.safe_load(render(files, "kube-vip.yaml.j2", host, kubeadm_node_role="control_plane"))
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == f"/etc/kubernetes/{kubeconfig}"


def test_kube_vip_holds_the_api_vip(files):
    pod = yaml.safe_load(render(files, "kube-vip.yaml.j2", "mgmt-1", kubeadm_node_role="control_plane"))
    env = {item["name"]: item["value"] for item in pod["spec"]["containers"][0]["env"]}
    assert (env["address"], env["port"], env["cp_enable"]) == ("10.10.0.5", "6443", "true")
