"""rackform.k8s.kubeadm against kubeadm's documented v1beta4 examples, the v1beta3 that
kubeadm 1.30 and older read, and the mistakes kubeadm's strict decoding refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rackform.k8s.kubeadm import (
    ClusterConfiguration,
    InitConfiguration,
    JoinConfiguration,
    KubeadmConfigError,
    KubeletConfiguration,
    config_api_version,
    validate_document,
    validate_documents,
)

EXAMPLES = Path(__file__).parent / "data" / "kubeadm"
CLUSTER = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ClusterConfiguration"}
JOIN = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration"}
INIT = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration"}
TOKEN_DISCOVERY = {"bootstrapToken": {"apiServerEndpoint": "10.0.0.5:6443", "token": "abcdef.0123456789abcdef",
                                      "unsafeSkipCAVerification": True}}


@pytest.mark.parametrize("example, kinds", [
    ("init-defaults.yaml", [InitConfiguration, ClusterConfiguration]),
    ("join-defaults.yaml", [JoinConfiguration]),
    ("kubelet-defaults.yaml", [KubeletConfiguration]),
    ("reference-full.yaml", [InitConfiguration, ClusterConfiguration, KubeletConfiguration]),
])
def test_documented_examples_are_accepted(example, kinds):
    models = validate_documents((EXAMPLES / example).read_text())
    assert [type(model) for model in models][:len(kinds)] == kinds


def test_the_documented_example_keeps_its_values():
    cluster = validate_documents((EXAMPLES / "reference-full.yaml").read_text())[1]
    assert (cluster.controlPlaneEndpoint, cluster.apiServer.extraArgs[0].name) == ("10.100.0.1:6443",
                                                                                    "authorization-mode")


@pytest.mark.parametrize("document, field", [
    ({**CLUSTER, "controlPlaneEndPoint": "10.0.0.5:6443"}, "controlPlaneEndPoint"),
    ({**CLUSTER, "apiServer": {"timeoutForControlPlane": "4m0s"}}, "timeoutForControlPlane"),
    ({**CLUSTER, "networking": {"podCIDR": "10.244.0.0/16"}}, "podCIDR"),
    ({**INIT, "nodeRegistration": {"kubeletExtraArgs": {"v": "5"}}}, "kubeletExtraArgs"),
    ({**CLUSTER, "apiServer": {"extraArgs": {"authorization-mode": "Node,RBAC"}}}, "extraArgs"),
], ids=["misspelt-field", "removed-in-v1beta4", "wrong-section", "v1beta3-arg-map", "v1beta3-extraargs-map"])
def test_fields_kubeadm_refuses_are_refused(document, field):
    with pytest.raises(KubeadmConfigError, match=field):
        validate_document(document)


def test_an_api_version_no_supported_kubeadm_reads_is_refused():
    with pytest.raises(KubeadmConfigError, match="apiVersion"):
        validate_document({**CLUSTER, "apiVersion": "kubeadm.k8s.io/v1beta2"})


# ------------------------------------------------------------------ v1beta3 (kubeadm 1.22-1.30)

CLUSTER3 = {**CLUSTER, "apiVersion": "kubeadm.k8s.io/v1beta3"}
INIT3 = {**INIT, "apiVersion": "kubeadm.k8s.io/v1beta3"}
JOIN3 = {**JOIN, "apiVersion": "kubeadm.k8s.io/v1beta3"}


@pytest.mark.parametrize("version, api", [
    ("1.30.9", "kubeadm.k8s.io/v1beta3"), ("1.22.0", "kubeadm.k8s.io/v1beta3"),
    ("1.31.0", "kubeadm.k8s.io/v1beta4"), ("1.36.3", "kubeadm.k8s.io/v1beta4"), ("v1.40.1", "kubeadm.k8s.io/v1beta4"),
])
def test_the_config_api_follows_the_kubernetes_release(version, api):
    assert config_api_version(version) == api


def test_v1beta3_takes_argument_maps_and_its_own_timeouts():
    cluster = validate_document({**CLUSTER3, "apiServer": {"extraArgs": {"authorization-mode": "Node,RBAC"},
                                                           "timeoutForControlPlane": "4m0s"},
                                 "etcd": {"local": {"extraArgs": {"quota-backend-bytes": "8589934592"}}}})
    init = validate_document({**INIT3, "nodeRegistration": {"kubeletExtraArgs": {"node-ip": "10.0.0.11"}}})
    join = validate_document({**JOIN3, "discovery": {**TOKEN_DISCOVERY, "timeout": "5m0s"}})
    assert (cluster.apiServer.extraArgs, init.nodeRegistration.kubeletExtraArgs, join.discovery.timeout) == (
        {"authorization-mode": "Node,RBAC"}, {"node-ip": "10.0.0.11"}, "5m0s")


@pytest.mark.parametrize("document, field", [
    ({**CLUSTER3, "apiServer": {"extraArgs": [{"name": "v", "value": "5"}]}}, "extraArgs"),
    ({**INIT3, "nodeRegistration": {"kubeletExtraArgs": [{"name": "v", "value": "5"}]}}, "kubeletExtraArgs"),
    ({**INIT3, "timeouts": {"discovery": "5m0s"}}, "timeouts"),
    ({**INIT3, "dryRun": True}, "dryRun"),
    ({**CLUSTER3, "proxy": {"disabled": True}}, "proxy"),
    ({**CLUSTER3, "encryptionAlgorithm": "ECDSA-P256"}, "encryptionAlgorithm"),
    ({**CLUSTER3, "dns": {"disabled": True}}, "disabled"),
    ({**CLUSTER3, "apiServer": {"extraEnvVars": [{"name": "A", "value": "1"}]}}, "extraEnvVars"),
    ({**INIT3, "nodeRegistration": {"imagePullSerial": True}}, "imagePullSerial"),
], ids=["arg-list", "kubelet-arg-list", "timeouts", "dry-run", "proxy", "encryption", "dns-disabled",
        "env-vars", "pull-serial"])
def test_v1beta4_only_fields_are_refused_in_v1beta3(document, field):
    with pytest.raises(KubeadmConfigError, match=field):
        validate_document(document)


def test_a_file_mixing_the_two_versions_is_refused():
    with pytest.raises(KubeadmConfigError, match="mixes"):
        validate_documents(yaml.safe_dump_all([INIT3, CLUSTER]))


def test_a_file_in_the_wrong_version_for_the_release_is_refused():
    text = yaml.safe_dump_all([INIT, CLUSTER])
    with pytest.raises(KubeadmConfigError, match="needs kubeadm.k8s.io/v1beta3"):
        validate_documents(text, config_api_version("1.30.9"))
    assert len(validate_documents(text, config_api_version("1.36.3"))) == 2


def test_unknown_kind_is_refused():
    with pytest.raises(KubeadmConfigError):
        validate_document({"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "ResetConfig"})


@pytest.mark.parametrize("document, message", [
    ({**INIT, "bootstrapTokens": [{"token": "ABCDEF.0123456789abcdef"}]}, "bootstrap token"),
    ({**INIT, "timeouts": {"discovery": "5 minutes"}}, "duration"),
    ({**INIT, "localAPIEndpoint": {"advertiseAddress": "10.0.0.300"}}, "localAPIEndpoint"),
    ({**INIT, "localAPIEndpoint": {"bindPort": 70000}}, "bindPort"),
    ({**INIT, "certificateKey": "short"}, "certificateKey"),
    ({**CLUSTER, "networking": {"podSubnet": "10.244.0.1/16"}}, "podSubnet"),
    ({**CLUSTER, "kubernetesVersion": "1.36"}, "Kubernetes version"),
    ({**CLUSTER, "controlPlaneEndpoint": "10.0.0.5:99999"}, "port"),
    ({**CLUSTER, "encryptionAlgorithm": "RSA-1024"}, "encryptionAlgorithm"),
    ({**INIT, "nodeRegistration": {"taints": [{"key": "a", "effect": "NoRun"}]}}, "effect"),
])
def test_bad_values_are_refused_with_the_field(document, message):
    with pytest.raises(KubeadmConfigError, match=message):
        validate_document(document)


def test_join_needs_exactly_one_discovery_method():
    both = {**TOKEN_DISCOVERY, "file": {"kubeConfigPath": "/etc/kubernetes/discovery.conf"}}
    with pytest.raises(KubeadmConfigError, match="exactly one"):
        validate_document({**JOIN, "discovery": both})


def test_join_needs_discovery():
    with pytest.raises(KubeadmConfigError, match="discovery"):
        validate_document(JOIN)


def test_ca_cert_hashes_need_the_sha256_form():
    discovery = {"bootstrapToken": {**TOKEN_DISCOVERY["bootstrapToken"], "caCertHashes": ["abc"]}}
    with pytest.raises(KubeadmConfigError, match="sha256"):
        validate_document({**JOIN, "discovery": discovery})


def test_etcd_is_local_or_external_not_both():
    etcd = {"local": {}, "external": {"endpoints": ["https://e:2379"], "caFile": "a", "certFile": "b", "keyFile": "c"}}
    with pytest.raises(KubeadmConfigError, match="mutually exclusive"):
        validate_document({**CLUSTER, "etcd": etcd})


def test_kubelet_cgroup_driver_is_an_enumeration():
    with pytest.raises(KubeadmConfigError, match="cgroupDriver"):
        validate_document({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                           "cgroupDriver": "systemD"})


def test_a_kind_twice_in_one_file_is_refused():
    text = yaml.safe_dump_all([CLUSTER, CLUSTER])
    with pytest.raises(KubeadmConfigError, match="more than once"):
        validate_documents(text)


def test_init_and_join_in_one_file_are_refused():
    text = yaml.safe_dump_all([INIT, {**JOIN, "discovery": TOKEN_DISCOVERY}])
    with pytest.raises(KubeadmConfigError, match="cannot be in one file"):
        validate_documents(text)


def test_an_empty_file_is_refused():
    with pytest.raises(KubeadmConfigError, match="no configuration"):
        validate_documents("---\n")
