"""Admission policies over every tenant namespace: what RBAC cannot say, because it knows verbs
and kinds but not what an object asks for.

    rackform-tenant-gpus-through-queues   GPUs only through a queued Job (Kueue), never a bare pod
    rackform-tenant-services              ClusterIP services only: no NodePort, LoadBalancer,
                                          ExternalName or externalIPs
    rackform-tenant-priority-classes      a pod names no PriorityClass but the tenant's own

Each is a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30)
with a binding that denies, selecting the namespaces labelled `rackform.io/tenant` (the
tenant's namespace; a tenant admin cannot relabel a namespace). An expression that fails to
evaluate refuses (failurePolicy Fail).

Why GPUs go through the queue, and how. Kueue keeps a tenant's guarantee by preempting who
borrowed it (rackform.k8s.queues); a GPU pod Kueue never admitted is invisible to it, and
nothing takes its GPUs back. Kueue here manages batch/v1 Jobs and PyTorchJobs labelled
`kueue.x-k8s.io/queue-name` (its configuration's frameworks): its webhook suspends such a job
when it is created, and only its controller lifts the suspension once the workload is admitted.
This policy closes what is left around that, for any object asking for `nvidia.com/gpu` (or a
MIG slice, `nvidia.com/mig-*`) in a container or init container:

- a Pod: only the job controller may create it, for a Job it controls (kube-controller-manager
  runs its controllers under their own service accounts: kubeadm's default), or the training
  operator, for a PyTorchJob. A tenant's bare GPU pod is refused, whoever creates it;
- a Job, PyTorchJob or CronJob (its job template): it must name the tenant's LocalQueue, `gpu`,
  and no prebuilt workload (tenants create no Workloads);
- a Job or PyTorchJob names no controller owner (Kueue leaves a job whose owner it manages to
  that owner, so a job pointing at another queued job would run unadmitted), except the CronJob
  the cronjob controller creates it for; an update keeps the owner it had;
- only Kueue lifts a suspended job's suspension (a tenant resuming its own queued job would run
  it before admission, until Kueue suspends it again);
- a Deployment, StatefulSet, ReplicaSet or ReplicationController asking for GPUs is refused: Kueue
  here manages no long-running workloads, so their pods would hold GPUs outside the queue.

The alternative, Kueue's own `manageJobsWithoutQueueName` over the tenant namespaces, holds
unlabelled jobs suspended (waiting on a LocalQueue named `default`) instead of refusing them, and
bare pods only with its `pod` integration, whose scheduling gate a tenant with `update` on pods
could lift itself. A refusal at admission says at once what is wrong and how to submit instead.
"""

from __future__ import annotations

from typing import Any

from rackform.k8s.data_sets import TENANT_LABEL
from rackform.k8s.gpu_sharing import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from rackform.k8s.queues import LOCAL_QUEUE, QUEUE_LABEL

Manifest = dict[str, Any]
GPU_POLICY = "rackform-tenant-gpus-through-queues"
SERVICE_POLICY = "rackform-tenant-services"
PRIORITY_POLICY = "rackform-tenant-priority-classes"
PRIORITY_CLASSES_ANNOTATION = "rackform.io/priority-classes"
"""On a tenant's namespace: the PriorityClasses its pods may name, comma-separated (the design's
`priority_classes`). The policy reads it from the namespace (namespaceObject)."""
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
CRONJOB_CONTROLLER = "system:serviceaccount:kube-system:cronjob-controller"
KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"
"""The Kueue chart's controller service account (`<fullname>-controller-manager`; the release is `kueue`)."""
QUEUED_KINDS = ("Job", "PyTorchJob")
"""The kinds Kueue manages here (its configuration's frameworks batch/job, kubeflow.org/pytorchjob)."""
UNQUEUED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "ReplicationController")
TEMPLATE_KINDS = (*QUEUED_KINDS, "CronJob", *UNQUEUED_KINDS)
ALLOWED_SERVICE_TYPE = "ClusterIP"


def _meta(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {"app.kubernetes.io/managed-by": "rackform"}}


def tenant_namespaces() -> dict[str, Any]:
    return {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}


def _rule(group: str, resources: list[str], operations: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": ["v1"], "operations": operations, "resources": resources}


def _policy(name: str, rules: list[dict[str, Any]], variables: list[dict[str, str]],
            validations: list[dict[str, str]]) -> Manifest:
    spec: dict[str, Any] = {"failurePolicy": "Fail",
                            "matchConstraints": {"resourceRules": rules, "namespaceSelector": tenant_namespaces()},
                            "validations": validations}
    if variables:
        spec["variables"] = variables
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": _meta(name), "spec": spec}


def _binding(name: str) -> Manifest:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _meta(name), "spec": {"policyName": name, "validationActions": ["Deny"]}}


def _cel_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _text(text: str) -> str:
    """CEL: `text` as a string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _label(labels_of: str, key: str) -> str:
    """CEL: the label `key` of the object whose metadata is `labels_of`, '' where it has none."""
    return (f"(has({labels_of}.labels) && '{key}' in {labels_of}.labels ? {labels_of}.labels['{key}'] : '')")


# ------------------------------------------------------------------ GPUs through the queue


def _asks_for_gpus(containers: str) -> str:
    """CEL: a container of the list `containers` names a GPU (or MIG slice) in its requests or limits."""
    gpu = f"(r == '{GPU_RESOURCE}' || r.startsWith('{MIG_RESOURCE_PREFIX}'))"
    return (f"{containers}.exists(c, has(c.resources) && ("
            f"(has(c.resources.limits) && c.resources.limits.exists(r, {gpu})) || "
            f"(has(c.resources.requests) && c.resources.requests.exists(r, {gpu}))))")


def _controller_owners(obj: str) -> str:
    """CEL: `kind/name/uid` of each controller owner of `obj` (what Kueue follows up to a managed job)."""
    return (f"{obj} != null && has({obj}.metadata.ownerReferences) ? {obj}.metadata.ownerReferences"
            ".filter(o, has(o.controller) && o.controller).map(o, o.kind + '/' + o.name + '/' + o.uid) : []")


def _suspended(obj: str) -> str:
    """CEL: the Job's spec.suspend, or the PyTorchJob's spec.runPolicy.suspend, is true."""
    return (f"{obj} != null && (request.kind.kind == 'PyTorchJob' ? "
            f"(has({obj}.spec.runPolicy) && has({obj}.spec.runPolicy.suspend) && {obj}.spec.runPolicy.suspend) : "
            f"(has({obj}.spec.suspend) && {obj}.spec.suspend))")


def gpu_policy(training_namespace: str, kueue_namespace: str) -> Manifest:
    """GPUs in a tenant namespace only through a job Kueue admits (the module's docstring)."""
    kind = "request.kind.kind"
    user = "request.userInfo.username"
    kueue = f"system:serviceaccount:{kueue_namespace}:{KUEUE_SERVICE_ACCOUNT}"
    training_operator = f"system:serviceaccount:{training_namespace}:"
    variables = [
        {"name": "podSpecs", "expression": (
            f"{kind} == 'Pod' ? [object.spec] : "
            f"{kind} == 'CronJob' ? [object.spec.jobTemplate.spec.template.spec] : "
            f"{kind} == 'PyTorchJob' ? (has(object.spec.pytorchReplicaSpecs) ? object.spec.pytorchReplicaSpecs"
            ".map(replica, object.spec.pytorchReplicaSpecs[replica].template.spec) : []) : "
            "[object.spec.template.spec]")},
        {"name": "asksForGpus", "expression": (
            "variables.podSpecs.exists(spec, "
            f"(has(spec.containers) && {_asks_for_gpus('spec.containers')}) || "
            f"(has(spec.initContainers) && {_asks_for_gpus('spec.initContainers')}))")},
        {"name": "queue", "expression": (
            f"{kind} == 'CronJob' ? (has(object.spec.jobTemplate.metadata) ? "
            f"{_label('object.spec.jobTemplate.metadata', QUEUE_LABEL)} : '') : "
            f"{_label('object.metadata', QUEUE_LABEL)}")},
        {"name": "owners", "expression": _controller_owners("object")},
        {"name": "oldOwners", "expression": _controller_owners("oldObject")},
    ]
    queued = f"{kind} in {_cel_list(QUEUED_KINDS)}"
    how = f"submit a Job labelled {QUEUE_LABEL}: {LOCAL_QUEUE} (the tenant's queue; docs/platform.md)"
    validations = [
        {"expression": (
            f"{kind} != 'Pod' || !variables.asksForGpus || "
            f"({user} == '{JOB_CONTROLLER}' && variables.owners.exists(o, o.startsWith('Job/'))) || "
            f"({user}.startsWith('{training_operator}') && variables.owners.exists(o, o.startsWith('PyTorchJob/')))"),
         "reason": "Forbidden",
         "message": f"a pod asking for GPUs runs here only as part of a job Kueue admitted: {how}"},
        {"expression": f"!({kind} in {_cel_list(UNQUEUED_KINDS)}) || !variables.asksForGpus",
         "reason": "Forbidden",
         "message": f"GPUs go only to queued jobs: Kueue here manages no long-running workloads, whose pods would "
                    f"hold GPUs outside the queue; {how}",
         "messageExpression": f"'a ' + {kind} + " + _text(
             f" asking for GPUs would hold them outside the queue (Kueue here manages Jobs and PyTorchJobs only): {how}")},
        {"expression": f"!({queued} || {kind} == 'CronJob') || !variables.asksForGpus || variables.queue == '{LOCAL_QUEUE}'",
         "reason": "Forbidden",
         "message": f"a job asking for GPUs goes through the tenant's queue: label it {QUEUE_LABEL}: {LOCAL_QUEUE}",
         "messageExpression": (
             f"'the ' + {kind} + ' asks for GPUs but ' + (variables.queue == '' ? 'names no queue' : "
             f"{_text('names the queue ' + chr(39))} + variables.queue + {_text(chr(39))}) + ': label ' + "
             f"({kind} == 'CronJob' ? 'its jobTemplate' : 'it') + "
             + _text(f" {QUEUE_LABEL}: {LOCAL_QUEUE}, the tenant's queue, and Kueue admits it within the tenant's share"))},
        {"expression": f"!({queued}) || !variables.asksForGpus || {_label('object.metadata', PREBUILT_WORKLOAD_LABEL)} == ''",
         "reason": "Forbidden",
         "message": f"a tenant's job names no prebuilt workload ({PREBUILT_WORKLOAD_LABEL}): Kueue makes its workload"},
        {"expression": (
            f"!({queued}) || !variables.asksForGpus || size(variables.owners) == 0 || "
            "(request.operation == 'UPDATE' && variables.owners == variables.oldOwners) || "
            f"(request.operation == 'CREATE' && {user} == '{CRONJOB_CONTROLLER}' && "
            "variables.owners.all(o, o.startsWith('CronJob/')))"),
         "reason": "Forbidden",
         "message": "a queued job asking for GPUs names no controller owner (Kueue leaves a job whose owner it "
                    "manages to that owner, so it would run unadmitted); a CronJob's jobs are the cronjob "
                    "controller's to create"},
        {"expression": (
            f"!({queued}) || !variables.asksForGpus || request.operation != 'UPDATE' || "
            f"!({_suspended('oldObject')}) || ({_suspended('object')}) || {user} == '{kueue}'"),
         "reason": "Forbidden",
         "message": "only Kueue starts a queued job: it lifts the suspension when it admits the job's workload"},
    ]
    rules = [
        _rule("", ["pods"], ["CREATE"]),
        _rule("", ["replicationcontrollers"], ["CREATE", "UPDATE"]),
        _rule("batch", ["jobs", "cronjobs"], ["CREATE", "UPDATE"]),
        _rule("apps", ["deployments", "statefulsets", "replicasets"], ["CREATE", "UPDATE"]),
        _rule("kubeflow.org", ["pytorchjobs"], ["CREATE", "UPDATE"]),
    ]
    return _policy(GPU_POLICY, rules, variables, validations)


# ------------------------------------------------------------------ services


def service_policy() -> Manifest:
    """ClusterIP services only. A NodePort or LoadBalancer opens the tenant's pods to the outside
    on every node (past its NetworkPolicies' intent); `externalIPs` lets a service take traffic
    for any address the nodes route, another tenant's or the cluster's (CVE-2020-8554); an
    ExternalName sends the namespace's lookups of the name anywhere."""
    spec_type = f"(has(object.spec.type) ? object.spec.type : '{ALLOWED_SERVICE_TYPE}')"
    validations = [
        {"expression": f"{spec_type} == '{ALLOWED_SERVICE_TYPE}'",
         "reason": "Forbidden",
         "message": "a tenant's services are ClusterIP: no NodePort, LoadBalancer or ExternalName",
         "messageExpression": _text(f"a tenant's services are {ALLOWED_SERVICE_TYPE} only: type ") + f" + {spec_type} + "
                              + _text(" would open the namespace beyond the cluster or redirect its traffic; a "
                                      "cluster admin exposes a service (docs/platform.md)")},
        {"expression": "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
         "reason": "Forbidden",
         "message": "a tenant's service names no externalIPs: they would take the nodes' traffic for any "
                    "address (CVE-2020-8554)"},
    ]
    return _policy(SERVICE_POLICY, [_rule("", ["services"], ["CREATE", "UPDATE"])], [], validations)


# ------------------------------------------------------------------ priority classes


def priority_policy() -> Manifest:
    """A pod names a PriorityClass only of its namespace's list (the annotation the platform sets
    from the design's `priority_classes`). Without this a tenant could name system-node-critical,
    whose pods the scheduler places by evicting any other tenant's from a node."""
    annotation = PRIORITY_CLASSES_ANNOTATION
    variables = [{"name": "allowed", "expression": (
        f"has(namespaceObject.metadata.annotations) && '{annotation}' in namespaceObject.metadata.annotations && "
        f"namespaceObject.metadata.annotations['{annotation}'] != '' ? "
        f"namespaceObject.metadata.annotations['{annotation}'].split(',') : []")}]
    validations = [
        {"expression": ("!has(object.spec.priorityClassName) || object.spec.priorityClassName == '' || "
                        "object.spec.priorityClassName in variables.allowed"),
         "reason": "Forbidden",
         "message": "the pod's PriorityClass is not one of the tenant's (priority_classes in the platform file)",
         "messageExpression": ("'PriorityClass ' + object.spec.priorityClassName + "
                               + _text(" is not the tenant's: it may name ")
                               + " + (size(variables.allowed) == 0 ? 'none' : variables.allowed.join(', ')) + "
                               "' (priority_classes in the platform file)'")},
    ]
    return _policy(PRIORITY_POLICY, [_rule("", ["pods"], ["CREATE"])], variables, validations)


def tenant_admission(queues: bool, training_namespace: str, kueue_namespace: str) -> list[Manifest]:
    """The policies and their bindings; the GPU policy only where Kueue is installed (`queues`):
    without queues a job's queue label would admit nothing, and the GPU quota is all there is."""
    policies = ([gpu_policy(training_namespace, kueue_namespace)] if queues else []) + [service_policy(), priority_policy()]
    return [manifest for policy in policies for manifest in (policy, _binding(policy["metadata"]["name"]))]
