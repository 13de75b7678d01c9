"""kubeadm's configuration types, v1beta4 (kubeadm 1.31+) and v1beta3 (1.22-1.30), as pydantic models.

A faithful model of the API (kubeadm.k8s.io/v1beta4 and v1beta3: InitConfiguration,
ClusterConfiguration, JoinConfiguration; kubelet.config.k8s.io/v1beta1:
KubeletConfiguration) so the files rackform renders are checked offline, where no
kubeadm binary exists: unknown or misspelt fields are refused (extra=forbid), as
kubeadm's strict decoding refuses them, and values have the documented types and
enumerations. Field names are the API's camelCase names.

Which version a site's files are written in follows its Kubernetes release
(`config_api_version`, the one place that decides): kubeadm 1.31 introduced v1beta4 and
reads v1beta3 only for compatibility; kubeadm 1.30 and older cannot read v1beta4. What
differs between the two, as kubeadm v1.36.3's cmd/kubeadm/app/apis/kubeadm/v1beta3 and
v1beta4 types show: v1beta3's extraArgs and kubeletExtraArgs are maps (v1beta4: lists of
{name, value}); v1beta3 has no extraEnvVars, timeouts, dryRun, imagePullSerial,
dns.disabled, proxy, encryptionAlgorithm or certificate validity periods; its control-plane
wait is apiServer.timeoutForControlPlane and its discovery wait discovery.timeout.

`validate_documents(text, api_version)` checks a multi-document YAML file as kubeadm reads it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
KUBEADM_API_V1BETA3 = "kubeadm.k8s.io/v1beta3"
KUBEADM_APIS = (KUBEADM_API_V1BETA3, KUBEADM_API)
V1BETA4_SINCE = (1, 31)
"""The first Kubernetes minor whose kubeadm reads (and writes) v1beta4."""
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
KUBE_PROXY_API = "kubeproxy.config.k8s.io/v1alpha1"

# Go's time.ParseDuration: "4m0s", "24h", "1.5h", "300ms".
_DURATION = re.compile(r"^-?((\d+(\.\d+)?)(ns|us|µs|ms|s|m|h))+$|^0$")
# Bootstrap tokens: "[a-z0-9]{6}.[a-z0-9]{16}".
_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CA_CERT_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_VERSION = re.compile(r"^(v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?|stable(-\d+(\.\d+)?)?|latest(-\d+(\.\d+)?)?)$")
_CERTIFICATE_KEY = re.compile(r"^[0-9a-f]{64}$")


def config_api_version(kubernetes_version: str) -> str:
    """The kubeadm config apiVersion a site at this Kubernetes release is written in:
    v1beta4 from 1.31 on, v1beta3 before (read by kubeadm 1.22 to 1.30, and later ones)."""
    major, minor = (int(part) for part in kubernetes_version.lstrip("v").split(".")[:2])
    return KUBEADM_API if (major, minor) >= V1BETA4_SINCE else KUBEADM_API_V1BETA3


def _duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a duration (Go syntax, such as '4m0s' or '24h')")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Arg(_Strict):
    """v1beta4 replaced extraArgs maps with ordered name/value lists."""

    name: str
    value: str


class EnvVar(_Strict):
    """core/v1 EnvVar (extraEnvVars)."""

    name: str
    value: str | None = None
    valueFrom: dict[str, Any] | None = None


class HostPathMount(_Strict):
    name: str
    hostPath: str
    mountPath: str
    readOnly: bool | None = None
    pathType: Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                      "CharDevice", "BlockDevice"] | None = None


class Taint(_Strict):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    timeAdded: str | None = None


class _NodeRegistration(_Strict):
    name: str | None = None
    criSocket: str | None = None
    # null or absent: kubeadm taints control-plane nodes; [] means no taints.
    taints: list[Taint] | None = None
    ignorePreflightErrors: list[str] | None = None
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None


class NodeRegistrationOptions(_NodeRegistration):
    kubeletExtraArgs: list[Arg] | None = None
    imagePullSerial: bool | None = None


class NodeRegistrationOptionsV1beta3(_NodeRegistration):
    kubeletExtraArgs: dict[str, str] | None = None


class APIEndpoint(_Strict):
    advertiseAddress: str | None = None
    bindPort: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("advertiseAddress")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value:
            ipaddress.ip_address(value)
        return value


class BootstrapToken(_Strict):
    token: str
    description: str | None = None
    ttl: str | None = None
    expires: str | None = None
    usages: list[Literal["signing", "authentication"]] | None = None
    groups: list[str] | None = None

    @field_validator("token")
    @classmethod
    def _token(cls, value: str) -> str:
        if not _TOKEN.match(value):
            raise ValueError("a bootstrap token is 6 and 16 characters of [a-z0-9] joined by a dot")
        return value

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class Patches(_Strict):
    directory: str | None = None


class Timeouts(_Strict):
    controlPlaneComponentHealthCheck: str | None = None
    kubeletHealthCheck: str | None = None
    kubernetesAPICall: str | None = None
    etcdAPICall: str | None = None
    tlsBootstrap: str | None = None
    discovery: str | None = None
    upgradeManifests: str | None = None

    @field_validator("*")
    @classmethod
    def _durations(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class _Typed(_Strict):
    apiVersion: Literal["kubeadm.k8s.io/v1beta4"]


class _TypedV1beta3(_Strict):
    apiVersion: Literal["kubeadm.k8s.io/v1beta3"]


class _InitCommon(_Strict):
    kind: Literal["InitConfiguration"]
    bootstrapTokens: list[BootstrapToken] | None = None
    localAPIEndpoint: APIEndpoint | None = None
    certificateKey: str | None = None
    skipPhases: list[str] | None = None
    patches: Patches | None = None

    @field_validator("certificateKey")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and not _CERTIFICATE_KEY.match(value):
            raise ValueError("certificateKey is 32 bytes as 64 hex characters (kubeadm certs certificate-key)")
        return value


class InitConfiguration(_InitCommon, _Typed):
    dryRun: bool | None = None
    nodeRegistration: NodeRegistrationOptions | None = None
    timeouts: Timeouts | None = None


class InitConfigurationV1beta3(_InitCommon, _TypedV1beta3):
    nodeRegistration: NodeRegistrationOptionsV1beta3 | None = None


class ControlPlaneComponent(_Strict):
    extraArgs: list[Arg] | None = None
    extraVolumes: list[HostPathMount] | None = None
    extraEnvVars: list[EnvVar] | None = None


class ControlPlaneComponentV1beta3(_Strict):
    extraArgs: dict[str, str] | None = None
    extraVolumes: list[HostPathMount] | None = None


class APIServer(ControlPlaneComponent):
    certSANs: list[str] | None = None


class APIServerV1beta3(ControlPlaneComponentV1beta3):
    certSANs: list[str] | None = None
    timeoutForControlPlane: str | None = None

    @field_validator("timeoutForControlPlane")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class _ImageMeta(_Strict):
    imageRepository: str | None = None
    imageTag: str | None = None


class DNS(_ImageMeta):
    disabled: bool | None = None


class DNSV1beta3(_ImageMeta):
    pass


class Proxy(_Strict):
    disabled: bool | None = None


class _LocalEtcdCommon(_ImageMeta):
    dataDir: str | None = None
    serverCertSANs: list[str] | None = None
    peerCertSANs: list[str] | None = None


class LocalEtcd(_LocalEtcdCommon):
    extraArgs: list[Arg] | None = None
    extraEnvVars: list[EnvVar] | None = None


class LocalEtcdV1beta3(_LocalEtcdCommon):
    extraArgs: dict[str, str] | None = None


class ExternalEtcd(_Strict):
    endpoints: list[str]
    caFile: str
    certFile: str
    keyFile: str


class _EtcdCommon(_Strict):
    external: ExternalEtcd | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> _EtcdCommon:
        if getattr(self, "local", None) is not None and self.external is not None:
            raise ValueError("local and external are mutually exclusive")
        return self


class Etcd(_EtcdCommon):
    local: LocalEtcd | None = None


class EtcdV1beta3(_EtcdCommon):
    local: LocalEtcdV1beta3 | None = None


class Networking(_Strict):
    serviceSubnet: str | None = None
    podSubnet: str | None = None
    dnsDomain: str | None = None

    @field_validator("serviceSubnet", "podSubnet")
    @classmethod
    def _subnets(cls, value: str | None) -> str | None:
        # Dual-stack clusters list an IPv4 and an IPv6 prefix, comma separated.
        for part in (value or "").split(",") if value else ():
            ipaddress.ip_network(part.strip(), strict=True)
        return value


class _ClusterCommon(_Strict):
    kind: Literal["ClusterConfiguration"]
    networking: Networking | None = None
    kubernetesVersion: str | None = None
    controlPlaneEndpoint: str | None = None
    certificatesDir: str | None = None
    imageRepository: str | None = None
    featureGates: dict[str, bool] | None = None
    clusterName: str | None = None

    @field_validator("kubernetesVersion")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is not None and not _VERSION.match(value):
            raise ValueError(f"{value!r} is not a Kubernetes version (v1.36.3, stable-1.36, latest)")
        return value

    @field_validator("controlPlaneEndpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value:
            host, _, port = value.rpartition(":") if not value.endswith("]") and value.count(":") == 1 else (value, "", "")
            if port and not (port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"{value!r}: the port must be 1-65535")
            if not host:
                raise ValueError(f"{value!r}: a host name or address is needed before the port")
        return value



class ClusterConfiguration(_ClusterCommon, _Typed):
    etcd: Etcd | None = None
    apiServer: APIServer | None = None
    controllerManager: ControlPlaneComponent | None = None
    scheduler: ControlPlaneComponent | None = None
    dns: DNS | None = None
    proxy: Proxy | None = None
    encryptionAlgorithm: Literal["RSA-2048", "RSA-3072", "RSA-4096", "ECDSA-P256", "ECDSA-P384"] | None = None
    certificateValidityPeriod: str | None = None
    caCertificateValidityPeriod: str | None = None

    @field_validator("certificateValidityPeriod", "caCertificateValidityPeriod")
    @classmethod
    def _periods(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class ClusterConfigurationV1beta3(_ClusterCommon, _TypedV1beta3):
    etcd: EtcdV1beta3 | None = None
    apiServer: APIServerV1beta3 | None = None
    controllerManager: ControlPlaneComponentV1beta3 | None = None
    scheduler: ControlPlaneComponentV1beta3 | None = None
    dns: DNSV1beta3 | None = None


class BootstrapTokenDiscovery(_Strict):
    token: str | None = None
    apiServerEndpoint: str | None = None
    caCertHashes: list[str] | None = None
    unsafeSkipCAVerification: bool | None = None

    @field_validator("caCertHashes")
    @classmethod
    def _hashes(cls, value: list[str] | None) -> list[str] | None:
        for item in value or ():
            if not _CA_CERT_HASH.match(item):
                raise ValueError(f"{item!r}: a CA certificate hash is 'sha256:' and 64 hex characters")
        return value


class FileDiscovery(_Strict):
    kubeConfigPath: str


class Discovery(_Strict):
    bootstrapToken: BootstrapTokenDiscovery | None = None
    file: FileDiscovery | None = None
    tlsBootstrapToken: str | None = None

    @model_validator(mode="after")
    def _one_method(self) -> Discovery:
        if (self.bootstrapToken is None) == (self.file is None):
            raise ValueError("exactly one of bootstrapToken and file")
        return self


class DiscoveryV1beta3(Discovery):
    timeout: str | None = None
    """v1beta4 moved it to JoinConfiguration.timeouts.discovery."""

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class JoinControlPlane(_Strict):
    localAPIEndpoint: APIEndpoint | None = None
    certificateKey: str | None = None


class _JoinCommon(_Strict):
    kind: Literal["JoinConfiguration"]
    caCertPath: str | None = None
    controlPlane: JoinControlPlane | None = None
    skipPhases: list[str] | None = None
    patches: Patches | None = None


class JoinConfiguration(_JoinCommon, _Typed):
    dryRun: bool | None = None
    nodeRegistration: NodeRegistrationOptions | None = None
    discovery: Discovery
    timeouts: Timeouts | None = None


class JoinConfigurationV1beta3(_JoinCommon, _TypedV1beta3):
    nodeRegistration: NodeRegistrationOptionsV1beta3 | None = None
    discovery: DiscoveryV1beta3


class KubeletConfiguration(_Strict):
    """kubelet.config.k8s.io/v1beta1: the fields kubeadm passes on to every kubelet."""

    apiVersion: Literal["kubelet.config.k8s.io/v1beta1"]
    kind: Literal["KubeletConfiguration"]
    enableServer: bool | None = None
    staticPodPath: str | None = None
    podLogsDir: str | None = None
    syncFrequency: str | None = None
    fileCheckFrequency: str | None = None
    httpCheckFrequency: str | None = None
    staticPodURL: str | None = None
    staticPodURLHeader: dict[str, list[str]] | None = None
    address: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    readOnlyPort: int | None = Field(default=None, ge=0, le=65535)
    tlsCertFile: str | None = None
    tlsPrivateKeyFile: str | None = None
    tlsCipherSuites: list[str] | None = None
    tlsMinVersion: str | None = None
    rotateCertificates: bool | None = None
    serverTLSBootstrap: bool | None = None
    authentication: dict[str, Any] | None = None
    authorization: dict[str, Any] | None = None
    registryPullQPS: int | None = None
    registryBurst: int | None = None
    eventRecordQPS: int | None = None
    eventBurst: int | None = None
    enableDebuggingHandlers: bool | None = None
    enableContentionProfiling: bool | None = None
    healthzPort: int | None = None
    healthzBindAddress: str | None = None
    oomScoreAdj: int | None = None
    clusterDomain: str | None = None
    clusterDNS: list[str] | None = None
    streamingConnectionIdleTimeout: str | None = None
    nodeStatusUpdateFrequency: str | None = None
    nodeStatusReportFrequency: str | None = None
    nodeLeaseDurationSeconds: int | None = None
    imageMinimumGCAge: str | None = None
    imageMaximumGCAge: str | None = None
    imageGCHighThresholdPercent: int | None = Field(default=None, ge=0, le=100)
    imageGCLowThresholdPercent: int | None = Field(default=None, ge=0, le=100)
    volumeStatsAggPeriod: str | None = None
    kubeletCgroups: str | None = None
    systemCgroups: str | None = None
    cgroupRoot: str | None = None
    cgroupsPerQOS: bool | None = None
    cgroupDriver: Literal["systemd", "cgroupfs"] | None = None
    cpuManagerPolicy: Literal["none", "static"] | None = None
    singleProcessOOMKill: bool | None = None
    cpuManagerPolicyOptions: dict[str, str] | None = None
    cpuManagerReconcilePeriod: str | None = None
    memoryManagerPolicy: Literal["None", "Static"] | None = None
    topologyManagerPolicy: Literal["none", "best-effort", "restricted", "single-numa-node"] | None = None
    topologyManagerScope: Literal["container", "pod"] | None = None
    topologyManagerPolicyOptions: dict[str, str] | None = None
    qosReserved: dict[str, str] | None = None
    runtimeRequestTimeout: str | None = None
    hairpinMode: Literal["promiscuous-bridge", "hairpin-veth", "none"] | None = None
    maxPods: int | None = Field(default=None, ge=1)
    podCIDR: str | None = None
    podPidsLimit: int | None = None
    resolvConf: str | None = None
    runOnce: bool | None = None
    cpuCFSQuota: bool | None = None
    cpuCFSQuotaPeriod: str | None = None
    nodeStatusMaxImages: int | None = None
    maxOpenFiles: int | None = None
    contentType: str | None = None
    kubeAPIQPS: int | None = None
    kubeAPIBurst: int | None = None
    serializeImagePulls: bool | None = None
    maxParallelImagePulls: int | None = None
    evictionHard: dict[str, str] | None = None
    evictionSoft: dict[str, str] | None = None
    evictionSoftGracePeriod: dict[str, str] | None = None
    evictionPressureTransitionPeriod: str | None = None
    evictionMaxPodGracePeriod: int | None = None
    evictionMinimumReclaim: dict[str, str] | None = None
    podsPerCore: int | None = None
    enableControllerAttachDetach: bool | None = None
    protectKernelDefaults: bool | None = None
    makeIPTablesUtilChains: bool | None = None
    iptablesMasqueradeBit: int | None = None
    iptablesDropBit: int | None = None
    featureGates: dict[str, bool] | None = None
    failSwapOn: bool | None = None
    memorySwap: dict[str, str] | None = None
    containerLogMaxSize: str | None = None
    containerLogMaxFiles: int | None = None
    containerLogMaxWorkers: int | None = None
    containerLogMonitorInterval: str | None = None
    configMapAndSecretChangeDetectionStrategy: Literal["Get", "Cache", "Watch"] | None = None
    systemReserved: dict[str, str] | None = None
    kubeReserved: dict[str, str] | None = None
    reservedSystemCPUs: str | None = None
    showHiddenMetricsForVersion: str | None = None
    systemReservedCgroup: str | None = None
    kubeReservedCgroup: str | None = None
    enforceNodeAllocatable: list[Literal["pods", "system-reserved", "kube-reserved", "none"]] | None = None
    allowedUnsafeSysctls: list[str] | None = None
    volumePluginDir: str | None = None
    providerID: str | None = None
    kernelMemcgNotification: bool | None = None
    logging: dict[str, Any] | None = None
    enableSystemLogHandler: bool | None = None
    enableSystemLogQuery: bool | None = None
    shutdownGracePeriod: str | None = None
    shutdownGracePeriodCriticalPods: str | None = None
    shutdownGracePeriodByPodPriority: list[dict[str, Any]] | None = None
    crashLoopBackOff: dict[str, Any] | None = None
    reservedMemory: list[dict[str, Any]] | None = None
    enableProfilingHandler: bool | None = None
    enableDebugFlagsHandler: bool | None = None
    seccompDefault: bool | None = None
    memoryThrottlingFactor: float | None = None
    registerWithTaints: list[Taint] | None = None
    registerNode: bool | None = None
    tracing: dict[str, Any] | None = None
    localStorageCapacityIsolation: bool | None = None
    containerRuntimeEndpoint: str | None = None
    imageServiceEndpoint: str | None = None
    failCgroupV1: bool | None = None

    @field_validator(
        "syncFrequency", "fileCheckFrequency", "httpCheckFrequency", "streamingConnectionIdleTimeout",
        "nodeStatusUpdateFrequency", "nodeStatusReportFrequency", "imageMinimumGCAge", "imageMaximumGCAge",
        "volumeStatsAggPeriod", "cpuManagerReconcilePeriod", "runtimeRequestTimeout", "cpuCFSQuotaPeriod",
        "evictionPressureTransitionPeriod", "containerLogMonitorInterval", "shutdownGracePeriod",
        "shutdownGracePeriodCriticalPods",
    )
    @classmethod
    def _durations(cls, value: str | None) -> str | None:
        return value if value is None else _duration(value)


class KubeProxyConfiguration(BaseModel):
    """Accepted in a kubeadm file but not modelled: rackform does not write one."""

    model_config = ConfigDict(extra="allow")
    apiVersion: Literal["kubeproxy.config.k8s.io/v1alpha1"]
    kind: Literal["KubeProxyConfiguration"]


KubeadmDocument = Annotated[
    InitConfiguration | ClusterConfiguration | JoinConfiguration | KubeletConfiguration | KubeProxyConfiguration,
    Field(discriminator="kind"),
]
KubeadmDocumentV1beta3 = Annotated[
    InitConfigurationV1beta3 | ClusterConfigurationV1beta3 | JoinConfigurationV1beta3 | KubeletConfiguration
    | KubeProxyConfiguration,
    Field(discriminator="kind"),
]
_DOCUMENT = TypeAdapter(KubeadmDocument)
_DOCUMENT_V1BETA3 = TypeAdapter(KubeadmDocumentV1beta3)
# One kind per file at most (kubeadm refuses duplicates); Init and Join never together.
_EXCLUSIVE_KINDS = {"InitConfiguration", "JoinConfiguration"}


class KubeadmConfigError(ValueError):
    """A kubeadm configuration file kubeadm would refuse; the message names the document and field."""


def validate_document(document: dict) -> BaseModel:
    """One document, by its kind and (kubeadm's own kinds) its apiVersion: v1beta3 or v1beta4."""
    v1beta3 = isinstance(document, dict) and document.get("apiVersion") == KUBEADM_API_V1BETA3
    try:
        return (_DOCUMENT_V1BETA3 if v1beta3 else _DOCUMENT).validate_python(document)
    except ValidationError as error:
        kind = document.get("kind", "?") if isinstance(document, dict) else "?"
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc'][1:]) or 'document'}: {issue['msg']}"
            for issue in error.errors()
        )
        raise KubeadmConfigError(f"{kind}: {problems}") from None


def validate_documents(text: str, api_version: str | None = None) -> list[BaseModel]:
    """Every document of a kubeadm `--config` file, validated; raises KubeadmConfigError.

    api_version: the kubeadm.k8s.io version the file must be written in (`config_api_version`
    of the site's release); None accepts either, one for the whole file."""
    documents = [document for document in yaml.safe_load_all(text) if document is not None]
    if not documents:
        raise KubeadmConfigError("no configuration documents")
    models = [validate_document(document) for document in documents]
    kubeadm_versions = sorted({document["apiVersion"] for document in documents
                               if str(document.get("apiVersion", "")).startswith("kubeadm.k8s.io/")})
    if len(kubeadm_versions) > 1:
        raise KubeadmConfigError(f"the file mixes {' and '.join(kubeadm_versions)}: write every kubeadm document in one")
    if api_version is not None and kubeadm_versions and kubeadm_versions != [api_version]:
        raise KubeadmConfigError(f"written in {kubeadm_versions[0]}, but this Kubernetes release's kubeadm "
                                 f"needs {api_version}")
    kinds = [document["kind"] for document in documents]
    repeated = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if repeated:
        raise KubeadmConfigError(f"{', '.join(repeated)} appears more than once")
    if _EXCLUSIVE_KINDS <= set(kinds):
        raise KubeadmConfigError("InitConfiguration and JoinConfiguration cannot be in one file")
    return models
