"""A real Kubernetes cluster in the lab, installed the air-gapped way (issue: Kubernetes for real).

The shipped `lab` site (tests/lab/conftest.py `shipped_lab`), deployed by `rackform deploy lab`
from its site mirror on mgmt-1: kubeadm 1.36 built here from its Go modules, three
control-plane nodes behind the keepalived VIP, two GPU workers, kube-router as the network.
test_deploy_lab runs first and leaves the lab converged; run alone, this module deploys it.

What is checked, from the controller and on the nodes:
- every node Ready through the kubeconfig the kubernetes stage fetched, and `rackform
  verify lab` passes its Kubernetes checks;
- a pod on each worker runs an image pulled from the site mirror (its digest is the
  bundle's), and one reaches the other across nodes over the pod network;
- nothing names an upstream address: not the rendered project, not the nodes' apt
  sources, containerd configuration or kubeadm files; and the lab has no route out
  (routing tables and the machine's forwarding switch, read, never probed with traffic);
- the cluster DNS runs on more than one node;
- the first control-plane node powered off through its BMC: the API answers through the
  VIP within 30 s and a CoreDNS replica stays available; powered on, it rejoins and every
  node is Ready again.

Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_kubernetes_lab.py -s
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from rackform import cli
from rackform.k8s.site_mirror import UPSTREAM_HOSTS
from rackform.lab import lab
from rackform.mirror.bundle import bundle_path, release_pins
from rackform.model.loader import load_site
from rackform.mirror.manifest import read
from clusterlab import (
    CONTROL_PLANE,
    KUBECONFIG,
    MIRROR_REGISTRY,
    PROJECT,
    REPO_ROOT,
    SITE,
    VIP,
    WORKERS,
    Kubectl,
    lab_kubectl,
    deployed_this_session,
    ready_nodes,
    wait_all_ready,
    wait_for,
)

pytestmark = pytest.mark.lab

PROBE_IMAGE = "kube-router"
"""An image of the bundle that carries a shell (busybox): the probe pods run it."""
VIP_TARGET_S = 30


def ssh(state, node: str, command: str) -> subprocess.CompletedProcess[str]:
    address = state.node(node).address
    return subprocess.run(["ssh", "-i", str(state.ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                           f"root@{address}", command], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def cluster(shipped_lab):
    """The shipped lab deployed (already, when test_pulumi_lab and test_deploy_lab ran first in this
    session: nothing is deployed again); its state. test_platform_lab works on the same cluster
    after this module."""
    if deployed_this_session():
        return shipped_lab
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["deploy", SITE, "--root", str(REPO_ROOT)])
    assert code == 0, f"{out.getvalue()[-3000:]}\n{err.getvalue()}"
    return shipped_lab


@pytest.fixture(scope="module")
def kubectl(cluster) -> Kubectl:
    """kubectl of the pinned release (built here, from the cache) with the fetched kubeconfig."""
    return lab_kubectl()


# ---------------------------------------------------------------- the cluster


def test_every_node_is_ready_through_the_fetched_kubeconfig(kubectl):
    assert wait_all_ready(kubectl) == {name: "True" for name in (*CONTROL_PLANE, *WORKERS)}
    server = kubectl("config", "view", "-o", "jsonpath={.clusters[0].cluster.server}").stdout
    assert server == f"https://{VIP}:6443", "the kubeconfig reaches the API through its virtual IP"


def test_nodes_run_the_pinned_release_and_three_control_planes(kubectl):
    items = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    versions = {item["status"]["nodeInfo"]["kubeletVersion"] for item in items}
    control = sorted(item["metadata"]["name"] for item in items
                     if "node-role.kubernetes.io/control-plane" in item["metadata"]["labels"])
    pinned = load_site(SITE, REPO_ROOT).kubernetes.version  # the lab's 1.36.1: test_platform_lab upgrades it
    assert (versions, control) == ({f"v{pinned}"}, list(CONTROL_PLANE))


def test_rackform_verify_passes_its_kubernetes_checks(cluster, capsys):
    code = cli.main(["verify", SITE, "--root", str(REPO_ROOT), "--stage", "kubernetes"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"verify lab: \d+ machines, \d+ passed, 0 failed", out)


def dns_nodes(kubectl) -> list[str]:
    return [item["spec"]["nodeName"] for item in
            kubectl.json("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns")["items"]]


def test_the_cluster_dns_runs_on_more_than_one_node(kubectl):
    # kubeadm starts both replicas on the first node; the stage spreads them once the others joined
    placed = dns_nodes(kubectl)
    assert len(placed) > 1 and len(set(placed)) == len(placed), placed


# ---------------------------------------------------------------- pods from the site mirror


POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: mirror-probe-{node}, namespace: default, labels: {{app: mirror-probe}}}}
spec:
  nodeName: {node}
  restartPolicy: Never
  containers:
    - name: probe
      image: {image}
      command: ["/bin/busybox", "sh", "-c",
                "mkdir -p /www && echo served-by-{node} > /www/index.html && exec /bin/busybox httpd -f -p 8080 -h /www"]
"""


@pytest.fixture(scope="module")
def probe_pods(kubectl):
    manifest = read(bundle_path(release_pins(REPO_ROOT, SITE).kubernetes)).find("image", PROBE_IMAGE)
    image = f"{MIRROR_REGISTRY}/{manifest.name}:{manifest.version}"
    kubectl("delete", "pod", "-l", "app=mirror-probe", "--ignore-not-found", "--wait=true")
    for node in WORKERS:
        kubectl("apply", "-f", "-", stdin=POD.format(node=node, image=image))
    kubectl("wait", "--for=condition=Ready", "pod", "-l", "app=mirror-probe", "--timeout=180s", timeout_s=200)
    pods = {item["spec"]["nodeName"]: item for item in
            json.loads(kubectl("get", "pods", "-l", "app=mirror-probe", "-o", "json").stdout)["items"]}
    yield pods, manifest
    kubectl("delete", "pod", "-l", "app=mirror-probe", "--ignore-not-found", "--wait=false")


@pytest.mark.parametrize("node", WORKERS)
def test_a_pod_on_each_worker_runs_the_image_from_the_site_mirror(probe_pods, node):
    pods, manifest = probe_pods
    status = pods[node]["status"]["containerStatuses"][0]
    assert status["ready"], status
    assert status["imageID"] == f"{MIRROR_REGISTRY}/{PROBE_IMAGE}@{manifest.digest}", \
        "the node pulled the bundle's image, by its digest, from the site mirror"


def test_the_pod_network_runs_the_bundle_s_image_named_by_its_digest(kubectl):
    """kube-router's DaemonSet names its image `<mirror>/kube-router:<tag>@<digest>` with the bundle's
    digest (rackform.k8s.site_mirror.image), so every node pulls those bytes whatever the tag says."""
    manifest = read(bundle_path(release_pins(REPO_ROOT, SITE).kubernetes)).find("image", "kube-router")
    wanted = f"{MIRROR_REGISTRY}/kube-router:{manifest.version}@{manifest.digest}"
    pods = kubectl.json("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-router")["items"]
    assert len(pods) == len(CONTROL_PLANE) + len(WORKERS), [pod["metadata"]["name"] for pod in pods]
    for pod in pods:
        assert {c["image"] for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])} == {wanted}
        assert {c["imageID"] for c in pod["status"]["containerStatuses"]} == \
            {f"{MIRROR_REGISTRY}/kube-router@{manifest.digest}"}, pod["metadata"]["name"]


def test_a_pod_reaches_a_pod_on_the_other_worker(probe_pods, kubectl):
    pods, _ = probe_pods
    target = pods[WORKERS[1]]["status"]["podIP"]
    fetched = kubectl("exec", pods[WORKERS[0]]["metadata"]["name"], "--", "/bin/busybox", "wget", "-q", "-O", "-",
                      f"http://{target}:8080/")
    assert fetched.stdout.strip() == f"served-by-{WORKERS[1]}"


# ---------------------------------------------------------------- air-gapped: no upstream anywhere


def names_upstream(text: str) -> list[str]:
    return sorted({host for host in UPSTREAM_HOSTS if re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text)})


def test_the_rendered_project_names_no_upstream_address(cluster):
    named = {}
    for path in PROJECT.rglob("*"):
        if path.is_file() and "artifacts" not in path.parts and path.suffix not in (".svg", ".pyc"):
            hosts = names_upstream(path.read_text(errors="replace"))
            if hosts:
                named[str(path.relative_to(PROJECT))] = hosts
    assert not named, f"upstream addresses in the rendered project: {named}"


NODE_FILES = ("/etc/apt/sources.list /etc/apt/sources.list.d/* /etc/containerd/config.toml "
              "/etc/kubernetes/rackform/*.yaml /etc/kubernetes/manifests/*.yaml")


@pytest.mark.parametrize("node", (*CONTROL_PLANE, *WORKERS))
def test_a_node_names_no_upstream_address_and_pulls_from_the_mirror(cluster, node):
    files = ssh(cluster, node, f"for f in {NODE_FILES}; do if [ -f \"$f\" ]; then echo \"== $f\"; cat \"$f\"; fi; done")
    assert files.returncode == 0, f"reading the files on {node}: exit {files.returncode} {files.stderr.strip()}"
    assert "== /etc/containerd/config.toml" in files.stdout and f"{MIRROR_REGISTRY}/pause:" in files.stdout
    assert "http://10.10.0.11:8080/apt" in files.stdout, "the apt source is the site mirror"
    assert names_upstream(files.stdout) == []


@pytest.mark.parametrize("node", (*CONTROL_PLANE, *WORKERS))
def test_a_node_has_no_route_out_of_the_lab(cluster, node):
    routes = json.loads(ssh(cluster, node, "ip -j -4 route show table all").stdout)
    gateways = {route["gateway"] for route in routes if "gateway" in route}
    lab_prefixes = ("10.10.0.", "10.20.")  # management and compute fabric of the lab site
    assert all(gateway.startswith(lab_prefixes) for gateway in gateways), gateways
    # The one way out would be the machine: its lab bridge holds the management gateway and
    # it does not forward, so nothing a node sends there leaves the lab.
    assert "10.10.0.1/24" in subprocess.run(["ip", "-4", "-o", "addr", "show", "to", "10.10.0.1"],
                                            capture_output=True, text=True).stdout
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"


# ---------------------------------------------------------------- the first control-plane node fails


def node_ready(kubectl, name: str) -> str:
    return ready_nodes(kubectl).get(name, "missing")


def healthy_etcd_members(kubectl) -> set[str]:
    """Control-plane nodes whose etcd member answers a health check, asked through mgmt-2's."""
    listed = kubectl("-n", "kube-system", "exec", "etcd-mgmt-2", "--", "etcdctl", "--endpoints=https://127.0.0.1:2379",
                     "--cacert=/etc/kubernetes/pki/etcd/ca.crt", "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
                     "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key", "endpoint", "health", "--cluster",
                     "-w", "json", check=False)
    addresses = {f"https://10.10.0.1{n}:2379": f"mgmt-{n}" for n in (1, 2, 3)}
    entries = json.loads(listed.stdout or "[]")
    return {addresses.get(entry["endpoint"], entry["endpoint"]) for entry in entries if entry.get("health")}


@pytest.fixture(scope="module")
def failover(cluster, kubectl):
    """mgmt-1 powered off through its BMC: seconds until the API answered through the VIP again.
    Once the cluster has marked it NotReady, it is powered back on: seconds until it is Ready
    again and its etcd member healthy (a rejoin, not a node that was never missed)."""
    wait_all_ready(kubectl)
    assert cli.main(["bmc", "power", SITE, "off", "--nodes", "mgmt-1", "--root", str(REPO_ROOT)]) == 0
    off = time.monotonic()
    answered = None
    while time.monotonic() - off < 90:
        probe = kubectl("get", "--raw", "/readyz", check=False, timeout_s=5)
        if probe.returncode == 0 and probe.stdout.strip() == "ok":
            answered = time.monotonic() - off
            break
        time.sleep(1)
    noticed = wait_for("the cluster marks mgmt-1 NotReady", lambda: node_ready(kubectl, "mgmt-1") != "True", 180)
    time.sleep(5)  # the node lifecycle controller marks the node's pods not ready right after
    dns_while_off = kubectl.json("-n", "kube-system", "get", "deployment", "coredns")["status"].get("availableReplicas", 0)
    assert cli.main(["bmc", "power", SITE, "on", "--nodes", "mgmt-1", "--root", str(REPO_ROOT)]) == 0
    on = time.monotonic()
    node = lab.wait_until_ready(cluster, cluster.node("mgmt-1"), 120)
    assert node.ssh, node.line()
    wait_all_ready(kubectl)
    wait_for("mgmt-1's etcd member healthy again", lambda: healthy_etcd_members(kubectl) == set(CONTROL_PLANE), 180)
    rejoined = time.monotonic() - on
    print(f"\nmgmt-1 off: the API answered through the VIP after {answered:.1f} s; marked NotReady after "
          f"{noticed + (answered or 0):.0f} s; on again: Ready with a healthy etcd member after {rejoined:.0f} s")
    return answered, rejoined, dns_while_off


def test_the_api_answers_through_the_vip_within_30_s_of_losing_the_first_control_plane_node(failover):
    answered, _, _ = failover
    assert answered is not None and answered <= VIP_TARGET_S, f"the API answered after {answered} s"


def test_the_cluster_dns_keeps_serving_while_the_first_control_plane_node_is_off(failover):
    _, _, dns_while_off = failover
    assert dns_while_off >= 1, "no CoreDNS replica available while mgmt-1 was off"


def test_the_first_control_plane_node_rejoins_and_every_node_is_ready(failover, kubectl):
    assert ready_nodes(kubectl) == {name: "True" for name in (*CONTROL_PLANE, *WORKERS)}
    assert healthy_etcd_members(kubectl) == set(CONTROL_PLANE)
