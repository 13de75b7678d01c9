"""GPU, node and control-plane certificate alert rules, as one PrometheusRule that kube-prometheus-stack's Prometheus loads.

`alert_rules(namespace)` is the object; `rule_groups()` the same rules as a Prometheus rule
file's `groups:` (what promtool checks and unit-tests, tests/unit/test_alerts.py). Thresholds
are constants below, each with where its number comes from; docs/alerts.md lists what fires.

Metrics and their labels:
- GPUs: NVIDIA dcgm-exporter, deployed by the GPU Operator with a ServiceMonitor, so its
  target's job is the Service's name, `nvidia-dcgm-exporter`. Every GPU series carries
  `Hostname` (the node), `gpu` (index), `UUID`, `modelName` and `device`.
- Nodes: kube-state-metrics (job `kube-state-metrics`) and the kubelets, scraped by
  kube-prometheus-stack's kubelet ServiceMonitor (job `kubelet`; `metrics_path` tells
  /metrics from /metrics/cadvisor and /metrics/probes; the operator sets `node`).

Not every metric used here is in dcgm-exporter's default counter list: the ECC and NVLink
error counters are commented out in both etc/default-counters.csv and
etc/dcp-metrics-included.csv (the GPU Operator's default). `DCGM_COUNTERS_NEEDED` lists the
counters these rules read; until the exporter's counters CSV enables the missing ones
(GPU Operator values `dcgmExporter.config`), those rules evaluate to nothing and never fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROMETHEUS_RULE_API = "monitoring.coreos.com/v1"
KUBE_PROMETHEUS_RELEASE = "kube-prometheus-stack"
"""The platform's Helm release name (rackform.k8s.manifests.release_name("kube_prometheus_stack")).
kube-prometheus-stack's Prometheus selects PrometheusRules with `release: <release name>` (chart
template prometheus/prometheus.yaml: ruleSelector is empty and ruleSelectorNilUsesHelmValues
true by default), in every namespace (ruleNamespaceSelector {} by default)."""
RULE_NAME = "rackform-gpu-node-alerts"

_DURATION = {"type": "string",
             "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": {"groups": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "interval": _DURATION,
                "labels": _STRING_MAP,
                "limit": {"type": "integer"},
                "partial_response_strategy": {"type": "string", "pattern": "^(?i)(abort|warn)?$"},
                "query_offset": _DURATION,
                "rules": {"type": "array", "items": {
                    "type": "object", "required": ["expr"],
                    "properties": {
                        "alert": {"type": "string"},
                        "annotations": _STRING_MAP,
                        "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "for": _DURATION,
                        "keep_firing_for": {**_DURATION, "minLength": 1},
                        "labels": _STRING_MAP,
                        "record": {"type": "string"},
                    }}},
            }}}}},
    },
}
"""openAPIV3Schema of PrometheusRule monitoring.coreos.com/v1, without its descriptions (and the
`x-kubernetes-*` list markers). Source: prometheus-operator's CRD,
example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml at operator 0.82.2;
kube-prometheus-stack 70.0.0 installs the CRD of an operator release close to that one (not
compared field by field). The tests validate the object against it (tests/unit/test_alerts.py)."""

DCGM_JOB = "nvidia-dcgm-exporter"
"""The job of the GPU Operator's dcgm-exporter targets: its ServiceMonitor sets no jobLabel, so
the Prometheus Operator uses the Service's name."""
KUBELET_SELECTOR = 'job="kubelet", metrics_path="/metrics"'
KSM_JOB = "kube-state-metrics"

# ------------------------------------------------------------------ thresholds

GPU_TEMP_WARNING_CELSIUS = 85
"""`nvidia-smi -q -d TEMPERATURE` on an A100 SXM4 reports "GPU Max Operating Temp 85 C" (with
slowdown about 89 C and shutdown 92 C, as recalled): above it the GPU runs out of its rated
range. Other models differ by a few degrees; read the numbers on the site's GPUs."""
GPU_TEMP_WARNING_FOR = "5m"
"""Long enough that a burst at the start of a job does not page, short enough to act before
clocks throttle."""
GPU_TEMP_CRITICAL_CELSIUS = 90
"""Near the slowdown temperature (about 89-90 C on A100/H100, as recalled): the GPU throttles its
clocks here and a few degrees on shuts itself down."""
GPU_TEMP_CRITICAL_FOR = "2m"

XID_HARDWARE = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
"""Xids that NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) attributes to the GPU or its
firmware rather than to the application: 48 double-bit ECC, 63/64 row remapping / page retirement
(recorded / failed), 74 NVLink error, 79 fell off the bus, 92 high single-bit ECC rate, 94/95
contained/uncontained ECC error, 119/120 GSP (GPU System Processor) timeout/error. Others (13, 31,
43, 45 ...) are mostly application faults (bad kernel, MMU fault, a killed process): warnings."""

ERROR_WINDOW = "10m"
"""The window `increase()` looks back over for the error counters: at least a few scrapes at the
GPU Operator's 15 s-1 min intervals, so one missed scrape does not hide an increase."""
NVLINK_ERRORS_FOR = "15m"
"""CRC and replay errors are corrected by link-level retry; a single burst (a link retraining)
is not worth a page. Sustained for longer than ERROR_WINDOW means errors keep arriving, which
points at a cable, connector or NVSwitch port. rackform's choice: no published threshold."""
GPU_MISSING_LOOKBACK = "30m"
"""How far back a GPU must have reported to count as missing now."""
GPU_MISSING_FOR = "5m"
EXPORTER_DOWN_FOR = "5m"
ABSENT_FOR = "15m"
"""No target at all: slow, since it also covers a cluster coming up (targets not discovered yet)."""

NODE_NOT_READY_FOR = "5m"
"""The node lifecycle controller starts evicting pods from a NotReady node after 5 min
(default tolerationSeconds 300 for node.kubernetes.io/not-ready): alert when that starts."""
KUBELET_DOWN_FOR = "5m"
PLEG_RELIST_P99_SECONDS = 10
"""The kubelet reports the node NotReady ("PLEG is not healthy") once a relist has not finished in
3 minutes (pkg/kubelet/pleg relistThreshold); relists normally take well under a second. 10 s at
the 99th percentile is the early warning the kubernetes-mixin (KubeletPlegDurationHigh) uses."""
PLEG_FOR = "5m"
# Kubelet runtime operation errors (kubelet_runtime_operations_errors_total) are left out: some
# are routine (ExecSync of a failing probe, status of a container just removed), and there is no
# rate that separates a broken container runtime from a busy node without site data.

CERT_EXPIRY_METRIC = "rackform_kubeadm_certificate_expiry_timestamp_seconds"
"""When each kubeadm certificate of a control-plane node expires (Unix seconds): labels `node`,
`certificate` (kubeadm's name: apiserver, etcd-server, admin.conf ...) and `kind` (certificate or
authority). Written hourly by the kubeadm role's timer from `kubeadm certs check-expiration -o
json` into node-exporter's textfile folder. No component's own metric measures these: the API
server's apiserver_client_certificate_expiration_seconds is about the client certificates presented
*to* it, and the kubelet's certificate_manager_client_ttl_seconds /
kubelet_certificate_manager_server_ttl_seconds about the kubelet's own certificates, which it renews
itself; none sees the API server's serving certificate, etcd's, or the kubeconfigs' client ones."""
CERT_CHECK_METRIC = "rackform_kubeadm_certificate_check_timestamp_seconds"
"""When the timer last read the certificates (Unix seconds), label `node`."""
NODE_EXPORTER_JOB = "node-exporter"
"""kube-prometheus-stack's node-exporter: its ServiceMonitor takes the job from the Service's
`jobLabel: node-exporter` label (chart values prometheus-node-exporter.service.labels)."""
NODE_EXPORTER_TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
"""Where the timer writes on the node (role kubeadm's kubeadm_cert_metrics_dir; a unit test keeps
the two equal), mounted into node-exporter for its textfile collector (rackform.k8s.manifests)."""
CERT_EXPIRY_WARNING_DAYS = 30
"""The same as `rackform verify`'s default margin (kubernetes.cert_expiry_margin_days): a month to
plan a renewal (`rackform certs renew SITE`). kubeadm's certificates last a year."""
CERT_EXPIRY_CRITICAL_DAYS = 7
"""A week: the renewal must happen now; once one expires, the component using it stops working
(an expired admin.conf locks kubectl out, an expired apiserver.crt every client)."""
CERT_CHECK_STALE_S = 3 * 3600
"""The timer runs hourly: three missed runs mean the expiry above is no longer being refreshed
(it keeps its last value, so the expiry alerts still fire, but a renewal would not clear them)."""

DCGM_COUNTERS_NEEDED = (
    ("DCGM_FI_DEV_XID_ERRORS", True),
    ("DCGM_FI_DEV_GPU_TEMP", True),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", True),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", False),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", False),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", False),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", False),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", False),
)
"""(dcgm-exporter metric, enabled in its default counters CSV). The names are dcgm-exporter's for
the DCGM fields of the same name (its etc/*.csv, where the disabled ones sit commented out)."""

GPU = "GPU {{ $labels.gpu }} ({{ $labels.modelName }}, UUID {{ $labels.UUID }}) on {{ $labels.Hostname }}"
"""How an annotation names a GPU: dcgm-exporter's labels."""
DCGM_TARGET = "dcgm-exporter {{ $labels.pod }} ({{ $labels.instance }})"
NODE = "{{ $labels.node }}"


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str
    runbook: str
    """What to do, in words (no runbook site to link to)."""
    for_: str = "0s"

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ != "0s":
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary, "description": self.description, "runbook": self.runbook}
        return rule


def _any_of(metric: str, values: tuple[int, ...]) -> str:
    return " or ".join(f"{metric} == {value}" for value in values)


def _none_of(metric: str, values: tuple[int, ...]) -> str:
    return " and ".join([f"{metric} != 0", *(f"{metric} != {value}" for value in values)])


def _increased(metrics: tuple[str, ...]) -> str:
    return " or ".join(f"increase({metric}[{ERROR_WINDOW}]) > 0" for metric in metrics)


DRAIN = (f"Cordon and drain the node (kubectl drain {{{{ $labels.Hostname }}}} --ignore-daemonsets), "
         "then check `nvidia-smi -q` and the kernel log (dmesg | grep -i xid) on it.")

GPU_ALERTS = (
    # DCGM_FI_DEV_XID_ERRORS is a gauge: the last Xid DCGM saw on that GPU (0: none). Whether it
    # returns to 0 after the event or keeps the last value until the exporter restarts depends on
    # the DCGM version (uncertain); with no `for:` either way pages at the first scrape that sees it.
    Alert("GPUXidHardwareError", _any_of("DCGM_FI_DEV_XID_ERRORS", XID_HARDWARE), "critical",
          f"Xid {{{{ $value }}}} (hardware) on {GPU}",
          f"{GPU} reported Xid {{{{ $value }}}}, one NVIDIA attributes to the GPU, its memory, NVLink, "
          "the PCIe bus or the GPU's firmware. Jobs on this GPU have likely failed.",
          f"{DRAIN} Most of these Xids need a GPU reset (nvidia-smi -r) or a reboot; a repeat after the "
          "reset is a hardware case for the vendor (keep nvidia-bug-report.sh output)."),
    Alert("GPUXidError", _none_of("DCGM_FI_DEV_XID_ERRORS", XID_HARDWARE), "warning",
          f"Xid {{{{ $value }}}} on {GPU}",
          f"{GPU} reported Xid {{{{ $value }}}}. Such Xids are usually caused by the application "
          "(illegal memory access, a killed process), not the hardware.",
          "Find the job that ran on this GPU at that time and check its logs. If the same Xid repeats "
          "with different jobs, treat it as hardware: drain the node and check `nvidia-smi -q`."),
    Alert("GPUTemperatureHigh", f"DCGM_FI_DEV_GPU_TEMP > {GPU_TEMP_WARNING_CELSIUS}", "warning",
          f"{GPU} at {{{{ $value }}}} C",
          f"{GPU} has been above {GPU_TEMP_WARNING_CELSIUS} C for {GPU_TEMP_WARNING_FOR} "
          "(now {{ $value }} C).",
          "Check the node's fans and inlet temperature (its BMC's sensors: ipmitool sdr), the rack's "
          "airflow and blanking panels, and whether its neighbours run hot too.", GPU_TEMP_WARNING_FOR),
    Alert("GPUTemperatureCritical", f"DCGM_FI_DEV_GPU_TEMP > {GPU_TEMP_CRITICAL_CELSIUS}", "critical",
          f"{GPU} at {{{{ $value }}}} C: throttling",
          f"{GPU} has been above {GPU_TEMP_CRITICAL_CELSIUS} C for {GPU_TEMP_CRITICAL_FOR} "
          "(now {{ $value }} C): its clocks are slowed down and it shuts off a few degrees higher.",
          f"{DRAIN} Then fix the cooling (fans, inlet air, the rack's airflow) before it takes work again.",
          GPU_TEMP_CRITICAL_FOR),
    Alert("GPUDoubleBitECCError", _increased(("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",)), "critical",
          f"Uncorrectable (double-bit) ECC error on {GPU}",
          f"{GPU} counted double-bit ECC errors in the last {ERROR_WINDOW}: data in GPU memory was "
          "corrupted and the job using it is not to be trusted.",
          f"{DRAIN} Reset the GPU so row remapping / page retirement applies; if errors come back, "
          "the GPU goes back to the vendor."),
    Alert("GPURowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", "critical",
          f"Row remapping failed on {GPU}",
          f"{GPU} could not remap a memory row after an uncorrectable error: it has run out of spare rows.",
          f"{DRAIN} Keep it drained: the GPU needs replacing (RMA)."),
    Alert("GPUNVLinkErrors", _increased(("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                                         "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                                         "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL")), "warning",
          f"NVLink errors keep rising on {GPU}",
          f"{GPU} has counted NVLink CRC or replay errors in every {ERROR_WINDOW} window for "
          f"{NVLINK_ERRORS_FOR}. The links still work (the errors are retried) but slower, and a "
          "degrading link often goes on to fail.",
          "Look at the per-link counters (nvidia-smi nvlink -e -i {{ $labels.gpu }}) to find the link; "
          "schedule a drain and reseat or replace the GPU board / NVSwitch tray.", NVLINK_ERRORS_FOR),
    Alert("GPUNVLinkRecoveryErrors", _increased(("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",)), "critical",
          f"NVLink recovery errors on {GPU}",
          f"{GPU} counted NVLink recovery errors in the last {ERROR_WINDOW}: a link went down and had "
          "to be retrained; collective operations (NCCL) across it may have failed or hung.",
          f"{DRAIN} Check `nvidia-smi nvlink -s` for links that are down; a GPU reset or reboot "
          "retrains them, a repeat is hardware."),
    # A GPU that fell off the bus (Xid 79) disappears from the exporter while the node's other
    # GPUs keep reporting. `max by` drops the pod labels dcgm-exporter adds to GPUs in use, so a
    # job starting or ending is not a GPU going away; a node whose every GPU went is left to
    # GPUExporterDown, NodeNotReady and the Xid alerts.
    Alert("GPUMissing",
          f"max by (Hostname, gpu, UUID, modelName) (DCGM_FI_DEV_GPU_TEMP offset {GPU_MISSING_LOOKBACK})"
          " unless on (Hostname, UUID) max by (Hostname, UUID) (DCGM_FI_DEV_GPU_TEMP)"
          " and on (Hostname) group by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", "critical",
          f"{GPU} stopped reporting",
          f"{GPU} reported {GPU_MISSING_LOOKBACK} ago and has not for {GPU_MISSING_FOR}, while the "
          "node's other GPUs still do: it has most likely fallen off the bus (Xid 79).",
          f"{DRAIN} Look for Xid 79 in the kernel log; `nvidia-smi` listing fewer GPUs confirms it. "
          "A reboot usually brings it back; a repeat is a hardware (riser, board, power) case.",
          GPU_MISSING_FOR),
    Alert("GPUExporterDown", f'up{{job="{DCGM_JOB}"}} == 0', "warning",
          f"{DCGM_TARGET} cannot be scraped",
          f"Prometheus has failed to scrape {DCGM_TARGET} for {EXPORTER_DOWN_FOR}: the GPUs of its node "
          "are unwatched. dcgm-exporter crash-looping is often itself a sign of a GPU or driver fault.",
          "kubectl -n {{ $labels.namespace }} logs {{ $labels.pod }}; on the node, `nvidia-smi` (does "
          "it list every GPU? does it hang?) and the kernel log for Xids.", EXPORTER_DOWN_FOR),
    Alert("GPUExporterAbsent", f'absent(up{{job="{DCGM_JOB}"}})', "warning",
          "No dcgm-exporter target: GPU health is not monitored",
          f"Prometheus has had no target with job {DCGM_JOB} for {ABSENT_FOR}.",
          "Check that the GPU Operator runs its dcgm-exporter DaemonSet (on nodes labelled "
          "nvidia.com/gpu.present) and that dcgmExporter.serviceMonitor is enabled. On a cluster "
          "without GPU nodes this alert is expected: silence it.", ABSENT_FOR),
)

NODE_ALERTS = (
    Alert("NodeNotReady",
          f'kube_node_status_condition{{job="{KSM_JOB}", condition="Ready", status="true"}} == 0', "critical",
          f"Node {NODE} is not Ready",
          f"{NODE} has not been Ready for {NODE_NOT_READY_FOR}: its pods are being evicted and jobs "
          "spanning it have stopped.",
          "kubectl describe node {{ $labels.node }} (conditions, last heartbeat); on the node, "
          "`systemctl status kubelet containerd` and `journalctl -u kubelet`; if it does not answer, "
          "its BMC: rackform bmc status SITE, rackform console SITE HOST.", NODE_NOT_READY_FOR),
    Alert("KubeletDown", f"up{{{KUBELET_SELECTOR}}} == 0", "critical",
          f"Kubelet on {NODE} cannot be scraped",
          f"Prometheus has failed to scrape the kubelet of {NODE} ({{{{ $labels.instance }}}}) for "
          f"{KUBELET_DOWN_FOR}.",
          "On the node: `systemctl status kubelet` and `journalctl -u kubelet`; check that port 10250 "
          "is reachable from the Prometheus pod (network policy, host firewall).", KUBELET_DOWN_FOR),
    Alert("KubeletTargetsAbsent", f"absent(up{{{KUBELET_SELECTOR}}})", "critical",
          "No kubelet is being scraped",
          f"Prometheus has had no kubelet target for {ABSENT_FOR}: node alerts cannot fire.",
          "Check kube-prometheus-stack's kubelet ServiceMonitor and the kubelet Service it creates in "
          "kube-system (prometheusOperator.kubeletService).", ABSENT_FOR),
    Alert("KubeletPLEGSlow",
          f"histogram_quantile(0.99, sum by (node, instance, le) "
          f"(rate(kubelet_pleg_relist_duration_seconds_bucket{{{KUBELET_SELECTOR}}}[5m]))) "
          f">= {PLEG_RELIST_P99_SECONDS}", "warning",
          f"Kubelet on {NODE}: slow pod lifecycle relists",
          f"The kubelet of {NODE} has taken over {PLEG_RELIST_P99_SECONDS} s (99th percentile) to relist its pods "
          f"for {PLEG_FOR}; at 3 min "
          "it marks the node NotReady (PLEG is not healthy).",
          "Usually the container runtime is slow or stuck: on the node, `crictl ps` (does it answer?), "
          "`journalctl -u containerd`, and the node's load and disk I/O.", PLEG_FOR),
)


# Whole days left, rounded down: the same count `rackform verify` compares with its margin.
_DAYS_LEFT = f'floor(({CERT_EXPIRY_METRIC}{{job="{NODE_EXPORTER_JOB}"}} - time()) / 86400)'
CERTIFICATE = "kubeadm certificate {{ $labels.certificate }} ({{ $labels.kind }}) on {{ $labels.node }}"
RENEW = ("Renew the control plane's certificates: rackform certs renew SITE (one control-plane node at a time, "
         "the API answering throughout; docs/operations.md, Certificates). On the node, kubeadm certs "
         "check-expiration lists them all. A CA (kind authority) lasts ten years and is not renewed by it.")

CERTIFICATE_ALERTS = (
    # `< 30 >= 7`: a filter chain, so a certificate pages once, as a warning and then as critical.
    Alert("KubeadmCertificateExpiresSoon", f"{_DAYS_LEFT} < {CERT_EXPIRY_WARNING_DAYS} >= {CERT_EXPIRY_CRITICAL_DAYS}",
          "warning", f"{CERTIFICATE} expires in {{{{ $value }}}} days",
          f"{CERTIFICATE} expires in {{{{ $value }}}} days (under {CERT_EXPIRY_WARNING_DAYS}). When it does, the "
          "control-plane component that uses it stops working.", RENEW),
    Alert("KubeadmCertificateExpiresVerySoon", f"{_DAYS_LEFT} < {CERT_EXPIRY_CRITICAL_DAYS}", "critical",
          f"{CERTIFICATE} expires in {{{{ $value }}}} days",
          f"{CERTIFICATE} expires in {{{{ $value }}}} days (under {CERT_EXPIRY_CRITICAL_DAYS}; negative: expired). "
          "An expired certificate stops the API server, etcd or the controllers that use it, or locks the "
          "admin kubeconfig out.", RENEW),
    Alert("KubeadmCertificateCheckStale",
          f'time() - {CERT_CHECK_METRIC}{{job="{NODE_EXPORTER_JOB}"}} > {CERT_CHECK_STALE_S}', "warning",
          "Certificate expiry of {{ $labels.node }} not refreshed",
          f"The hourly certificate check of {{{{ $labels.node }}}} has not run for over {CERT_CHECK_STALE_S // 3600} "
          "hours: the certificate alerts see its last reading only.",
          "On the node: systemctl status rackform-kubeadm-cert-metrics.timer and journalctl -u "
          "rackform-kubeadm-cert-metrics (does kubeadm certs check-expiration -o json work?)."),
)


def rule_groups() -> list[dict[str, Any]]:
    """The rules as a Prometheus rule file's `groups:`."""
    return [{"name": "rackform.gpu", "rules": [alert.rule() for alert in GPU_ALERTS]},
            {"name": "rackform.nodes", "rules": [alert.rule() for alert in NODE_ALERTS]},
            {"name": "rackform.certificates", "rules": [alert.rule() for alert in CERTIFICATE_ALERTS]}]


def alert_rules(namespace: str) -> dict[str, Any]:
    """The PrometheusRule holding rackform's GPU, node and certificate alerts, in `namespace` (the monitoring one)."""
    return {
        "apiVersion": PROMETHEUS_RULE_API,
        "kind": "PrometheusRule",
        "metadata": {"name": RULE_NAME, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "rackform", "release": KUBE_PROMETHEUS_RELEASE}},
        "spec": {"groups": rule_groups()},
    }
