"""The GPU and node alert rules (rackform/k8s/alerts.py), checked and unit-tested by promtool.

promtool is built from Prometheus' Go module (sources/prometheus/, rackform/k8s/promtool.py) and
cached; `make promtool` builds it before the test targets and puts it beside rackform
(.venv/bin), so here it is only looked up (rackform.installed_tools), never built. Each
alert has a case where bad series make it fire and one where healthy series (or bad ones that do
not last their `for:`) leave it silent; promtool evaluates the rules over the series minute by
minute, as Prometheus would. Expected annotations are the rule's templates filled with the
alert's labels, so a template naming a label the series do not carry fails here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from platform_validation import strict_schema

from hang_limit import SUBPROCESS_HANG_S
from rackform.installed_tools import find_tool, not_found
from rackform.k8s import alerts, promtool
from rackform.k8s.manifests import helm_values, release_name
from rackform.k8s.platform import PlatformDesign
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site

REPO = Path(__file__).resolve().parents[2]
RULES = {rule["alert"]: rule for group in alerts.rule_groups() for rule in group["rules"]}

# ------------------------------------------------------------------ series and expectations

DCGM_TARGET = {"job": alerts.DCGM_JOB, "namespace": "gpu-operator", "instance": "10.0.0.11:9400",
               "pod": "nvidia-dcgm-exporter-x7k2p"}


def gpu(index: int, host: str = "gpu-a", **extra: str) -> dict[str, str]:
    """The labels dcgm-exporter puts on one GPU's series, behind the GPU Operator's ServiceMonitor."""
    return {**DCGM_TARGET, "Hostname": host, "gpu": str(index), "UUID": f"GPU-{host}-{index:04d}",
            "modelName": "NVIDIA H100 80GB HBM3", "device": f"nvidia{index}", **extra}


def kubelet(node: str, path: str = "/metrics") -> dict[str, str]:
    return {"job": "kubelet", "metrics_path": path, "node": node, "instance": f"{node}.lab:10250"}


def ksm(node: str, status: str) -> dict[str, str]:
    return {"job": alerts.KSM_JOB, "instance": "10.1.0.5:8080", "node": node, "condition": "Ready", "status": status}


def control_plane_certificate(node: str, certificate: str, kind: str = "certificate") -> dict[str, str]:
    """A kubeadm certificate's expiry series: the textfile's own labels behind node-exporter's target."""
    return {"job": alerts.NODE_EXPORTER_JOB, "instance": "10.10.0.11:9100", "node": node,
            "certificate": certificate, "kind": kind}


def certificate_check(node: str) -> dict[str, str]:
    return {"job": alerts.NODE_EXPORTER_JOB, "instance": "10.10.0.11:9100", "node": node}


DAY_S = 86400


def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    body = ", ".join(f'{name}="{value}"' for name, value in sorted(labels.items()))
    return {"series": f"{metric}{{{body}}}", "values": values}


def _render(template: str, labels: dict[str, str], value: float | None) -> str:
    def field(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "$value":
            assert value is not None, f"{template!r} shows $value: give the test its value"
            return str(int(value)) if value == int(value) else repr(value)
        label = name.removeprefix("$labels.")
        assert label in labels, f"{template!r} names label {label}, which the alert does not carry"
        return labels[label]
    return re.sub(r"\{\{ (\$value|\$labels\.\w+) \}\}", field, template)


def firing(alert: str, labels: dict[str, str], value: float | None = None) -> dict[str, Any]:
    """One expected alert: the series' labels plus the rule's, annotations filled in."""
    rule = RULES[alert]
    return {"exp_labels": {**labels, **rule["labels"]},
            "exp_annotations": {key: _render(text, labels, value) for key, text in rule["annotations"].items()}}


def check(at: str, alert: str, *expected: dict[str, Any]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": list(expected)}


# Series notation (promtool): `a+bxN` is a, a+b, ... N+1 samples one interval (1m) apart;
# `_` a missing sample; `stale` ends the series there.
CASES: list[dict[str, Any]] = [
    {  # Xid: hardware Xids are critical, others warnings; 0 is "none".
        "input_series": [series("DCGM_FI_DEV_XID_ERRORS", gpu(0), "0x5 48x5"),
                         series("DCGM_FI_DEV_XID_ERRORS", gpu(1), "0x5 13x5"),
                         series("DCGM_FI_DEV_XID_ERRORS", gpu(2), "0x11"),
                         series("DCGM_FI_DEV_XID_ERRORS", gpu(3), "0x5 79x5")],
        "alert_rule_test": [
            check("3m", "GPUXidHardwareError"), check("3m", "GPUXidError"),
            check("7m", "GPUXidHardwareError", firing("GPUXidHardwareError", gpu(0), 48),
                  firing("GPUXidHardwareError", gpu(3), 79)),
            check("7m", "GPUXidError", firing("GPUXidError", gpu(1), 13)),
        ],
    },
    {  # Temperature: over the threshold for the whole `for:`; a GPU going above and below does not page.
        "input_series": [series("DCGM_FI_DEV_GPU_TEMP", gpu(0), "70x4 88x12"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(1), "70x4 95x12"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(2), "86x3 70x3 86x3 70x3 86x3"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(3), "62x16")],
        "alert_rule_test": [
            check("9m", "GPUTemperatureHigh"),
            check("6m", "GPUTemperatureCritical"),
            check("8m", "GPUTemperatureCritical", firing("GPUTemperatureCritical", gpu(1), 95)),
            check("11m", "GPUTemperatureHigh", firing("GPUTemperatureHigh", gpu(0), 88),
                  firing("GPUTemperatureHigh", gpu(1), 95)),
            check("16m", "GPUTemperatureHigh", firing("GPUTemperatureHigh", gpu(0), 88),
                  firing("GPUTemperatureHigh", gpu(1), 95)),
        ],
    },
    {  # Double-bit ECC: any increase, for ERROR_WINDOW; a counter reset (reboot) is not an error.
        "input_series": [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(0), "0x10 1x20"),
                         series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(1), "0x30"),
                         series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(2), "5x10 0x20")],
        "alert_rule_test": [
            check("5m", "GPUDoubleBitECCError"),
            check("13m", "GPUDoubleBitECCError", firing("GPUDoubleBitECCError", gpu(0))),
            check("25m", "GPUDoubleBitECCError"),
        ],
    },
    {
        "input_series": [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(0), "0x5 1x5"),
                         series("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(1), "0x10")],
        "alert_rule_test": [
            check("3m", "GPURowRemapFailure"),
            check("7m", "GPURowRemapFailure", firing("GPURowRemapFailure", gpu(0))),
        ],
    },
    {  # NVLink CRC/replay errors: rising through NVLINK_ERRORS_FOR pages; one burst does not.
        "input_series": [series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu(0), "0+5x40"),
                         series("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", gpu(1), "0+1x40"),
                         series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", gpu(2), "0+2x40"),
                         series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", gpu(3), "0x10 50x30"),
                         series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu(4), "7x40")],
        "alert_rule_test": [
            check("10m", "GPUNVLinkErrors"),
            check("20m", "GPUNVLinkErrors", *(firing("GPUNVLinkErrors", gpu(n)) for n in (0, 1, 2))),
            check("30m", "GPUNVLinkErrors", *(firing("GPUNVLinkErrors", gpu(n)) for n in (0, 1, 2))),
        ],
    },
    {
        "input_series": [series("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", gpu(0), "0x10 1x15"),
                         series("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", gpu(1), "0x25")],
        "alert_rule_test": [
            check("8m", "GPUNVLinkRecoveryErrors"),
            check("12m", "GPUNVLinkRecoveryErrors", firing("GPUNVLinkRecoveryErrors", gpu(0))),
        ],
    },
    {  # A GPU that stops reporting while its node's others go on; not a whole node, not a new pod label.
        "input_series": [series("DCGM_FI_DEV_GPU_TEMP", gpu(0), "60x45"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(1), "60x20 stale"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(0, "gpu-b"), "60x20 stale"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(1, "gpu-b"), "60x20 stale"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(0, "gpu-c", exported_pod="train-1"), "60x20 stale"),
                         series("DCGM_FI_DEV_GPU_TEMP", gpu(0, "gpu-c", exported_pod="train-2"), "_x20 60x25")],
        "alert_rule_test": [
            check("15m", "GPUMissing"),
            check("24m", "GPUMissing"),
            check("40m", "GPUMissing", firing("GPUMissing", {k: gpu(1)[k] for k in ("Hostname", "gpu", "UUID",
                                                                                   "modelName")})),
        ],
    },
    {
        "input_series": [series("up", DCGM_TARGET, "1x5 0x10"),
                         series("up", {**DCGM_TARGET, "instance": "10.0.0.12:9400", "pod": "nvidia-dcgm-exporter-q9"},
                                "1x15")],
        "alert_rule_test": [
            check("9m", "GPUExporterDown"),
            check("13m", "GPUExporterDown", firing("GPUExporterDown", DCGM_TARGET)),
            check("13m", "GPUExporterAbsent"),
        ],
    },
    {  # No target at all: nothing scraped with the exporter's or the kubelets' job.
        "input_series": [series("up", {"job": "node-exporter", "instance": "10.0.0.11:9100"}, "1x20")],
        "alert_rule_test": [
            check("10m", "GPUExporterAbsent"), check("10m", "KubeletTargetsAbsent"),
            check("16m", "GPUExporterAbsent", firing("GPUExporterAbsent", {"job": alerts.DCGM_JOB})),
            check("16m", "KubeletTargetsAbsent", firing("KubeletTargetsAbsent", {"job": "kubelet",
                                                                                 "metrics_path": "/metrics"})),
        ],
    },
    {  # NotReady (status="true" at 0: False or Unknown) for NODE_NOT_READY_FOR; a flap does not page.
        "input_series": [series("kube_node_status_condition", ksm("gpu-a", "true"), "1x3 0x10"),
                         series("kube_node_status_condition", ksm("gpu-a", "false"), "0x3 1x10"),
                         series("kube_node_status_condition", ksm("gpu-b", "true"), "1x13"),
                         series("kube_node_status_condition", ksm("gpu-c", "true"), "0x3 1x1 0x3 1x5")],
        "alert_rule_test": [
            check("7m", "NodeNotReady"),
            check("10m", "NodeNotReady", firing("NodeNotReady", ksm("gpu-a", "true"))),
        ],
    },
    {  # The kubelet's /metrics target down; its cAdvisor endpoint (another metrics_path) is not the kubelet.
        "input_series": [series("up", kubelet("gpu-a"), "1x2 0x10"),
                         series("up", kubelet("gpu-b"), "1x12"),
                         series("up", kubelet("gpu-b", "/metrics/cadvisor"), "0x12")],
        "alert_rule_test": [
            check("6m", "KubeletDown"),
            check("9m", "KubeletDown", firing("KubeletDown", kubelet("gpu-a"))),
            check("9m", "KubeletTargetsAbsent"),
        ],
    },
    {  # PLEG relists: gpu-a's all take 10-30 s, gpu-b's under 0.1 s.
        "input_series": [
            *(series("kubelet_pleg_relist_duration_seconds_bucket", {**kubelet("gpu-a"), "le": le}, "0x20")
              for le in ("0.1", "1", "10")),
            *(series("kubelet_pleg_relist_duration_seconds_bucket", {**kubelet("gpu-a"), "le": le}, "0+6x20")
              for le in ("30", "+Inf")),
            *(series("kubelet_pleg_relist_duration_seconds_bucket", {**kubelet("gpu-b"), "le": le}, "0+60x20")
              for le in ("0.1", "1", "10", "30", "+Inf")),
        ],
        "alert_rule_test": [
            check("4m", "KubeletPLEGSlow"),
            check("8m", "KubeletPLEGSlow",
                  firing("KubeletPLEGSlow", {k: kubelet("gpu-a")[k] for k in ("node", "instance")})),
        ],
    },
]

# kubeadm's certificates: the expiry is a timestamp, and promtool's time() starts at 0, so a
# certificate expiring at 30 days and 5 minutes has 30 whole days left at 3m and 29 at 10m.
_APISERVER = control_plane_certificate("mgmt-1", "apiserver")
_ETCD = control_plane_certificate("mgmt-2", "etcd-server")
_ADMIN = control_plane_certificate("mgmt-3", "admin.conf")
_CA = control_plane_certificate("mgmt-1", "ca", "authority")
CASES += [
    {  # Crossing 30 days warns, crossing 7 pages (and no longer warns); expired (negative) pages; a CA stays quiet.
        "input_series": [series(alerts.CERT_EXPIRY_METRIC, _APISERVER, f"{30 * DAY_S + 300}x20"),
                         series(alerts.CERT_EXPIRY_METRIC, _ETCD, f"{7 * DAY_S + 300}x20"),
                         series(alerts.CERT_EXPIRY_METRIC, _ADMIN, "0x20"),
                         series(alerts.CERT_EXPIRY_METRIC, _CA, f"{3650 * DAY_S}x20")],
        "alert_rule_test": [
            check("3m", "KubeadmCertificateExpiresSoon", firing("KubeadmCertificateExpiresSoon", _ETCD, 7)),
            check("3m", "KubeadmCertificateExpiresVerySoon", firing("KubeadmCertificateExpiresVerySoon", _ADMIN, -1)),
            check("10m", "KubeadmCertificateExpiresSoon", firing("KubeadmCertificateExpiresSoon", _APISERVER, 29)),
            check("10m", "KubeadmCertificateExpiresVerySoon", firing("KubeadmCertificateExpiresVerySoon", _ETCD, 6),
                  firing("KubeadmCertificateExpiresVerySoon", _ADMIN, -1)),
        ],
    },
    {  # A cluster whose certificates were just renewed (a year left) and whose CA has ten.
        "input_series": [series(alerts.CERT_EXPIRY_METRIC, _APISERVER, f"{365 * DAY_S}x20"),
                         series(alerts.CERT_EXPIRY_METRIC, _CA, f"{3650 * DAY_S}x20")],
        "alert_rule_test": [check("10m", "KubeadmCertificateExpiresSoon"),
                            check("10m", "KubeadmCertificateExpiresVerySoon")],
    },
    {  # The hourly check: mgmt-1's keeps running (its timestamp follows the clock), mgmt-2's stopped at 0.
        "input_series": [series(alerts.CERT_CHECK_METRIC, certificate_check("mgmt-1"), "0+60x200"),
                         series(alerts.CERT_CHECK_METRIC, certificate_check("mgmt-2"), "0x200")],
        "alert_rule_test": [
            check("170m", "KubeadmCertificateCheckStale"),
            check("190m", "KubeadmCertificateCheckStale",
                  firing("KubeadmCertificateCheckStale", certificate_check("mgmt-2"))),
        ],
    },
]

# ------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def promtool_bin() -> Path:
    """The promtool `make promtool` puts beside rackform (else one on PATH), of the pinned release.
    Nothing is built here (minutes of Go in the middle of a unit run): without it, a skip says
    what is missing."""
    found = find_tool("promtool")
    make = "`make promtool` builds it from sources/prometheus"
    if found is None:
        pytest.skip(f"needs promtool to check and unit-test the alert rules: {not_found(['promtool'])}; {make}")
    answer = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    if f"version {promtool.PROMETHEUS_VERSION} " not in answer.stdout + answer.stderr:
        said = (answer.stdout + answer.stderr).strip().split("\n")[0] or f"exit {answer.returncode}"
        pytest.skip(f"{found} is not promtool {promtool.PROMETHEUS_VERSION}, which the rules are checked with "
                    f"({said}); {make}")
    return Path(found)


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("alerts") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": alerts.alert_rules("monitoring")["spec"]["groups"]}, sort_keys=False))
    return path


def _promtool(binary: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_promtool_accepts_the_rules(promtool_bin, rule_file):
    result = _promtool(promtool_bin, "check", "rules", "--lint=all", "--lint-fatal", rule_file, cwd=rule_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in result.stdout


def test_promtool_refuses_a_broken_rule(promtool_bin, tmp_path):
    """The check is worth something: a bad expression fails it."""
    broken = alerts.rule_groups()
    broken[0]["rules"][0]["expr"] = "DCGM_FI_DEV_XID_ERRORS >"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": broken}))
    assert _promtool(promtool_bin, "check", "rules", "rules.yaml", cwd=tmp_path).returncode != 0


def test_every_alert_is_tested_firing_and_silent():
    fires = {c["alertname"] for case in CASES for c in case["alert_rule_test"] if c["exp_alerts"]}
    silent = {c["alertname"] for case in CASES for c in case["alert_rule_test"] if not c["exp_alerts"]}
    assert fires == set(RULES) and silent == set(RULES)


def test_alerts_fire_on_bad_series_only(promtool_bin, rule_file):
    tests = {"rule_files": [rule_file.name], "evaluation_interval": "1m",
             "tests": [{"interval": "1m", **case} for case in CASES]}
    (rule_file.parent / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = _promtool(promtool_bin, "test", "rules", "tests.yaml", cwd=rule_file.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_catches_a_wrong_expectation(promtool_bin, rule_file, tmp_path):
    """The unit tests are worth something: a healthy GPU expected to fire fails them."""
    case = {"interval": "1m", "input_series": [series("DCGM_FI_DEV_GPU_TEMP", gpu(0), "60x10")],
            "alert_rule_test": [check("8m", "GPUTemperatureHigh", firing("GPUTemperatureHigh", gpu(0), 60))]}
    tests = {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    assert _promtool(promtool_bin, "test", "rules", "tests.yaml", cwd=tmp_path).returncode != 0


def test_the_prometheus_rule_is_a_valid_object_kube_prometheus_stack_selects():
    namespace = load_matrix(REPO).components["kube_prometheus_stack"].namespace
    rule = alerts.alert_rules(namespace)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}"
              for e in jsonschema.Draft202012Validator(strict_schema(alerts.PROMETHEUS_RULE_SCHEMA)).iter_errors(rule)]
    assert errors == []
    # ObjectMeta, checked on a ConfigMap carrying it (as tests/unit/platform_validation.py does).
    carrier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": rule["metadata"]}
    kubernetes_validate.validate(carrier, load_site("lab", REPO).kubernetes.version, strict=True)
    # The chart's default ruleSelector matches `release: <Helm release name>`, in any namespace.
    assert rule["metadata"]["namespace"] == namespace
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rackform",
                                          "release": release_name("kube_prometheus_stack")}
    names = [group["name"] for group in rule["spec"]["groups"]]
    assert len(names) == len(set(names))


def test_the_certificate_timer_writes_where_node_exporter_reads():
    """The kubeadm role's folder is the one mounted into node-exporter where its textfile flag
    points, and the timer writes the metrics the rules read."""
    role_vars = yaml.safe_load((REPO / "roles" / "kubeadm" / "vars" / "main.yml").read_text())
    assert role_vars["kubeadm_cert_metrics_dir"] == alerts.NODE_EXPORTER_TEXTFILE_DIR
    site = load_site("lab", REPO)
    values = helm_values("kube_prometheus_stack", site, PlatformDesign())
    node_exporter = values["prometheus-node-exporter"]
    node_exporter_args = node_exporter["extraArgs"]
    (mount,) = node_exporter["extraHostVolumeMounts"]
    assert (mount["hostPath"], mount["readOnly"]) == (alerts.NODE_EXPORTER_TEXTFILE_DIR, True)
    assert f"--collector.textfile.directory={mount['mountPath']}" in node_exporter_args
    # The chart's mount-point exclusion is kept (a list in values replaces the chart's, never merges),
    # its regex shorter but excluding the same mount points (kube-prometheus-stack 70.0.0's values).
    chart = re.compile(r"^/(dev|proc|sys|var/lib/docker/.+|var/lib/kubelet/.+)($|/)")
    (ours,) = [re.compile(arg.split("=", 1)[1]) for arg in node_exporter_args
               if arg.startswith("--collector.filesystem.mount-points-exclude=")]
    for path in ("/", "/dev", "/dev/shm", "/proc", "/sys/fs/cgroup", "/var/lib/docker", "/var/lib/docker/overlay2/x",
                 "/var/lib/kubelet", "/var/lib/kubelet/pods/u/volumes/x", "/var/lib/etcd", "/devices", "/home"):
        assert bool(ours.match(path)) == bool(chart.match(path)), path
    script = (REPO / "roles" / "kubeadm" / "templates" / "kubeadm-cert-metrics.py.j2").read_text()
    assert alerts.CERT_EXPIRY_METRIC in script and alerts.CERT_CHECK_METRIC in script


def test_the_schema_refuses_what_the_crd_refuses():
    rule = alerts.alert_rules("monitoring")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    rule["spec"]["groups"][1]["rules"][0]["severity"] = "critical"
    messages = " ".join(e.message for e in
                        jsonschema.Draft202012Validator(strict_schema(alerts.PROMETHEUS_RULE_SCHEMA)).iter_errors(rule))
    assert "does not match" in messages and "Additional properties" in messages


def test_every_alert_names_its_severity_and_says_what_to_do():
    for name, rule in RULES.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
    gpu_rules = [r for r in RULES.values() if "DCGM_FI_DEV" in r["expr"]]
    assert all("$labels.Hostname" in r["annotations"]["summary"] and "$labels.UUID" in r["annotations"]["summary"]
               for r in gpu_rules)
