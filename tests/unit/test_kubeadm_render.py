"""The kubeadm role's templates rendered with the lab site's inventory, checked by
rackform.k8s.kubeadm: what kubeadm init/join would read on the nodes.

Plain Jinja with the role's variables set as Ansible would resolve them for the
lab (the lab test renders them with Ansible itself on the nodes)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

from rackform.k8s.kubeadm import (
    ClusterConfiguration,
    ClusterConfigurationV1beta3,
    InitConfiguration,
    InitConfigurationV1beta3,
    JoinConfiguration,
    JoinConfigurationV1beta3,
    validate_documents,
)
from rackform.model.loader import load_site
from rackform.render.project import render_files
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
    mirror = yaml.safe_load(files.get("inventory/group_vars/all/mirror.yml", b"{}"))
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}kubeadm/defaults/main.yml"])
    role_vars = yaml.safe_load(files[f"{ROLES_IN_PROJECT}kubeadm/vars/main.yml"])
    variables = {
        **defaults, **mirror, **kube, **hostvars[host], "groups": groups, "hostvars": hostvars,
        "inventory_hostname": host,
        # The defaults that are templates, as Ansible resolves them for the lab:
        "kubeadm_cluster_name": "lab", "kubeadm_init_host": groups["kube_control_plane"][0],
        **extra,
    }
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    environment.filters["bool"] = bool
    # The role's vars the templates read, worked out from the defaults as Ansible would.
    for name in ("kubeadm_apiserver_args", "kubeadm_apiserver_volumes", "kubeadm_patches_dir"):
        variables[name] = _resolved(environment, role_vars[name], variables)
    return environment.from_string(files[f"{ROLES_IN_PROJECT}kubeadm/templates/{template}"].decode()).render(variables)


def _resolved(environment, value, variables):
    if isinstance(value, str):
        return environment.from_string(value).render(variables) if "{{" in value else value
    if isinstance(value, list):
        return [_resolved(environment, item, variables) for item in value]
    if isinstance(value, dict):
        return {key: _resolved(environment, item, variables) for key, item in value.items()}
    return value


def api_version(files) -> str:
    return yaml.safe_load(files["inventory/group_vars/k8s_cluster/kubernetes.yml"])["kubeadm_config_api_version"]


def join(files, host: str, role: str) -> JoinConfiguration:
    text = render(files, "kubeadm-join.yaml.j2", host, kubeadm_node_role=role, kubeadm_join_token=TOKEN,
                  kubeadm_ca_cert_hash=CA_HASH, kubeadm_certificate_key=CERT_KEY)
    return validate_documents(text, api_version(files))[0]


def init(files) -> list:
    text = render(files, "kubeadm-init.yaml.j2", "mgmt-1", kubeadm_node_role="control_plane")
    return validate_documents(text, api_version(files))


@pytest.fixture(scope="module")
def init_documents(files):
    return init(files)


def cluster(documents) -> ClusterConfiguration:
    return next(document for document in documents if isinstance(document, ClusterConfiguration))


def test_init_file_holds_init_cluster_and_kubelet_configuration(init_documents):
    assert [document.kind for document in init_documents] == [
        "InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"]


def test_kubernetes_version_comes_from_the_design(init_documents):
    assert cluster(init_documents).kubernetesVersion == "v1.36.1"  # the lab's own pin


def test_a_current_release_is_written_in_v1beta4(files, init_documents):
    assert api_version(files) == "kubeadm.k8s.io/v1beta4"
    assert [type(document) for document in init_documents[:2]] == [InitConfiguration, ClusterConfiguration]
    assert isinstance(join(files, "gpu-1", "worker"), JoinConfiguration)


def test_images_come_from_the_site_mirror_registry(init_documents):
    assert cluster(init_documents).imageRepository == "10.10.0.11:5000"


def test_a_site_without_a_mirror_keeps_kubeadm_s_own_image_repository(lab_files):
    lab_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    assert cluster(init(render_files(lab_files.load()))).imageRepository is None


def test_every_node_is_known_by_its_management_address(init_documents, files):
    assert [(arg.name, arg.value) for arg in init_documents[0].nodeRegistration.kubeletExtraArgs] == [
        ("node-ip", "10.10.0.11")]
    assert [(arg.name, arg.value) for arg in join(files, "gpu-2", "worker").nodeRegistration.kubeletExtraArgs] == [
        ("node-ip", "10.10.0.16")]


@pytest.fixture(scope="module")
def files_1_30(tmp_path_factory, make_site_files) -> dict[str, bytes]:
    """The lab pinned to Kubernetes 1.30 (no mirror: the mirror carries only 1.36 releases)."""
    site_files = make_site_files(tmp_path_factory.mktemp("lab-1.30"))
    site_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    site_files.pin_lab_kubernetes("1.30.9")
    return render_files(site_files.load())


def test_a_site_pinned_below_1_31_renders_v1beta3_that_kubeadm_1_30_reads(files_1_30):
    assert api_version(files_1_30) == "kubeadm.k8s.io/v1beta3"
    documents = init(files_1_30)
    assert [type(document) for document in documents[:2]] == [InitConfigurationV1beta3, ClusterConfigurationV1beta3]
    assert cluster_v1beta3(documents).kubernetesVersion == "v1.30.9"
    assert documents[0].nodeRegistration.kubeletExtraArgs == {"node-ip": "10.10.0.11"}


@pytest.mark.parametrize("host, role", [("mgmt-2", "control_plane"), ("gpu-1", "worker")])
def test_joins_of_a_1_30_site_are_v1beta3_too(files_1_30, host, role):
    config = join(files_1_30, host, role)
    assert isinstance(config, JoinConfigurationV1beta3) and config.nodeRegistration.kubeletExtraArgs["node-ip"]


def cluster_v1beta3(documents) -> ClusterConfigurationV1beta3:
    return next(document for document in documents if isinstance(document, ClusterConfigurationV1beta3))


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
