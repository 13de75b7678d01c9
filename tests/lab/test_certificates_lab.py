"""`rackform certs renew lab` on the lab's real cluster: kubeadm's certificates renewed one
control-plane node at a time while the API keeps answering through the VIP.

- before: each control-plane node's certificates as `kubeadm certs check-expiration -o json`
  reads them (over SSH), and the API server's serving certificate as a client meets it on each
  node's own address;
- the renewal runs (`cli.main(["certs", "renew", "lab", ...])`) while a thread asks
  https://VIP:6443/readyz every 0.5 s, trusting only the cluster's CA (which the renewal keeps):
  a served certificate that were not signed by it, or did not name the VIP, would fail the probe;
- after: on every control-plane node apiserver.crt's notAfter moved later, and so did the one
  the API server serves (it was restarted onto the new file) and every other certificate kubeadm
  manages; the probe failed at most FAILED_PROBES_ALLOWED times; every node is Ready; the fetched
  kubeconfig (build/lab/artifacts/kubeconfig, still 0600) carries a new client certificate and
  works; the command printed each node's new expiry. The renewal's duration is printed.

Works on the shipped lab as test_kubernetes_lab leaves it (tests/lab/conftest.py runs the shipped
lab's modules back to back). Run alone, on one worker:
    pytest -p no:xdist -m lab tests/lab/test_certificates_lab.py -s
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import io
import json
import ssl
import stat
import subprocess
import threading
import time
import urllib.request

import pytest
import yaml
from cryptography import x509

from rackform import cli
from clusterlab import CONTROL_PLANE, KUBECONFIG, REPO_ROOT, SITE, VIP, lab_kubectl, wait_all_ready

pytestmark = pytest.mark.lab

PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 2
FAILED_PROBES_ALLOWED = 3
"""The upgrade test's tolerance (test_platform_lab): one control-plane restart's worth. The renewal
hands the VIP to another node before each node's API server restarts, so it should need none."""
API_PORT = 6443


def ssh(state, node: str, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    address = state.node(node).address
    return subprocess.run(["ssh", "-i", str(state.ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                           f"root@{address}", command], capture_output=True, text=True, timeout=timeout_s)


def kubeadm_expiry(state, node: str) -> dict[str, str]:
    """Certificate name -> its expiry (RFC 3339, UTC), as kubeadm reads the node's files; missing ones left out."""
    said = ssh(state, node, "kubeadm certs check-expiration -o json")
    assert said.returncode == 0, f"{node}: kubeadm certs check-expiration: {said.stderr.strip()}"
    info = json.loads(said.stdout[said.stdout.index("{"):])
    return {cert["name"]: cert["expirationDate"] for cert in info["certificates"] if not cert.get("missing")}


def served_not_after(state, node: str) -> datetime.datetime:
    """notAfter of the certificate the node's API server presents on its own address."""
    pem = ssl.get_server_certificate((state.node(node).address, API_PORT), timeout=10)
    return x509.load_pem_x509_certificate(pem.encode()).not_valid_after_utc


def kubeconfig_parts() -> tuple[str, str]:
    """(the cluster's CA, the admin user's client certificate), base64 as the fetched kubeconfig has them."""
    config = yaml.safe_load(KUBECONFIG.read_text())
    return (config["clusters"][0]["cluster"]["certificate-authority-data"],
            config["users"][0]["user"]["client-certificate-data"])


@pytest.fixture(scope="module")
def lab(shipped_lab):
    return shipped_lab


@pytest.fixture(scope="module")
def before(lab):
    wait_all_ready(lab_kubectl())
    return {"files": {node: kubeadm_expiry(lab, node) for node in CONTROL_PLANE},
            "served": {node: served_not_after(lab, node) for node in CONTROL_PLANE},
            "kubeconfig": kubeconfig_parts()}


@pytest.fixture(scope="module")
def renewed(lab, before):
    """`rackform certs renew lab`, /readyz probed through the VIP meanwhile.
    (exit code, output, probes: list of (ok, seconds since the start, what failed), seconds taken)."""
    ca_pem = base64.b64decode(before["kubeconfig"][0]).decode()
    context = ssl.create_default_context(cadata=ca_pem)  # the VIP is among the API server's SANs
    probes: list[tuple[bool, float, str]] = []
    stop = threading.Event()
    started = time.monotonic()

    def probe():
        while not stop.is_set():
            asked = time.monotonic()
            try:
                with urllib.request.urlopen(f"https://{VIP}:{API_PORT}/readyz", timeout=PROBE_TIMEOUT_S,
                                            context=context) as answer:
                    body = answer.read().decode().strip()
                probes.append((body == "ok", asked - started, "" if body == "ok" else body[:200]))
            except Exception as error:  # any failure to get "ok" is a failed probe, with its reason kept
                probes.append((False, asked - started, f"{type(error).__name__}: {error}"[:200]))
            stop.wait(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - asked)))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["certs", "renew", SITE, "--root", str(REPO_ROOT)])
    finally:
        took_s = time.monotonic() - started
        stop.set()
        prober.join()
    print(f"\ncerts renew: {took_s:.0f} s for {len(CONTROL_PLANE)} control-plane nodes")
    return code, out.getvalue() + err.getvalue(), probes, took_s


def test_the_renewal_succeeds_and_reports_each_node_s_new_expiry(renewed):
    code, said, _probes, _took_s = renewed
    assert code == 0, said[-4000:]
    for node in CONTROL_PLANE:
        assert any(line.startswith(f"{node}: ") and " apiserver " in f" {line} " for line in said.splitlines()), \
            f"no new expiry reported for {node}:\n{said[-2000:]}"


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_every_certificate_kubeadm_manages_now_expires_later(lab, before, renewed, node):
    assert renewed[0] == 0, renewed[1][-3000:]
    old, new = before["files"][node], kubeadm_expiry(lab, node)
    print(f"\n{node}: apiserver.crt notAfter {old['apiserver']} -> {new['apiserver']}")
    assert new["apiserver"] > old["apiserver"], f"{node}: apiserver.crt notAfter did not move later"
    not_later = sorted(name for name in old if name in new and new[name] <= old[name])
    assert not_later == [], f"{node}: not renewed: {not_later}"


@pytest.mark.parametrize("node", CONTROL_PLANE)
def test_each_api_server_serves_its_renewed_certificate(lab, before, renewed, node):
    assert renewed[0] == 0, renewed[1][-3000:]
    now_served = served_not_after(lab, node)
    assert now_served > before["served"][node], f"{node}'s API server still serves the old certificate"
    on_disk = datetime.datetime.fromisoformat(kubeadm_expiry(lab, node)["apiserver"].replace("Z", "+00:00"))
    assert now_served == on_disk, f"{node}: serves one expiring {now_served}, apiserver.crt expires {on_disk}"


def test_the_api_answered_through_the_vip_throughout(renewed):
    _code, _said, probes, took_s = renewed
    failed = [(round(at, 1), why) for ok, at, why in probes if not ok]
    print(f"\ncerts renew: {len(probes)} probes of /readyz through the VIP in {took_s:.0f} s, {len(failed)} failed"
          + "".join(f"\n  at {at} s: {why}" for at, why in failed))
    assert len(probes) > 20, "the probe ran through the renewal"
    assert len(failed) <= FAILED_PROBES_ALLOWED, f"{len(failed)} of {len(probes)} probes failed: {failed}"


def test_every_node_is_ready_after_the_renewal(renewed):
    assert renewed[0] == 0, renewed[1][-3000:]
    wait_all_ready(lab_kubectl())


def test_the_fetched_kubeconfig_is_renewed_private_and_works(before, renewed):
    assert renewed[0] == 0, renewed[1][-3000:]
    assert stat.S_IMODE(KUBECONFIG.stat().st_mode) == 0o600
    ca, client = kubeconfig_parts()
    assert ca == before["kubeconfig"][0], "the renewal keeps the cluster's CA"
    assert client != before["kubeconfig"][1], "the fetched kubeconfig still holds the old client certificate"
    not_after = x509.load_pem_x509_certificate(base64.b64decode(client)).not_valid_after_utc
    assert not_after > datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=300)
    nodes = lab_kubectl().json("get", "nodes")["items"]
    assert {node["metadata"]["name"] for node in nodes} >= set(CONTROL_PLANE)
