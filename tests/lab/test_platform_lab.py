"""The platform on the lab's real cluster: tenants that hold, GPU quotas and fair-share queues.

The shipped `lab` site as test_kubernetes_lab leaves it (tests/lab/conftest.py runs the
modules back to back), its platform stage applied by `rackform deploy lab --stage platform`:
the tenants `research` (8 GPUs guaranteed, may borrow) and `inference` (4, never borrows)
from topologies/platform/lab.yaml, and Kueue, built here from its module and installed from
the site mirror's chart and registry.

Lab only, named as such: the GPU nodes advertise the 8 GPUs their block has
(rackform.lab.gpus patches the Nodes' capacity); no GPU exists, so pods get a node, not a device.

What is checked, against the API server:
- a tenant admin (impersonated) may run workloads but neither `auth can-i` nor a real
  attempt lets it delete or edit its ResourceQuotas or LimitRange, or bind itself a role;
- a privileged pod in a tenant namespace is refused at admission (Pod Security `restricted`);
- a tenant admin's own kubeconfig (`rackform kubeconfig`, a client certificate through the CSR
  API), used without impersonation: the API server sees alice; she may create a pod (server-side
  dry run) in research, is refused inference's secrets and the nodes; a user who is not the
  tenant's admin gets none;
- tenants that hold (issue 27; rackform.k8s.tenant_admission, tenant_compute), each by the
  attempt as the tenant admin: a bare GPU pod is refused by the GPU policy, a Job in the
  tenant's queue runs its GPU pod on a GPU node; a Job asking for GPUs without the queue label is
  refused; resuming a queued (held) job is refused; a NodePort, a LoadBalancer and a ClusterIP
  service with externalIPs are refused, a plain ClusterIP service is not; Endpoints and
  EndpointSlices can be neither created nor patched; a pod over the CPU or the memory of
  `compute-quota` is refused; a pod without resources gets the LimitRange's requests; a pod
  naming system-node-critical is refused; a pod the job controller makes for more GPUs than
  `gpu-quota` is refused by that quota (the API server's lock behind the queue);
- tenant research's pod reaches its own namespace's pods and the cluster DNS, not inference's;
- fair share: research borrows inference's idle GPUs; when inference submits, Kueue preempts
  research's borrowing job and inference's runs within its guarantee;
- a second platform apply changes nothing;
- each data set's claim (topologies/sites/lab.yaml data_sets:) is Bound to its volume in its
  tenant's namespace; the tenant admin reads it but may neither delete it (the admission policy
  refuses, naming the data set) nor take its data-set label off, nor delete or patch the volume;
  it creates and deletes a claim of its own; a second apply leaves the data sets as they were.

Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_platform_lab.py -s
"""

from __future__ import annotations

import contextlib
import io
import json
import stat

import pytest

from rackform import cli
from rackform.k8s.data_sets import CLAIM_PROTECTION, DATA_SET_LABEL, volume_name
from rackform.k8s.tenant_admission import GPU_POLICY, JOB_CONTROLLER, PRIORITY_POLICY, SERVICE_POLICY
from rackform.k8s.tenant_compute import COMPUTE_QUOTA, LIMIT_RANGE
from rackform.lab import gpus
from rackform.model.loader import load_site
from clusterlab import (MIRROR_REGISTRY, PROJECT, REPO_ROOT, SITE, WORKERS, Kubectl, lab_kubectl, pinned_kubectl,
                        wait_for)

pytestmark = pytest.mark.lab

ADMIN = {"research": "alice", "inference": "carol"}
"""A tenant admin per tenant, as topologies/platform/lab.yaml names them."""
PAUSE = f"{MIRROR_REGISTRY}/pause:3.10.2"
SHELL_IMAGE = "kube-router"
"""A bundle image with busybox (httpd, wget, nslookup) for the network probes."""
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
ADMISSION_TIMEOUT_S = 120


def deploy_platform() -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["deploy", SITE, "--root", str(REPO_ROOT), "--stage", "platform"])
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def platform(shipped_lab) -> Kubectl:
    """The platform stage applied to the lab cluster and its GPU nodes advertising their GPUs
    (the lab-only step)."""
    code, said = deploy_platform()
    assert code == 0, said[-3000:]
    kubectl = lab_kubectl()
    gpus.advertise(kubectl.argv, gpus.design_gpus(load_site(SITE, REPO_ROOT)))
    return kubectl


def pod(name: str, image: str = PAUSE, gpus_wanted: int = 0, command: list[str] | None = None,
        labels: dict | None = None) -> dict:
    container = {"name": "main", "image": image, "securityContext": CONTAINER_RESTRICTED}
    if command:
        container["command"] = command
    if gpus_wanted:
        container["resources"] = {"limits": {gpus.GPU_RESOURCE: str(gpus_wanted)}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": {"securityContext": RESTRICTED, "containers": [container], "terminationGracePeriodSeconds": 0}}


def create(kubectl: Kubectl, namespace: str, manifest: dict, *, check: bool = True, user: str | None = None):
    return kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(manifest), check=check,
                   user=user or ADMIN[namespace])


# ---------------------------------------------------------------- tenants that hold


@pytest.mark.parametrize("verb", ["delete", "update", "patch"])
def test_a_tenant_admin_may_not_change_its_gpu_quota(platform, verb):
    said = platform("auth", "can-i", verb, "resourcequota/gpu-quota", "-n", "inference", check=False, user="carol")
    assert said.stdout.strip() == "no"


def test_a_tenant_admin_may_run_workloads(platform):
    for what in ("pods", "jobs.batch", "deployments.apps", "poddisruptionbudgets.policy"):
        said = platform("auth", "can-i", "create", what, "-n", "inference", check=False, user="carol")
        assert (what, said.stdout.strip()) == (what, "yes")


def test_deleting_the_quota_as_the_tenant_admin_is_refused(platform):
    refused = platform("-n", "inference", "delete", "resourcequota", "gpu-quota", check=False, user="carol")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    quota = platform.json("-n", "inference", "get", "resourcequota", "gpu-quota")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}


def test_raising_the_quota_as_the_tenant_admin_is_refused(platform):
    patch = json.dumps({"spec": {"hard": {"requests.nvidia.com/gpu": "16"}}})
    refused = platform("-n", "inference", "patch", "resourcequota", "gpu-quota", "--type=merge", "-p", patch,
                       check=False, user="carol")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()


def test_a_tenant_admin_cannot_grant_itself_a_role(platform):
    for argv in (["create", "rolebinding", "more", "--clusterrole=admin", "--user=carol"],
                 ["create", "role", "more", "--verb=*", "--resource=resourcequotas"]):
        refused = platform("-n", "inference", *argv, check=False, user="carol")
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stdout
    assert platform("-n", "inference", "get", "rolebinding", "more", check=False).returncode != 0


def test_a_tenant_admin_cannot_lift_its_network_policy(platform):
    refused = platform("-n", "inference", "delete", "networkpolicy", "default-deny", check=False, user="carol")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()


def test_a_privileged_pod_is_refused_at_admission(platform):
    manifest = pod("privileged")
    manifest["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refused = create(platform, "inference", manifest, check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr
    assert platform("-n", "inference", "get", "pod", "privileged", check=False).returncode != 0


# ---------------------------------------------------------------- a tenant admin's own kubeconfig


def issue_kubeconfig(tenant: str, user: str) -> tuple[int, str]:
    """`rackform kubeconfig lab --tenant TENANT --user USER` (rackform.run.tenant_credentials)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["kubeconfig", SITE, "--tenant", tenant, "--user", user, "--root", str(REPO_ROOT)])
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def as_alice(platform) -> Kubectl:
    """The pinned kubectl with alice's own kubeconfig (a client certificate the cluster signed
    through the CSR API), no impersonation: the cluster sees alice herself."""
    code, said = issue_kubeconfig("research", "alice")
    assert code == 0, said[-3000:]
    path = PROJECT / "artifacts" / "kubeconfig-research-alice"
    assert f"wrote {path}" in said and stat.S_IMODE(path.stat().st_mode) == 0o600
    yield Kubectl([str(pinned_kubectl()), "--kubeconfig", str(path)])
    path.unlink(missing_ok=True)


def test_alice_s_own_kubeconfig_authenticates_alice(as_alice, platform):
    user_info = json.loads(as_alice("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert user_info["username"] == "alice"
    assert set(user_info.get("groups", [])) == {"system:authenticated"}  # no group of her own, no masters
    # the CSR object is gone: only the certificate was kept
    left = platform.json("get", "certificatesigningrequests")["items"]
    assert [item["metadata"]["name"] for item in left if item["metadata"]["name"].startswith("rackform-research-alice-")] == []


def test_alice_may_create_a_pod_in_her_namespace(as_alice):
    # no -n: the kubeconfig's context is research's namespace
    made = as_alice("create", "-f", "-", "--dry-run=server", "-o", "json", stdin=json.dumps(pod("alice-probe")))
    assert json.loads(made.stdout)["metadata"]["namespace"] == "research"


def test_alice_may_not_read_another_tenant_s_secrets_nor_list_nodes(as_alice):
    for argv in (["-n", "inference", "get", "secrets"], ["get", "nodes"]):
        refused = as_alice(*argv, check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), (argv, refused.stdout)
        assert 'User "alice"' in refused.stderr, refused.stderr


def test_no_kubeconfig_for_a_user_who_is_not_the_tenant_s_admin(platform):
    for tenant, user in (("research", "mallory"), ("research", "carol")):
        code, said = issue_kubeconfig(tenant, user)
        assert code == 2 and f"{user!r} is not an admin of tenant {tenant}" in said, said
        assert not (PROJECT / "artifacts" / f"kubeconfig-{tenant}-{user}").exists()


# ---------------------------------------------------------------- GPUs only through the queue


POLICY_LOADED_TIMEOUT_S = 60
"""The API server compiles a new ValidatingAdmissionPolicy from its informer: seconds after the apply."""


def error_text(result) -> str:
    return " ".join(result.stderr.split())


def refused_by_policy(result, policy: str) -> bool:
    """Refused at admission by that ValidatingAdmissionPolicy (not by RBAC or a quota)."""
    return result.returncode != 0 and f"ValidatingAdmissionPolicy '{policy}'" in error_text(result)


def attempt(platform, namespace: str, manifest: dict, policy: str, user: str | None = None):
    """The tenant admin's create, once a server-side dry run of it is refused by `policy`: never
    the real attempt before the policy is loaded, which would make the object. The real attempt's result."""
    wait_for(f"{policy} refusing {manifest['kind']} {manifest['metadata']['name']} in {namespace}",
             lambda: refused_by_policy(platform("-n", namespace, "create", "--dry-run=server", "-f", "-",
                                                stdin=json.dumps(manifest), check=False,
                                                user=user or ADMIN[namespace]), policy),
             POLICY_LOADED_TIMEOUT_S)
    return create(platform, namespace, manifest, check=False, user=user)


def test_a_bare_gpu_pod_is_refused(platform):
    refused = attempt(platform, "inference", pod("bare-gpus", gpus_wanted=4), GPU_POLICY)
    assert refused_by_policy(refused, GPU_POLICY), refused.stderr
    assert "runs here only as part of a job Kueue admitted" in error_text(refused)
    assert platform("-n", "inference", "get", "pod", "bare-gpus", check=False).returncode != 0


def test_a_job_in_the_tenant_queue_runs_its_gpu_pod_on_a_gpu_node(platform):
    create(platform, "inference", job("queued-four", "gpu", pods=1, gpus_each=4))
    try:
        wait_for("inference's queued job running", lambda: len(running_pods(platform, "inference", "queued-four")) == 1,
                 ADMISSION_TIMEOUT_S)
        (placed,) = running_pods(platform, "inference", "queued-four")
        assert placed["spec"]["nodeName"] in WORKERS
        assert condition(workload(platform, "inference", "queued-four"), "Admitted") is not None
    finally:
        platform("-n", "inference", "delete", "job", "queued-four", "--cascade=foreground", "--wait=true",
                 check=False, timeout_s=120)


def test_a_job_asking_for_gpus_without_the_queue_is_refused(platform):
    manifest = job("no-queue", "gpu", pods=1, gpus_each=1)
    del manifest["metadata"]["labels"]
    refused = attempt(platform, "inference", manifest, GPU_POLICY)
    assert refused_by_policy(refused, GPU_POLICY), refused.stderr
    assert "the Job asks for GPUs but names no queue: label it kueue.x-k8s.io/queue-name: gpu" in error_text(refused)
    assert platform("-n", "inference", "get", "job", "no-queue", check=False).returncode != 0


def test_resuming_a_held_job_is_refused_only_kueue_starts_it(platform):
    """5 GPUs in inference (ceiling 4): Kueue holds the job suspended, never admits it."""
    create(platform, "inference", job("held", "gpu", pods=1, gpus_each=5))
    try:
        wait_for("Kueue's workload for the held job", lambda: workload(platform, "inference", "held") is not None,
                 ADMISSION_TIMEOUT_S)
        resume = ["-n", "inference", "patch", "job", "held", "--type=merge", "-p", json.dumps({"spec": {"suspend": False}})]
        wait_for(f"{GPU_POLICY} refusing the resume", lambda: refused_by_policy(
            platform(*resume, "--dry-run=server", check=False, user=ADMIN["inference"]), GPU_POLICY),
            POLICY_LOADED_TIMEOUT_S)
        resumed = platform(*resume, check=False, user=ADMIN["inference"])
        assert refused_by_policy(resumed, GPU_POLICY), resumed.stderr
        assert "only Kueue starts a queued job" in error_text(resumed)
        assert platform.json("-n", "inference", "get", "job", "held")["spec"]["suspend"] is True
        assert running_pods(platform, "inference", "held") == []
    finally:
        platform("-n", "inference", "delete", "job", "held", "--wait=true", check=False, timeout_s=120)


def test_a_pod_the_job_controller_makes_over_the_gpu_quota_is_refused_by_the_quota(platform):
    """The API server's own lock behind the queue: the policy lets the job controller's pod of a
    Job through, the quota still caps it (inference: 4)."""
    manifest = pod("controller-five", gpus_wanted=5)
    manifest["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "none",
                                                "uid": "00000000-0000-0000-0000-000000000000", "controller": True}]
    refused = create(platform, "inference", manifest, check=False, user=JOB_CONTROLLER)
    try:
        assert refused.returncode != 0 and "exceeded quota: gpu-quota" in refused.stderr, refused.stderr
    finally:
        platform("-n", "inference", "delete", "pod", "controller-five", "--ignore-not-found", "--wait=false",
                 check=False)


# ---------------------------------------------------------------- services: not outward, not redirected


def service(name: str, kind: str = "ClusterIP", **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": kind, "selector": {"app": name}, "ports": [{"port": 8080}], **spec}}


@pytest.mark.parametrize(("name", "manifest"), [
    ("node-port", service("node-port", "NodePort")),
    ("load-balancer", service("load-balancer", "LoadBalancer")),
    ("external-ips", service("external-ips", externalIPs=["10.10.0.200"])),
])
def test_a_service_that_opens_the_cluster_or_takes_others_traffic_is_refused(platform, name, manifest):
    refused = attempt(platform, "research", manifest, SERVICE_POLICY)
    assert refused_by_policy(refused, SERVICE_POLICY), refused.stderr
    assert platform("-n", "research", "get", "service", name, check=False).returncode != 0


def test_a_cluster_ip_service_stays_the_tenant_s(platform):
    create(platform, "research", service("plain"))
    deleted = platform("-n", "research", "delete", "service", "plain", check=False, user=ADMIN["research"])
    assert deleted.returncode == 0, deleted.stderr


def endpoint_slice(name: str) -> dict:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": name},
            "addressType": "IPv4", "ports": [{"port": 6443}], "endpoints": [{"addresses": ["10.10.0.11"]}]}


def test_endpoints_and_endpoint_slices_are_the_control_plane_s(platform):
    for what in ("endpoints", "endpointslices.discovery.k8s.io"):
        for verb in ("create", "patch", "delete"):
            answer = platform("auth", "can-i", verb, what, "-n", "research", check=False, user=ADMIN["research"])
            assert (what, verb, answer.stdout.strip()) == (what, verb, "no")
    create(platform, "research", service("watched"), user=ADMIN["research"])
    try:
        made = {"Endpoints": {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hand-made"},
                              "subsets": [{"addresses": [{"ip": "10.10.0.11"}], "ports": [{"port": 6443}]}]},
                "EndpointSlice": endpoint_slice("hand-made")}
        for kind, manifest in made.items():
            refused = create(platform, "research", manifest, check=False)
            assert (kind, refused.returncode != 0, "forbidden" in refused.stderr.lower()) == (kind, True, True)
        patch = json.dumps({"metadata": {"labels": {"redirected": "yes"}}})
        patched = platform("-n", "research", "patch", "endpoints", "watched", "--type=merge", "-p", patch,
                           check=False, user=ADMIN["research"])
        assert patched.returncode != 0 and "forbidden" in patched.stderr.lower(), patched.stderr
    finally:
        platform("-n", "research", "delete", "service", "watched", "--ignore-not-found", check=False)


# ---------------------------------------------------------------- CPU, memory, pods, priority


def test_a_pod_over_the_compute_quota_is_refused(platform):
    hard = platform.json("-n", "inference", "get", "resourcequota", COMPUTE_QUOTA)["spec"]["hard"]
    assert set(hard) == {"requests.cpu", "requests.memory", "pods"}
    # more than any tenant's share of the lab's GPU servers (224 cores, 4096 GB in all)
    for name, requests in (("too-much-cpu", {"cpu": "1000"}), ("too-much-memory", {"memory": "10000G"})):
        manifest = pod(name)
        manifest["spec"]["containers"][0]["resources"] = {"requests": requests}
        refused = create(platform, "inference", manifest, check=False)
        assert refused.returncode != 0 and f"exceeded quota: {COMPUTE_QUOTA}" in refused.stderr, refused.stderr


def test_a_pod_without_resources_gets_the_limit_range_s_requests(platform):
    create(platform, "inference", pod("defaults"))
    try:
        made = platform.json("-n", "inference", "get", "pod", "defaults")
        assert made["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}}
    finally:
        platform("-n", "inference", "delete", "pod", "defaults", "--wait=false", check=False)


@pytest.mark.parametrize("what", [f"limitrange/{LIMIT_RANGE}", f"resourcequota/{COMPUTE_QUOTA}"])
def test_a_tenant_admin_cannot_lift_its_limits(platform, what):
    for verb in ("delete", "patch", "update"):
        answer = platform("auth", "can-i", verb, what, "-n", "inference", check=False, user="carol")
        assert (verb, answer.stdout.strip()) == (verb, "no")
    deleted = platform("-n", "inference", "delete", what, check=False, user="carol")
    patched = platform("-n", "inference", "patch", what, "--type=json", "-p",
                       json.dumps([{"op": "remove", "path": "/spec"}]), check=False, user="carol")
    for result in (deleted, patched):
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    platform("-n", "inference", "get", what)


def test_a_pod_naming_a_system_priority_class_is_refused(platform):
    manifest = pod("critical")
    manifest["spec"]["priorityClassName"] = "system-node-critical"
    refused = attempt(platform, "inference", manifest, PRIORITY_POLICY)
    assert refused_by_policy(refused, PRIORITY_POLICY), refused.stderr
    assert "PriorityClass system-node-critical is not the tenant's: it may name none" in error_text(refused)


# ---------------------------------------------------------------- network isolation


def web_server(namespace: str, image: str) -> dict:
    """busybox httpd on :8080 serving `served-by-<namespace>`, its files in an emptyDir (the image's
    root file system is not the non-root user's to write)."""
    manifest = pod("web", image, command=["/bin/busybox", "sh", "-c",
                                          f"echo served-by-{namespace} > /www/index.html && "
                                          "exec /bin/busybox httpd -f -p 8080 -h /www"])
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "www", "mountPath": "/www"}]
    manifest["spec"]["volumes"] = [{"name": "www", "emptyDir": {}}]
    return manifest


@pytest.fixture(scope="module")
def servers(platform):
    """An HTTP server pod in each tenant namespace; name -> pod IP."""
    image = f"{MIRROR_REGISTRY}/{SHELL_IMAGE}:{shell_tag()}"
    addresses = {}
    for namespace in ADMIN:
        create(platform, namespace, web_server(namespace, image))
    for namespace in ADMIN:
        platform("-n", namespace, "wait", "--for=condition=Ready", "pod/web", "--timeout=120s", timeout_s=130)
        addresses[namespace] = platform.json("-n", namespace, "get", "pod", "web")["status"]["podIP"]
    yield addresses
    remove_web_servers(platform)


def remove_web_servers(platform) -> None:
    for namespace in ADMIN:
        platform("-n", namespace, "delete", "pod", "web", "--ignore-not-found", "--wait=true", check=False,
                 timeout_s=120)


def shell_tag() -> str:
    from rackform.k8s.versions import load_matrix

    return load_matrix(REPO_ROOT).carried[load_site(SITE, REPO_ROOT).kubernetes.version].images[SHELL_IMAGE].version


def fetch(platform, namespace: str, url: str):
    # busybox's own `wget -T` crashes in this build: the connection is bounded by `timeout` instead
    return platform("-n", namespace, "exec", "web", "--", "/bin/busybox", "timeout", "5", "/bin/busybox", "wget",
                    "-q", "-O", "-", url, check=False, timeout_s=30)


def test_a_tenant_pod_reaches_its_own_namespace(platform, servers):
    # The server answers itself through its pod IP: traffic within the namespace is allowed.
    got = fetch(platform, "research", f"http://{servers['research']}:8080/")
    assert got.returncode == 0 and got.stdout.strip() == "served-by-research", got.stderr


POLICY_TAKES_HOLD_S = 30
"""kube-router applies policies to a new pod at its next sync, seconds after the pod is Ready
(until then the pod is not yet anyone's to filter): every CNI's enforcement is eventually
consistent. The refusal must come within this; what it took is printed."""


def test_a_tenant_pod_cannot_reach_another_tenant(platform, servers):
    took = wait_for("research refused inference's pod", lambda: fetch(
        platform, "research", f"http://{servers['inference']}:8080/").returncode != 0, POLICY_TAKES_HOLD_S)
    print(f"\nthe policy refused research's request {took:.0f} s after the pods were Ready")
    # The control: the same server answers inside its own namespace, so the refusal is the policy's.
    assert fetch(platform, "inference", f"http://{servers['inference']}:8080/").returncode == 0


def test_a_tenant_pod_resolves_names_through_the_cluster_dns(platform, servers):
    service_ip = platform.json("-n", "default", "get", "service", "kubernetes")["spec"]["clusterIP"]
    tries = []

    def resolved() -> bool:
        tries.append(platform("-n", "research", "exec", "web", "--", "/bin/busybox", "nslookup",
                              "kubernetes.default.svc.cluster.local", check=False, timeout_s=30))
        return tries[-1].returncode == 0 and service_ip in tries[-1].stdout

    try:
        took = wait_for("research's pod resolving through the cluster DNS", resolved, POLICY_TAKES_HOLD_S)
    except AssertionError as failed:
        raise AssertionError(f"{failed}; the last lookup said: {tries[-1].stdout}{tries[-1].stderr}") from None
    print(f"\nresolved after {len(tries)} lookup(s), {took:.0f} s")


# ---------------------------------------------------------------- fair share (Kueue)


def job(name: str, queue: str, pods: int, gpus_each: int) -> dict:
    template = pod(name, gpus_wanted=gpus_each)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"job": name}},
                                  "spec": {**template["spec"], "restartPolicy": "Never"}}}}


def workload(platform, namespace: str, job_name: str) -> dict | None:
    items = platform.json("-n", namespace, "get", "workloads.kueue.x-k8s.io")["items"]
    return next((item for item in items if any(ref.get("name") == job_name
                                               for ref in item["metadata"].get("ownerReferences", []))), None)


def condition(item: dict | None, kind: str) -> dict | None:
    if item is None:
        return None
    return next((c for c in item.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"),
                None)


def running_pods(platform, namespace: str, job_name: str) -> list[dict]:
    items = platform.json("-n", namespace, "get", "pods", "-l", f"job={job_name}")["items"]
    return [item for item in items if item["status"].get("phase") == "Running"]


@pytest.fixture(scope="module")
def fair_share(platform):
    """research's 2 x 8-GPU job (16 GPUs: 8 guaranteed, 8 borrowed) runs; then inference submits
    4 GPUs. What each step looked like."""
    steps = {}
    create(platform, "research", job("big", "gpu", pods=2, gpus_each=8))
    wait_for("research's borrowing job admitted and running on both GPU nodes",
             lambda: len(running_pods(platform, "research", "big")) == 2, ADMISSION_TIMEOUT_S)
    steps["borrowed"] = platform.json("get", "clusterqueue", "research")["status"]
    create(platform, "inference", job("small", "gpu", pods=1, gpus_each=4))
    wait_for("inference's job running within its guarantee",
             lambda: len(running_pods(platform, "inference", "small")) == 1, ADMISSION_TIMEOUT_S)
    steps["research_workload"] = workload(platform, "research", "big")
    steps["inference_queue"] = platform.json("get", "clusterqueue", "inference")["status"]
    steps["research_running"] = len(running_pods(platform, "research", "big"))
    for namespace, name in (("research", "big"), ("inference", "small")):  # what was seen is kept: free the GPUs
        platform("-n", namespace, "delete", "job", name, "--cascade=foreground", "--wait=true", check=False,
                 timeout_s=120)
    return steps


def gpu_usage(status: dict) -> tuple[int, int]:
    """(GPUs in use, of them borrowed) from a ClusterQueue's status."""
    for flavor in status.get("flavorsUsage") or []:
        for resource in flavor["resources"]:
            if resource["name"] == gpus.GPU_RESOURCE:
                return int(resource.get("total", "0")), int(resource.get("borrowed", "0"))
    return 0, 0


def test_a_tenant_borrows_idle_gpus_beyond_its_guarantee(fair_share):
    assert gpu_usage(fair_share["borrowed"]) == (16, 8)


def test_the_owner_coming_back_preempts_the_borrower(fair_share):
    evicted = condition(fair_share["research_workload"], "Evicted") or {}
    preempted = condition(fair_share["research_workload"], "Preempted") or {}
    assert "Preempted" in (evicted.get("reason"), preempted.get("type")), fair_share["research_workload"]
    assert fair_share["research_running"] == 0


def test_the_owner_runs_within_its_guarantee(fair_share):
    assert gpu_usage(fair_share["inference_queue"]) == (4, 0)


# ---------------------------------------------------------------- converged


def helm_revisions(platform) -> list[str]:
    """Kueue's Helm release revisions, as Helm stores them (a Secret per revision)."""
    listed = platform.json("-n", "kueue-system", "get", "secrets", "-l", "owner=helm,name=kueue")
    return sorted(item["metadata"]["name"] for item in listed["items"])


def test_a_second_platform_apply_changes_no_tenant_object_and_adds_no_helm_revision(platform):
    before = platform.json("-n", "inference", "get", "resourcequota,limitrange,role,rolebinding,networkpolicy")
    revisions = helm_revisions(platform)
    code, said = deploy_platform()
    assert code == 0, said[-3000:]
    after = platform.json("-n", "inference", "get", "resourcequota,limitrange,role,rolebinding,networkpolicy")
    versions = lambda listed: {(i["kind"], i["metadata"]["name"]): i["metadata"]["resourceVersion"]  # noqa: E731
                               for i in listed["items"]}
    assert versions(after) == versions(before)
    assert revisions and helm_revisions(platform) == revisions, "kueue, deployed as rendered, was not upgraded again"


def test_kueue_runs_the_bundle_s_image_named_by_its_digest(platform):
    """The chart's image tag is `<tag>@<digest>` with the bundle's digest (rackform.k8s.manifests.kueue_values)."""
    from rackform.mirror.bundle import bundle_path, release_pins
    from rackform.mirror.manifest import read

    manifest = read(bundle_path(release_pins(REPO_ROOT, SITE).kubernetes)).find("image", "kueue")
    pods = platform.json("-n", "kueue-system", "get", "pods")["items"]
    managers = [c for pod in pods for c in pod["spec"]["containers"] if c["name"] == "manager"]
    assert managers and {c["image"] for c in managers} == {
        f"{MIRROR_REGISTRY}/kueue:{manifest.version}@{manifest.digest}"}


# ---------------------------------------------------------------- day 2: rolling maintenance


STEADY = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "steady"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "steady"}},
             "template": {"metadata": {"labels": {"app": "steady"}}, "spec": pod("steady")["spec"]}},
}
STEADY_PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "steady"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "steady"}}}}
HOOK = """\
#!/bin/sh
# Runs between drain and uncordon: the host must be cordoned and hold none of steady's pods.
set -e
[ "$({kubectl} get node "$RACKFORM_HOST" -o jsonpath='{{.spec.unschedulable}}')" = true ]
! {kubectl} -n research get pods -l app=steady -o wide --no-headers | grep -w "$RACKFORM_HOST"
echo "$RACKFORM_HOST drained" >> {log}
"""


@pytest.fixture(scope="module")
def maintained(platform, tmp_path_factory, monkeypatch_module):
    """`rackform maintain lab --batch 1` on the workers (a hook as the maintenance) while a
    deployment of 2 replicas with a PodDisruptionBudget of minAvailable 1 runs; its available
    replicas sampled every half second meanwhile."""
    import threading

    remove_web_servers(platform)  # pods without a controller: a drain (rightly) refuses to delete them
    folder = tmp_path_factory.mktemp("maintain")
    kubectl_line = " ".join(platform.argv)
    hook, log = folder / "hook.sh", folder / "drained.log"
    hook.write_text(HOOK.format(kubectl=kubectl_line, log=log))
    hook.chmod(0o755)
    for manifest in (STEADY, STEADY_PDB):
        create(platform, "research", manifest)
    platform("-n", "research", "rollout", "status", "deployment/steady", "--timeout=120s", timeout_s=130)
    samples: list[int] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            said = platform("-n", "research", "get", "deployment", "steady", "-o",
                            "jsonpath={.status.availableReplicas}", check=False, timeout_s=10)
            if said.returncode == 0:
                samples.append(int(said.stdout or 0))
            stop.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    # day 2 drives the cluster with the kubectl on PATH: the pinned one, as an operator's would match it
    monkeypatch_module.setenv("PATH", f"{platform.argv[0].rsplit('/', 1)[0]}:{__import__('os').environ['PATH']}")
    monkeypatch_module.setenv("KUBECONFIG", platform.argv[2])
    sampler.start()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["maintain", SITE, "--root", str(REPO_ROOT), "--batch", "1", "--limit", ",".join(WORKERS),
                         "--hook", str(hook)])
    stop.set()
    sampler.join()
    yield code, out.getvalue() + err.getvalue(), samples, log.read_text() if log.exists() else ""
    for kind in ("deployment", "poddisruptionbudget"):
        platform("-n", "research", "delete", kind, "steady", "--wait=false", check=False)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_maintain_drains_each_worker_in_turn_and_uncordons_it(maintained, platform):
    code, said, _samples, drained = maintained
    assert code == 0, said[-3000:]
    assert drained.split() == [word for host in WORKERS for word in (host, "drained")]
    nodes = platform.json("get", "nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")] == []


def test_maintain_never_takes_a_deployment_below_its_disruption_budget(maintained):
    _code, _said, samples, _drained = maintained
    assert len(samples) > 10, "the probe sampled the deployment through the maintenance"
    assert min(samples) >= STEADY_PDB["spec"]["minAvailable"], samples


# ---------------------------------------------------------------- day 2: one patch release up


UPGRADE_TO = "1.36.3"
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2
FAILED_PROBES_ALLOWED = 3
"""One control-plane restart's worth: the VIP's failover took 3.2 s when its holder lost power
(test_kubernetes_lab); the upgrade hands the VIP over before each restart, so it should need none."""


@pytest.fixture(scope="module")
def upgraded(platform, tmp_path_factory, make_site_files, monkeypatch_module):
    """`rackform upgrade lab --to 1.36.3` from a copy of the repo's inputs (the upgrade pins the
    version in the site file: the shipped one stays at the lab's 1.36.1), the cluster's API probed
    through the VIP every second meanwhile. (exit code, output, probes: list of (ok, seconds))."""
    import shutil
    import threading
    import time

    from clusterlab import KUBECONFIG, VIP

    assert cli.main(["mirror", "build", SITE, "--root", str(REPO_ROOT), "--kubernetes", UPGRADE_TO]) == 0
    root = make_site_files(tmp_path_factory.mktemp("upgrade")).root
    (root / "build" / SITE / "artifacts").mkdir(parents=True)
    shutil.copy(KUBECONFIG, root / "build" / SITE / "artifacts" / "kubeconfig")
    monkeypatch_module.setenv("RACKFORM_STATE_DIR", str(root / "state"))
    assert platform("config", "view", "-o", "jsonpath={.clusters[0].cluster.server}").stdout == f"https://{VIP}:6443"
    probes: list[tuple[bool, float]] = []
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            started = time.monotonic()
            said = platform("get", "--raw", "/readyz", f"--request-timeout={PROBE_TIMEOUT_S}s", check=False,
                            timeout_s=PROBE_TIMEOUT_S + 3)
            probes.append((said.returncode == 0 and said.stdout.strip() == "ok", time.monotonic() - started))
            stop.wait(max(0.0, PROBE_INTERVAL_S - (time.monotonic() - started)))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["upgrade", SITE, "--root", str(root), "--to", UPGRADE_TO])
    stop.set()
    prober.join()
    return code, out.getvalue() + err.getvalue(), probes


def test_upgrade_moves_every_node_to_the_next_patch_release(upgraded, platform):
    code, said, _probes = upgraded
    assert code == 0, said[-4000:]
    versions = {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"]
                for n in platform.json("get", "nodes")["items"]}
    assert versions == dict.fromkeys(versions, f"v{UPGRADE_TO}") and len(versions) == 5
    images = {c["image"].rsplit(":", 1)[-1] for p in platform.json("-n", "kube-system", "get", "pods", "-l",
                                                                   "tier=control-plane")["items"]
              for c in p["spec"]["containers"] if "etcd" not in c["image"]}
    assert images == {f"v{UPGRADE_TO}"}


def test_the_api_answers_through_the_vip_during_the_upgrade(upgraded):
    _code, _said, probes = upgraded
    failed = sum(not ok for ok, _seconds in probes)
    print(f"\nupgrade: {len(probes)} probes of /readyz through the VIP, {failed} failed")
    assert len(probes) > 30, "the probe ran through the upgrade"
    assert failed <= FAILED_PROBES_ALLOWED, f"{failed} of {len(probes)} probes failed"


def test_every_node_is_schedulable_and_ready_after_the_upgrade(upgraded, platform):
    nodes = platform.json("get", "nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")] == []
    assert all(next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready") == "True" for n in nodes)


# ---------------------------------------------------------------- data sets: volumes and claims


BIND_TIMEOUT_S = 60
"""The PV controller binds a pre-bound claim at its next sync: seconds."""


def data_sets() -> list:
    found = load_site(SITE, REPO_ROOT).data_sets
    assert found, "the lab's site file declares data sets (topologies/sites/lab.yaml data_sets:)"
    return found


def claim_bound(platform, data_set) -> bool:
    claim = platform.json("-n", data_set.tenant, "get", "persistentvolumeclaim", data_set.name)
    return claim.get("status", {}).get("phase") == "Bound"


def test_each_data_set_claim_is_bound_to_its_volume_in_the_tenant_namespace(platform):
    """Static binding needs no NFS client and no provisioner: the claim binds whether or not a pod
    could mount it (pod mounts need a kernel NFS client, which the lab's nodes lack)."""
    for data_set in data_sets():
        wait_for(f"{data_set.tenant}/{data_set.name} Bound", lambda d=data_set: claim_bound(platform, d), BIND_TIMEOUT_S)
        claim = platform.json("-n", data_set.tenant, "get", "persistentvolumeclaim", data_set.name)
        volume = platform.json("get", "persistentvolume", volume_name(data_set))
        assert claim["spec"]["volumeName"] == volume_name(data_set)
        assert volume["status"]["phase"] == "Bound"
        assert {key: volume["spec"]["claimRef"][key] for key in ("namespace", "name", "uid")} == {
            "namespace": data_set.tenant, "name": data_set.name, "uid": claim["metadata"]["uid"]}
        assert volume["spec"]["nfs"]["path"] == f"/{data_set.name}"


def refused_by_the_policy(said, data_set) -> bool:
    """Refused by the claims' policy (not by RBAC), with its message naming the data set."""
    error = " ".join(said.stderr.split())
    return (said.returncode != 0 and "forbidden" in error.lower()
            and f"ValidatingAdmissionPolicy '{CLAIM_PROTECTION}'" in error
            and f"the claim of data set {data_set.name} belongs to the platform (rackform)" in error)


def policy_in_force(platform, data_set) -> bool:
    """A server-side dry run of the tenant admin's delete goes through admission and deletes nothing."""
    said = platform("-n", data_set.tenant, "delete", "persistentvolumeclaim", data_set.name, "--dry-run=server",
                    check=False, user=ADMIN[data_set.tenant])
    return refused_by_the_policy(said, data_set)


def test_a_tenant_admin_reads_its_data_set_claim_but_cannot_delete_it_or_touch_the_volume(platform):
    for data_set in data_sets():
        admin, namespace = ADMIN[data_set.tenant], data_set.tenant
        read = platform("-n", namespace, "get", "persistentvolumeclaim", data_set.name, check=False, user=admin)
        assert read.returncode == 0, read.stderr
        # Never the real delete before the policy refuses a dry run: it would take the claim.
        wait_for(f"{CLAIM_PROTECTION} refusing {namespace}/{data_set.name}",
                 lambda d=data_set: policy_in_force(platform, d), POLICY_LOADED_TIMEOUT_S)
        deleted = platform("-n", namespace, "delete", "persistentvolumeclaim", data_set.name, "--wait=false",
                           check=False, user=admin)
        assert refused_by_the_policy(deleted, data_set), deleted.stderr
        unlabelled = platform("-n", namespace, "label", "persistentvolumeclaim", data_set.name, f"{DATA_SET_LABEL}-",
                              check=False, user=admin)
        assert unlabelled.returncode != 0, unlabelled.stdout
        assert f"the label {DATA_SET_LABEL} on the claim of data set {data_set.name}" in " ".join(
            unlabelled.stderr.split()), unlabelled.stderr
        refused = {
            "delete the volume": platform("delete", "persistentvolume", volume_name(data_set), "--wait=false",
                                          check=False, user=admin),
            "patch the volume": platform("patch", "persistentvolume", volume_name(data_set), "--type=merge", "-p",
                                         json.dumps({"spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
                                         check=False, user=admin),
        }
        for what, said in refused.items():
            assert (what, said.returncode != 0, "forbidden" in said.stderr.lower()) == (what, True, True), said.stdout
        claim = platform.json("-n", namespace, "get", "persistentvolumeclaim", data_set.name)
        assert claim["metadata"].get("deletionTimestamp") is None and claim["status"]["phase"] == "Bound"
        assert claim["metadata"]["labels"][DATA_SET_LABEL] == data_set.name
        volume = platform.json("get", "persistentvolume", volume_name(data_set))
        assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and volume["status"]["phase"] == "Bound"


OWN_CLAIM = "own-scratch"
CLAIM_GONE_TIMEOUT_S = 60


def test_a_tenant_admin_creates_and_deletes_a_claim_of_its_own(platform):
    """RBAC gives claims back to the tenant; the policy leaves claims without the data-set label
    alone. With no class ("") and no volume to match (the data sets' volumes are reserved), the
    claim stays Pending: nothing is provisioned."""
    data_set = data_sets()[0]
    namespace, admin = data_set.tenant, ADMIN[data_set.tenant]
    for verb in ("create", "delete"):
        said = platform("auth", "can-i", verb, "persistentvolumeclaims", "-n", namespace, check=False, user=admin)
        assert (verb, said.stdout.strip()) == (verb, "yes")
    platform("-n", namespace, "delete", "persistentvolumeclaim", OWN_CLAIM, "--ignore-not-found", "--wait=true")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": OWN_CLAIM},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    create(platform, namespace, claim)
    made = platform.json("-n", namespace, "get", "persistentvolumeclaim", OWN_CLAIM)
    assert made["status"]["phase"] == "Pending" and not made["spec"].get("volumeName")
    deleted = platform("-n", namespace, "delete", "persistentvolumeclaim", OWN_CLAIM, "--wait=false",
                       check=False, user=admin)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(f"{namespace}/{OWN_CLAIM} gone",
             lambda: platform("-n", namespace, "get", "persistentvolumeclaim", OWN_CLAIM, check=False).returncode != 0,
             CLAIM_GONE_TIMEOUT_S)


def test_a_second_platform_apply_leaves_the_data_sets_bound_and_unchanged(platform):
    """The binder adds the claim's uid to the volume's claimRef; the next server-side apply owns
    only its name and namespace (claimRef is granular), so neither conflicts nor unbinds."""
    def versions() -> dict:
        found = {}
        for data_set in data_sets():
            claim = platform.json("-n", data_set.tenant, "get", "persistentvolumeclaim", data_set.name)
            volume = platform.json("get", "persistentvolume", volume_name(data_set))
            found[data_set.name] = (claim["metadata"]["resourceVersion"], claim["status"]["phase"],
                                    volume["metadata"]["resourceVersion"], volume["status"]["phase"])
        return found

    for data_set in data_sets():
        wait_for(f"{data_set.tenant}/{data_set.name} Bound", lambda d=data_set: claim_bound(platform, d), BIND_TIMEOUT_S)
    before = versions()
    code, said = deploy_platform()
    assert code == 0, said[-3000:]
    assert versions() == before
