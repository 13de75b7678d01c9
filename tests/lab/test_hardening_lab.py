"""The control plane's hardening on the lab's real cluster (issue 27), proved by attempts:

- a Secret created through the API is stored encrypted: read straight from etcd (etcdctl in
  mgmt-1's etcd pod) its value starts `k8s:enc:secretbox:v1:` and holds nothing of the
  plaintext, and so does every other Secret of the cluster; the API still returns the plaintext;
  the encryption configuration is 0600 in a 0700 folder on each control-plane node;
- a worker joins again (gpu-2, `kubeadm reset`, then `rackform deploy lab --stage kubernetes -v`,
  the same run that changes the API servers over to a new encryption key, below):
  afterwards no node has a kubeadm-join.yaml, and neither the deploy's output (every task's
  result, -v) nor any file under build/lab/ that the fixed role's runs wrote (ansible-runner's
  artifacts, the fact cache) holds a bootstrap token (those `kubeadm token list` shows, or
  anything shaped like one) or a certificate key (that the fixed role changes nothing on a second
  run is test_deploy_lab's converge, which runs before this module);
- build/lab/artifacts/kubeconfig is mode 0600;
- each control-plane node's audit log has entries for that Secret (read through each node's
  own API server), at Metadata level: no request or response body, no plaintext;
- a key rotation (`rackform secrets lab --rotate-encryption-key`, the stage (gpu-2's rejoin), then
  `--forget-old-encryption-keys`, the stage): every Secret ends up encrypted with the new key,
  the API reads them all throughout, the old key is gone from every control-plane node, and no
  key's secret shows in the deploys' output or under build/lab.

Works on the shipped lab as test_kubernetes_lab leaves it (tests/lab/conftest.py runs the
modules back to back); test_platform_lab comes after it (it advertises the GPU nodes' GPUs
again itself, so gpu-2's rejoin takes nothing from it).
Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_hardening_lab.py -s
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import secrets
import stat
import subprocess
from pathlib import Path

import pytest

from rackform import cli
from rackform.secrets import SiteVault
from clusterlab import (
    CONTROL_PLANE,
    KUBECONFIG,
    PROJECT,
    REPO_ROOT,
    SITE,
    WORKERS,
    Kubectl,
    lab_kubectl,
    ready_nodes,
    wait_all_ready,
    wait_for,
)

pytestmark = pytest.mark.lab

NAMESPACE = "default"
SECRET = "rackform-hardening-probe"
PLAINTEXT = f"hardening-probe-{secrets.token_hex(12)}"
"""The probe Secret's value: random per run, so finding it anywhere is this run's leak."""
ENCRYPTED_PREFIX = b"k8s:enc:secretbox:v1:"
REJOINING = "gpu-2"
AUDIT_LOG_DIR = "/var/log/kubernetes/audit"
ETCDCTL = ["etcdctl", "--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
           "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
           "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key"]
BOOTSTRAP_TOKEN = re.compile(r"(?<![A-Za-z0-9._-])[a-z0-9]{6}\.[a-z0-9]{16}(?![A-Za-z0-9._-])")
CERTIFICATE_KEY = re.compile(r"Using certificate key|certificate[-_ ]?key\W{1,4}[0-9a-f]{64}", re.IGNORECASE)
FIXED_ROLE_MARK = "Refuse what the cluster must not be built on"
"""The kubernetes stage's first play since the hardening: a run folder whose output names it was
written by the fixed role (older runs, from before it, are no part of this test)."""


def ssh(state, node: str, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    address = state.node(node).address
    return subprocess.run(["ssh", "-i", str(state.ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                           f"root@{address}", command], capture_output=True, text=True, timeout=timeout_s)


def deploy_kubernetes() -> tuple[int, str]:
    """`rackform deploy lab --stage kubernetes -v`: every task's result in the output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["deploy", SITE, "--root", str(REPO_ROOT), "--stage", "kubernetes", "-v"])
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def lab(shipped_lab):
    return shipped_lab


@pytest.fixture(scope="module")
def kubectl(lab) -> Kubectl:
    return lab_kubectl()


# ---------------------------------------------------------------- Secrets encrypted at rest


@pytest.fixture(scope="module")
def probe_secret(kubectl):
    manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NAMESPACE},
                "type": "Opaque", "stringData": {"probe": PLAINTEXT}}
    kubectl("-n", NAMESPACE, "delete", "secret", SECRET, "--ignore-not-found")
    kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    yield SECRET
    kubectl("-n", NAMESPACE, "delete", "secret", SECRET, "--ignore-not-found")


def etcd_values(kubectl, key: str, prefix: bool = False) -> dict[str, bytes]:
    """What etcd stores under `key` (all keys below it with `prefix`), read in mgmt-1's etcd pod."""
    read = kubectl("-n", "kube-system", "exec", "etcd-mgmt-1", "--", *ETCDCTL, "get", key,
                   *(["--prefix"] if prefix else []), "-w", "json", timeout_s=120)
    kvs = json.loads(read.stdout).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]) for kv in kvs}


def test_the_api_returns_the_secret_in_plaintext(kubectl, probe_secret):
    data = kubectl.json("-n", NAMESPACE, "get", "secret", probe_secret)["data"]
    assert base64.b64decode(data["probe"]).decode() == PLAINTEXT


def test_a_secret_read_straight_from_etcd_is_encrypted(kubectl, probe_secret):
    stored = etcd_values(kubectl, f"/registry/secrets/{NAMESPACE}/{probe_secret}")
    (value,) = stored.values()
    assert value.startswith(ENCRYPTED_PREFIX), value[:40]
    assert PLAINTEXT.encode() not in value and base64.b64encode(PLAINTEXT.encode()) not in value


def test_every_secret_of_the_cluster_is_encrypted_in_etcd(kubectl, probe_secret):
    stored = etcd_values(kubectl, "/registry/secrets/", prefix=True)
    assert len(stored) > 1, "the cluster has Secrets of its own (service account tokens, bootstrap tokens)"
    assert sorted(key for key, value in stored.items() if not value.startswith(ENCRYPTED_PREFIX)) == []


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_the_encryption_configuration_is_readable_by_root_alone(lab, node):
    modes = ssh(lab, node, "stat -c %a /etc/kubernetes/enc /etc/kubernetes/enc/encryption-config.yaml")
    assert (modes.returncode, modes.stdout.split()) == (0, ["700", "600"]), modes.stderr


# ---------------------------------------------------------------- a worker joins again


def live_tokens(lab) -> set[str]:
    """The bootstrap tokens the cluster holds now (`kubeadm token list` on mgmt-1)."""
    listed = ssh(lab, "mgmt-1", "kubeadm token list --kubeconfig /etc/kubernetes/admin.conf")
    assert listed.returncode == 0, listed.stderr
    return {line.split()[0] for line in listed.stdout.splitlines()[1:] if line.strip()}


@pytest.fixture(scope="module")
def rejoined_and_rotated(lab, kubectl, probe_secret):
    """gpu-2 reset, a new encryption key made (`rackform secrets lab --rotate-encryption-key`), then
    one run of the kubernetes stage does both: the API servers change over to the new key and gpu-2
    joins again (one run rather than two: the stage's other ~100 s are paid once).
    (the deploy's output, the tokens the cluster held right after it, the new key, the old key)."""
    wait_all_ready(kubectl)
    reset = ssh(lab, REJOINING, "kubeadm reset --force 2>&1", timeout_s=300)
    assert reset.returncode == 0, reset.stdout[-2000:]
    wait_for(f"{REJOINING} NotReady (kubeadm join refuses a Ready node of its name)",
             lambda: ready_nodes(kubectl).get(REJOINING) != "True", 180)
    old = SiteVault(SITE).encryption_keys()[0].name
    vault_key_secrets()
    said = secrets_command("--rotate-encryption-key")
    new = SiteVault(SITE).encryption_keys()[0].name
    vault_key_secrets()
    assert new != old and f"new encryption key {new}" in said
    code, output = deploy_kubernetes()
    assert code == 0, output[-4000:]
    tokens = live_tokens(lab)
    wait_all_ready(kubectl)
    return output, tokens, new, old


@pytest.fixture(scope="module")
def rejoined(rejoined_and_rotated):
    """(the deploy's output, the tokens the cluster held right after it)."""
    output, tokens, _, _ = rejoined_and_rotated
    return output, tokens


def test_the_worker_joined_again_with_a_new_token(rejoined, kubectl):
    _, tokens = rejoined
    assert tokens, "the stage made a join token for gpu-2 (2 h): kubeadm token list shows it"
    assert ready_nodes(kubectl) == {name: "True" for name in (*CONTROL_PLANE, *WORKERS)}


@pytest.mark.parametrize("node", (*CONTROL_PLANE, *WORKERS))
def test_no_node_keeps_a_join_file(rejoined, lab, node):
    found = ssh(lab, node, "find /etc/kubernetes -name 'kubeadm-join*'")
    assert (found.returncode, found.stdout.split()) == (0, []), found.stderr


def fixed_role_runs() -> list[Path]:
    """ansible-runner's run folders under build/lab/artifacts/ from the first kubernetes run of the
    fixed role on (folder names start with their time, so they sort in order)."""
    runs = sorted(path for path in (PROJECT / "artifacts").iterdir() if path.is_dir())
    fixed = [run for run in runs if "-kubernetes-" in run.name
             and any(FIXED_ROLE_MARK in stdout.read_text(errors="replace") for stdout in run.rglob("stdout"))]
    assert fixed, "no kubernetes run of the fixed role under build/lab/artifacts"
    return runs[runs.index(fixed[0]):]


def scanned_files() -> list[Path]:
    """Every file under build/lab/ but the rendered roles and the runs from before the fix."""
    kept = set(fixed_role_runs())
    files = []
    for path in PROJECT.rglob("*"):
        if not path.is_file() or "collections" in path.relative_to(PROJECT).parts:
            continue
        run = next((parent for parent in path.parents if parent.parent == PROJECT / "artifacts"), None)
        if run is None or run in kept:
            files.append(path)
    return files


SEEN_KEY_SECRETS: set[str] = set()
"""Every encryption key the vault held during this module (a forgotten one included)."""


def vault_key_secrets() -> set[str]:
    """The secrets of the site vault's encryption keys, now and earlier in this module: never to be
    seen outside the vault and the control-plane nodes' encryption configuration."""
    SEEN_KEY_SECRETS.update(key.secret for key in SiteVault(SITE).encryption_keys())
    return SEEN_KEY_SECRETS


def leaks(text: str, tokens: set[str]) -> list[str]:
    found = ["a live token" for token in tokens if token in text]
    found += ["an encryption key" for secret in vault_key_secrets() if secret in text][:1]
    found += ["a bootstrap token's shape" for _ in BOOTSTRAP_TOKEN.finditer(text)][:1]
    found += ["a certificate key" for _ in CERTIFICATE_KEY.finditer(text)][:1]
    return found


def test_the_deploy_s_output_holds_no_token_or_certificate_key(rejoined):
    output, tokens = rejoined
    assert leaks(output, tokens) == []  # never the token itself in the message: only what kind leaked


def joins_recorded(runs: list[Path]) -> list[str]:
    """`host: task` of every successful join task in these runs' job events."""
    joins = ("Join the cluster as a worker", "Join the other control-plane nodes one at a time")
    found = []
    for events in (run.rglob("job_events/*.json") for run in runs if "-kubernetes-" in run.name):
        for path in events:
            event = json.loads(path.read_text())
            data = event.get("event_data", {})
            # The join is no_log, so its result is censored (changed included); it runs only on a node
            # that has not joined (skipped otherwise), so an ok is a join.
            if event.get("event") == "runner_on_ok" and data.get("task") in joins:
                found.append(f"{data.get('host')}: {data['task']}")
    return found


def test_no_file_under_the_project_holds_a_token_or_certificate_key(rejoined):
    _, tokens = rejoined
    assert f"{REJOINING}: Join the cluster as a worker" in joins_recorded(fixed_role_runs()), \
        "the files searched include a run in which a node joined"
    found = {str(path.relative_to(PROJECT)): kinds for path in scanned_files()
             if (kinds := leaks(path.read_text(errors="replace"), tokens))}
    assert found == {}


# ---------------------------------------------------------------- the admin kubeconfig


def test_the_fetched_kubeconfig_is_readable_by_its_owner_alone(lab):
    assert stat.S_IMODE(KUBECONFIG.stat().st_mode) == 0o600


# ---------------------------------------------------------------- the audit log


def audit_entries(lab, node: str, name: str) -> list[str]:
    """The audit log lines of `node` (rotated files too) that name `name`."""
    read = ssh(lab, node, f"cat {AUDIT_LOG_DIR}/*.log | grep -F '\"name\":\"{name}\"' || true")
    assert read.returncode == 0, read.stderr
    return [line for line in read.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def audited(lab, kubectl, probe_secret) -> dict[str, list[dict]]:
    """The probe Secret read through each control-plane node's own API server; then each node's
    audit log entries for it."""
    for node in CONTROL_PLANE:
        kubectl("--server", f"https://{lab.node(node).address}:6443", "-n", NAMESPACE, "get", "secret", probe_secret)
    entries: dict[str, list[str]] = {}

    def every_node_logged() -> bool:
        entries.update({node: audit_entries(lab, node, probe_secret) for node in CONTROL_PLANE})
        return all(entries.values())

    wait_for("an audit entry for the probe Secret on every control-plane node", every_node_logged, 30)
    return {node: lines for node, lines in entries.items()}


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_each_api_server_audits_the_secret_without_its_data(audited, node):
    lines = audited[node]
    assert all(PLAINTEXT not in line and base64.b64encode(PLAINTEXT.encode()).decode() not in line for line in lines)
    events = [json.loads(line) for line in lines]
    ours = [event for event in events if event.get("objectRef", {}).get("resource") == "secrets"
            and event["objectRef"].get("namespace") == NAMESPACE]
    assert ours and {event["level"] for event in ours} == {"Metadata"}
    assert [event for event in ours if "requestObject" in event or "responseObject" in event] == []
    assert "get" in {event["verb"] for event in ours}, "this node's API server served a read of it"


def test_the_secret_s_creation_is_audited(audited):
    verbs = {json.loads(line)["verb"] for lines in audited.values() for line in lines}
    assert {"get"} < verbs and verbs & {"create", "patch", "update"}, verbs


# ---------------------------------------------------------------- a key rotation


def secrets_command(*flags: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["secrets", SITE, "--root", str(REPO_ROOT), *flags])
    assert code == 0, err.getvalue()
    return out.getvalue()


def key_names_on(lab, node: str) -> list[str]:
    """The key names of a control-plane node's encryption configuration, in order (names only)."""
    read = ssh(lab, node, "grep -o 'name: .*' /etc/kubernetes/enc/encryption-config.yaml")
    assert read.returncode == 0, read.stderr
    return [line.split(":", 1)[1].strip().strip('"') for line in read.stdout.splitlines()]


@pytest.fixture(scope="module")
def rotated(rejoined_and_rotated, probe_secret):
    """A new key first, the stage run: (new key, old key, the deploy's output)."""
    output, _, new, old = rejoined_and_rotated
    return new, old, output


def test_after_a_rotation_every_secret_is_encrypted_with_the_new_key(rotated, kubectl):
    new, _, _ = rotated
    stored = etcd_values(kubectl, "/registry/secrets/", prefix=True)
    prefix = ENCRYPTED_PREFIX + new.encode() + b":"
    assert sorted(key for key, value in stored.items() if not value.startswith(prefix)) == []


def test_after_a_rotation_the_api_reads_the_secret(rotated, kubectl, probe_secret):
    data = kubectl.json("-n", NAMESPACE, "get", "secret", probe_secret)["data"]
    assert base64.b64decode(data["probe"]).decode() == PLAINTEXT


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_after_a_rotation_each_api_server_writes_with_the_new_key_and_reads_the_old(rotated, lab, node):
    new, old, _ = rotated
    assert key_names_on(lab, node) == [new, old]


def test_the_rewrite_is_not_owed_any_more(rotated, lab):
    assert ssh(lab, "mgmt-1", "test -e /etc/kubernetes/enc/rewrite-secrets").returncode == 1


def test_the_rotation_s_deploy_shows_no_key(rotated):
    _, _, output = rotated
    assert leaks(output, set()) == []


@pytest.fixture(scope="module")
def forgotten(rotated):
    said = secrets_command("--forget-old-encryption-keys")
    new, old, _ = rotated
    assert f"forgot the encryption key(s) {old}" in said
    code, output = deploy_kubernetes()
    assert code == 0, output[-4000:]
    return new, output


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_a_forgotten_key_leaves_every_api_server(forgotten, lab, node):
    new, _ = forgotten
    assert key_names_on(lab, node) == [new]


def test_with_the_old_key_gone_every_secret_still_reads(forgotten, kubectl, probe_secret):
    data = kubectl.json("-n", NAMESPACE, "get", "secret", probe_secret)["data"]
    assert base64.b64decode(data["probe"]).decode() == PLAINTEXT
    names = kubectl("get", "secrets", "--all-namespaces", "-o", "name").stdout.split()
    assert len(names) > 1


def test_nothing_under_the_project_shows_a_key_after_the_rotation(forgotten):
    found = {str(path.relative_to(PROJECT)): kinds for path in scanned_files()
             if (kinds := leaks(path.read_text(errors="replace"), set()))}
    assert found == {}
