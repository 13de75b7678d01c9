"""Tenants that hold (issue 27): GPUs only through Kueue, no way out of the cluster or around a
service, bounded CPU, memory, pods and priority, and a borrowing ceiling preemption can take back.

The admission policies' decisions are the API server's own (tests/unit/vap_support.py runs
k8s.io/apiserver's policy code on them); which resources and namespaces they select is checked
by shape. Each refusal is proven on the lab's cluster by tests/lab/test_platform_lab.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from platform_validation import problems
from vap_support import Request, decide

from rackform.k8s.manifests import platform_manifests
from rackform.k8s.platform import load_platform
from rackform.k8s.queues import borrowing_limit, gpu_ceiling, site_gpus
from rackform.k8s.tenant_admission import (
    CRONJOB_CONTROLLER,
    GPU_POLICY,
    JOB_CONTROLLER,
    PRIORITY_CLASSES_ANNOTATION,
    PRIORITY_POLICY,
    SERVICE_POLICY,
    gpu_policy,
    priority_policy,
    service_policy,
)
from rackform.k8s.tenant_compute import COMPUTE_QUOTA, LIMIT_RANGE, gpu_servers_capacity, tenant_compute
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site

REPO = Path(__file__).resolve().parents[2]
KUEUE = "system:serviceaccount:kueue-system:kueue-controller-manager"
TRAINING_OPERATOR = "system:serviceaccount:kubeflow:training-operator"
ALICE = "alice"
ADMIN_GROUPS = ("kubeadm:cluster-admins", "system:authenticated")


def lab():
    site = load_site("lab", REPO)
    design = load_platform(site)
    return site, design, platform_manifests(site, design, load_matrix(REPO))


def of_kind(manifests: list[dict], kind: str) -> dict[tuple[str | None, str], dict]:
    return {(m["metadata"].get("namespace"), m["metadata"]["name"]): m for m in manifests if m["kind"] == kind}


# ---------------------------------------------------------------- objects as a tenant would submit them


def container(gpus: int = 0, resource: str = "nvidia.com/gpu", init: bool = False) -> dict:
    made = {"name": "init" if init else "main", "image": "pause"}
    if gpus:
        made["resources"] = {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}}
    return made


def pod_spec(gpus: int = 0, resource: str = "nvidia.com/gpu", init_gpus: int = 0) -> dict:
    spec = {"containers": [container(), container(gpus, resource)] if gpus else [container()]}
    if init_gpus:
        spec["initContainers"] = [container(init_gpus, init=True)]
    return spec


def owner(kind: str, name: str = "owner", api: str = "batch/v1") -> dict:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}


def meta(name: str, labels: dict | None = None, owners: list[dict] | None = None) -> dict:
    made: dict = {"name": name, "namespace": "research"}
    if labels:
        made["labels"] = labels
    if owners:
        made["ownerReferences"] = owners
    return made


def pod(gpus: int = 0, owners: list[dict] | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta("p", owners=owners), "spec": {**pod_spec(gpus), **spec}}


def job(gpus: int = 4, queue: str | None = "gpu", suspend: bool = True, owners: list[dict] | None = None,
        labels: dict | None = None) -> dict:
    labels = {**({"kueue.x-k8s.io/queue-name": queue} if queue is not None else {}), **(labels or {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("j", labels, owners),
            "spec": {"suspend": suspend, "template": {"metadata": {"labels": {"job": "j"}},
                                                      "spec": {**pod_spec(gpus), "restartPolicy": "Never"}}}}


def pytorch_job(gpus: int = 8, queue: str | None = "gpu", suspend: bool = True) -> dict:
    replica = {"replicas": 1, "template": {"spec": pod_spec(gpus)}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": meta("t", {"kueue.x-k8s.io/queue-name": queue} if queue else None),
            "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {"Master": replica, "Worker": replica}}}


def cron_job(gpus: int = 4, queue: str | None = "gpu") -> dict:
    template = {"spec": {"template": {"spec": {**pod_spec(gpus), "restartPolicy": "Never"}}}}
    if queue:
        template["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": queue}}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("c"),
            "spec": {"schedule": "@hourly", "jobTemplate": template}}


def deployment(gpus: int = 1, kind: str = "Deployment") -> dict:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta("d"),
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": pod_spec(gpus)}}}


RESOURCES = {"Pod": ("", "pods"), "Job": ("batch", "jobs"), "CronJob": ("batch", "cronjobs"),
             "Deployment": ("apps", "deployments"), "StatefulSet": ("apps", "statefulsets"),
             "ReplicaSet": ("apps", "replicasets"), "PyTorchJob": ("kubeflow.org", "pytorchjobs"),
             "Service": ("", "services")}


def request(obj: dict, user: str = ALICE, operation: str = "CREATE", old: dict | None = None,
            groups: tuple[str, ...] = ("system:authenticated",), namespace_object: dict | None = None) -> Request:
    group, resource = RESOURCES[obj["kind"]]
    return Request(operation, group, "v1", resource, obj["kind"], "research", obj, user, groups, old,
                   namespace_object or {})


def one(policy: dict, req: Request):
    (decision,) = decide(policy, req)
    assert decision.errors == [], decision.errors  # a refusal by a broken expression proves nothing
    return decision


GPUS = gpu_policy("kubeflow", "kueue-system")


# ---------------------------------------------------------------- GPUs only through the queue


def test_a_tenant_s_bare_gpu_pod_is_refused_and_told_to_submit_a_queued_job():
    decision = one(GPUS, request(pod(gpus=4)))
    assert decision.denied
    assert decision.messages == ["a pod asking for GPUs runs here only as part of a job Kueue admitted: submit a Job "
                                 "labelled kueue.x-k8s.io/queue-name: gpu (the tenant's queue; docs/platform.md)"]


@pytest.mark.parametrize("what", ["init container", "MIG slice", "cluster admin", "fake Job owner"])
def test_no_way_around_it_for_a_bare_gpu_pod(what):
    made = {"init container": lambda: request({**pod(), "spec": pod_spec(init_gpus=1)}),
            "MIG slice": lambda: request({**pod(), "spec": pod_spec(1, "nvidia.com/mig-1g.10gb")}),
            "cluster admin": lambda: request(pod(gpus=1), user="kubernetes-admin", groups=ADMIN_GROUPS),
            "fake Job owner": lambda: request(pod(gpus=1, owners=[owner("Job")]))}[what]()
    assert one(GPUS, made).denied


def test_a_pod_without_gpus_is_the_tenant_s_own_business():
    assert not one(GPUS, request(pod())).denied


def test_the_job_controller_creates_the_pods_of_a_job_and_the_training_operator_those_of_a_pytorchjob():
    assert not one(GPUS, request(pod(gpus=8, owners=[owner("Job")]), user=JOB_CONTROLLER)).denied
    assert not one(GPUS, request(pod(gpus=8, owners=[owner("PyTorchJob", api="kubeflow.org/v1")]),
                                 user=TRAINING_OPERATOR)).denied


@pytest.mark.parametrize(("user", "owners"), [
    (JOB_CONTROLLER, None),                                                   # a pod of no Job
    (TRAINING_OPERATOR, [owner("MPIJob", api="kubeflow.org/v1")]),            # a kind Kueue does not queue here
    ("system:serviceaccount:kube-system:replicaset-controller", [owner("ReplicaSet", api="apps/v1")]),
])
def test_gpu_pods_of_anything_but_a_queued_kind_are_refused(user, owners):
    assert one(GPUS, request(pod(gpus=1, owners=owners), user=user)).denied


def test_a_job_asking_for_gpus_without_the_tenant_s_queue_is_refused_naming_what_it_named():
    (unlabelled,) = decide(GPUS, request(job(queue=None)))
    (elsewhere,) = decide(GPUS, request(job(queue="other")))
    assert unlabelled.denied and elsewhere.denied
    assert unlabelled.messages == ["the Job asks for GPUs but names no queue: label it kueue.x-k8s.io/queue-name: "
                                   "gpu, the tenant's queue, and Kueue admits it within the tenant's share"]
    assert "names the queue 'other'" in elsewhere.messages[0]


def test_a_job_in_the_tenant_s_queue_is_admitted_and_one_without_gpus_needs_none():
    assert not one(GPUS, request(job())).denied
    assert not one(GPUS, request(job(gpus=0, queue=None))).denied


def test_a_cronjob_s_job_template_carries_the_queue():
    refused = one(GPUS, request(cron_job(queue=None)))
    assert refused.denied and "label its jobTemplate kueue.x-k8s.io/queue-name: gpu" in refused.messages[0]
    assert not one(GPUS, request(cron_job())).denied


def test_a_pytorchjob_asking_for_gpus_goes_through_the_queue_too():
    assert one(GPUS, request(pytorch_job(queue=None))).denied
    assert not one(GPUS, request(pytorch_job())).denied
    assert not one(GPUS, request(pytorch_job(gpus=0, queue=None))).denied


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet"])
def test_long_running_workloads_get_no_gpus(kind):
    refused = one(GPUS, request(deployment(kind=kind)))
    assert refused.denied and refused.messages[0].startswith(f"a {kind} asking for GPUs would hold them outside")
    assert not one(GPUS, request(deployment(gpus=0, kind=kind))).denied


def test_a_queued_job_names_no_controller_owner_but_the_cronjob_its_controller_made_it_for():
    """Kueue leaves a job to a managed owner: a job controlled by another queued job would run unadmitted."""
    assert one(GPUS, request(job(owners=[owner("Job", "queued")]))).denied
    assert one(GPUS, request(job(owners=[owner("CronJob", "nightly")]))).denied, "only the cronjob controller"
    assert not one(GPUS, request(job(owners=[owner("CronJob", "nightly")]), user=CRONJOB_CONTROLLER)).denied
    assert one(GPUS, request(job(owners=[owner("Job", "queued")]), user=CRONJOB_CONTROLLER)).denied


def test_an_update_keeps_the_job_s_owner_and_queue():
    made = job(owners=[owner("CronJob", "nightly")])
    assert not one(GPUS, request(job(owners=[owner("CronJob", "nightly")], suspend=False), user=KUEUE,
                                 operation="UPDATE", old=made)).denied
    assert one(GPUS, request(job(owners=[owner("Job", "queued")]), operation="UPDATE", old=job())).denied
    assert one(GPUS, request(job(queue=None), operation="UPDATE", old=job())).denied


def test_only_kueue_lifts_a_queued_job_s_suspension():
    refused = one(GPUS, request(job(suspend=False), operation="UPDATE", old=job(suspend=True)))
    assert refused.denied and refused.messages == [
        "only Kueue starts a queued job: it lifts the suspension when it admits the job's workload"]
    assert not one(GPUS, request(job(suspend=False), user=KUEUE, operation="UPDATE", old=job(suspend=True))).denied
    # suspending (Kueue preempting, or the tenant stopping its own job) and other edits stay free
    assert not one(GPUS, request(job(suspend=True), operation="UPDATE", old=job(suspend=False))).denied
    assert not one(GPUS, request(job(suspend=False, labels={"x": "y"}), operation="UPDATE",
                                 old=job(suspend=False))).denied
    assert one(GPUS, request(pytorch_job(suspend=False), operation="UPDATE", old=pytorch_job(suspend=True))).denied


def test_a_tenant_s_job_names_no_prebuilt_workload():
    assert one(GPUS, request(job(labels={"kueue.x-k8s.io/prebuilt-workload-name": "someone-else"}))).denied


def test_the_gpu_policy_selects_what_carries_pods_in_tenant_namespaces_only():
    constraints = GPUS["spec"]["matchConstraints"]
    assert constraints["namespaceSelector"] == {"matchExpressions": [{"key": "rackform.io/tenant",
                                                                      "operator": "Exists"}]}
    selected = {(group, resource): tuple(rule["operations"]) for rule in constraints["resourceRules"]
                for group in rule["apiGroups"] for resource in rule["resources"]}
    assert selected == {("", "pods"): ("CREATE",), ("", "replicationcontrollers"): ("CREATE", "UPDATE"),
                        ("batch", "jobs"): ("CREATE", "UPDATE"), ("batch", "cronjobs"): ("CREATE", "UPDATE"),
                        ("apps", "deployments"): ("CREATE", "UPDATE"), ("apps", "statefulsets"): ("CREATE", "UPDATE"),
                        ("apps", "replicasets"): ("CREATE", "UPDATE"),
                        ("kubeflow.org", "pytorchjobs"): ("CREATE", "UPDATE")}
    assert GPUS["spec"]["failurePolicy"] == "Fail"


# ---------------------------------------------------------------- services


def service(kind: str | None = "ClusterIP", **spec) -> dict:
    body = {"ports": [{"port": 80}], "selector": {"app": "web"}, **spec}
    if kind:
        body["type"] = kind
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta("web"), "spec": body}


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer", "ExternalName"])
def test_a_service_that_opens_the_cluster_or_redirects_is_refused(kind):
    extra = {"externalName": "example.com"} if kind == "ExternalName" else {}
    refused = one(service_policy(), request(service(kind, **extra)))
    assert refused.denied and refused.messages[0].startswith(f"a tenant's services are ClusterIP only: type {kind} ")


def test_external_ips_are_refused_even_on_a_cluster_ip_service():
    refused = one(service_policy(), request(service(externalIPs=["10.10.0.20"])))
    assert refused.denied and "externalIPs" in refused.messages[0]
    assert one(service_policy(), request(service(externalIPs=["10.10.0.20"]), operation="UPDATE",
                                         old=service())).denied


@pytest.mark.parametrize("spec", [{}, {"clusterIP": "None"}], ids=["cluster-ip", "headless"])
def test_cluster_ip_services_stay_the_tenant_s(spec):
    assert not one(service_policy(), request(service(**spec))).denied
    assert not one(service_policy(), request(service(None, **spec))).denied


# ---------------------------------------------------------------- priority classes


def tenant_namespace(classes: str | None) -> dict:
    annotations = {} if classes is None else {PRIORITY_CLASSES_ANNOTATION: classes}
    return {"metadata": {"name": "research", "annotations": annotations}}


def test_a_pod_naming_a_system_class_is_refused():
    refused = one(priority_policy(), request(pod(priorityClassName="system-node-critical"),
                                             namespace_object=tenant_namespace("")))
    assert refused.denied and refused.messages == [
        "PriorityClass system-node-critical is not the tenant's: it may name none (priority_classes in the platform file)"]


def test_a_pod_names_one_of_its_tenant_s_classes_or_none():
    allowed = tenant_namespace("batch-high,batch-low")
    assert not one(priority_policy(), request(pod(priorityClassName="batch-low"), namespace_object=allowed)).denied
    assert not one(priority_policy(), request(pod(), namespace_object=tenant_namespace(None))).denied
    refused = one(priority_policy(), request(pod(priorityClassName="critical"), namespace_object=allowed))
    assert refused.denied and "it may name batch-high, batch-low" in refused.messages[0]


def test_the_namespace_carries_the_design_s_priority_classes(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "gpus: 8,", "gpus: 8, priority_classes: [batch-high, batch-low],")
    site = lab_files.load()
    namespaces = of_kind(platform_manifests(site, load_platform(site), load_matrix(REPO)), "Namespace")
    assert namespaces[(None, "research")]["metadata"]["annotations"][PRIORITY_CLASSES_ANNOTATION] == "batch-high,batch-low"
    assert namespaces[(None, "inference")]["metadata"]["annotations"][PRIORITY_CLASSES_ANNOTATION] == ""


# ---------------------------------------------------------------- the policies as rendered


def test_every_policy_has_a_binding_that_denies_and_all_validate_strictly():
    site, _design, manifests = lab()
    policies = of_kind(manifests, "ValidatingAdmissionPolicy")
    bindings = of_kind(manifests, "ValidatingAdmissionPolicyBinding")
    for name in (GPU_POLICY, SERVICE_POLICY, PRIORITY_POLICY):
        assert bindings[(None, name)]["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        assert policies[(None, name)]["spec"]["matchConstraints"]["namespaceSelector"] == {
            "matchExpressions": [{"key": "rackform.io/tenant", "operator": "Exists"}]}
    assert [p for m in (*policies.values(), *bindings.values()) for p in problems(m, site.kubernetes.version)] == []


def test_the_policies_read_what_the_tenant_namespaces_carry():
    _site, _design, manifests = lab()
    for name in ("research", "inference"):
        labels = of_kind(manifests, "Namespace")[(None, name)]["metadata"]["labels"]
        assert labels["rackform.io/tenant"] == name


def test_without_kueue_there_is_no_queue_to_require(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "releases: [kueue]", "releases: []")
    site = lab_files.load()
    names = {m["metadata"]["name"] for m in platform_manifests(site, load_platform(site), load_matrix(REPO))
             if m["kind"] == "ValidatingAdmissionPolicy"}
    assert GPU_POLICY not in names and {SERVICE_POLICY, PRIORITY_POLICY} <= names


def test_the_policies_decide_as_rendered_for_the_lab():
    """The rendered GPU policy names the lab's Kueue and training-operator namespaces."""
    _site, _design, manifests = lab()
    rendered = of_kind(manifests, "ValidatingAdmissionPolicy")[(None, GPU_POLICY)]
    assert rendered == GPUS
    assert not one(rendered, request(job(suspend=False), user=KUEUE, operation="UPDATE", old=job())).denied


# ---------------------------------------------------------------- RBAC: endpoints are the control plane's


def role_rules() -> dict[tuple[str, str], set[str]]:
    _site, _design, manifests = lab()
    role = of_kind(manifests, "Role")[("research", "research-admin")]
    return {(group, resource): set(rule["verbs"]) for rule in role["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}


def test_a_tenant_admin_reads_but_never_writes_endpoints():
    rules = role_rules()
    assert rules[("", "endpoints")] == rules[("discovery.k8s.io", "endpointslices")] == {"get", "list", "watch"}
    assert {"create", "update", "patch", "delete"} <= rules[("", "services")]


# ---------------------------------------------------------------- CPU, memory and pods


def test_the_defaults_split_the_gpu_servers_by_guarantee_and_the_idle_gpus_evenly():
    """Lab: 2 DGX H100 (112 cores, 2048 GB, 8 GPUs each); research 8 + 4/2 of 16 GPUs, inference 4 + 4/2."""
    site, design, _manifests = lab()
    research, inference = design.tenants
    assert tenant_compute(site, design, research) == replace(tenant_compute(site, design, research),
                                                             cpu_cores=140, memory_gb=2560, pods=137)
    assert (tenant_compute(site, design, inference).cpu_cores, tenant_compute(site, design, inference).memory_gb) == (
        84, 1536)
    capacity = gpu_servers_capacity(site)
    for name in ("cpu_cores", "memory_gb", "pods"):
        assert sum(getattr(tenant_compute(site, design, t), name) for t in design.tenants) <= getattr(capacity, name)


def test_the_design_s_own_bounds_win_and_a_tenant_without_share_still_runs_small_pods(lab_files):
    lab_files.edit("topologies/platform/lab.yaml", "gpus: 8,", "gpus: 8, cpu_cores: 32, memory_gb: 256, pods: 40,")
    lab_files.edit("topologies/platform/lab.yaml", "gpus: 4, borrow: 0", "gpus: 8, borrow: 0")
    site = lab_files.load()
    design = load_platform(site)
    research, inference = design.tenants
    assert (tenant_compute(site, design, research).cpu_cores, tenant_compute(site, design, research).pods) == (32, 40)
    assert tenant_compute(site, design, inference).cpu_cores == 112
    nobody = replace(inference, name="nobody", gpus=0)
    assert tenant_compute(site, replace(design, tenants=(research, inference, nobody)), nobody).cpu_cores == 1


def test_each_tenant_gets_its_compute_quota_and_container_defaults_which_validate_strictly():
    site, _design, manifests = lab()
    quota = of_kind(manifests, "ResourceQuota")[("inference", COMPUTE_QUOTA)]
    assert quota["spec"]["hard"] == {"requests.cpu": "84", "requests.memory": "1536G", "pods": "82"}
    limits = of_kind(manifests, "LimitRange")[("inference", LIMIT_RANGE)]
    assert limits["spec"]["limits"] == [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]
    assert "default" not in limits["spec"]["limits"][0], "a default limit would refuse a bigger request without one"
    assert problems(quota, site.kubernetes.version) == problems(limits, site.kubernetes.version) == []


def test_the_gpu_quota_is_unchanged_beside_the_compute_quota():
    _site, _design, manifests = lab()
    assert of_kind(manifests, "ResourceQuota")[("inference", "gpu-quota")]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4"}


# ---------------------------------------------------------------- the borrowing ceiling


def test_a_tenant_borrows_at_most_what_it_is_not_guaranteed():
    site, design, _manifests = lab()
    total = site_gpus(site)
    research, inference = design.tenants
    assert (borrowing_limit(research, total), gpu_ceiling(research, total)) == (8, 16)
    assert (borrowing_limit(inference, total), gpu_ceiling(inference, total)) == (0, 4)
    assert borrowing_limit(replace(research, borrow=12), total) == 8, "never more than the others could lend"
    assert borrowing_limit(replace(research, borrow=3), total) == 3


def test_the_queues_say_the_ceiling_and_reclaim_it_by_preemption():
    from rackform.k8s.manifests import after_release_manifests

    site = load_site("lab", REPO)
    queues = {m["metadata"]["name"]: m["spec"] for m in after_release_manifests(site, load_platform(site),
                                                                                load_matrix(REPO))
              if m["kind"] == "ClusterQueue"}
    limits = {name: spec["resourceGroups"][0]["flavors"][0]["resources"][0].get("borrowingLimit")
              for name, spec in queues.items()}
    assert limits == {"gpus-idle": "0", "research": "8", "inference": "0"}
    assert all(spec["preemption"]["reclaimWithinCohort"] == "Any" for spec in queues.values())


def test_the_evaluator_refuses_a_policy_the_api_server_would_not_compile():
    """What makes the decisions above worth something: a broken expression fails the test, as
    it would fail the platform's apply."""
    broken = service_policy()
    broken["spec"]["validations"][0] = {**broken["spec"]["validations"][0],
                                         "messageExpression": "'a tenant's service'"}  # unescaped quote
    with pytest.raises(AssertionError, match="would refuse this policy"):
        decide(broken, request(service()))
