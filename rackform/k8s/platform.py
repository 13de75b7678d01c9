"""The platform design of a site: topologies/platform/<site>.yaml (optional).

The site schema has no tenants or platform choices, so they live in their own file:

    platform:
      network: rdma_shared | sriov     # how the Network Operator exposes the RoCE NICs
      versions: {gpu_operator: v24.9.1} # overrides of topologies/versions.yaml defaults
      helm_repositories: {nvidia: https://helm-mirror.example.com/nvidia}  # the site's Helm mirror
      releases: [kueue]                 # the Helm releases this site installs (default: all)
      tenants:
        - name: research
          gpus: 8                       # guaranteed: its queue's nominal GPU quota
          borrow: 8                     # GPUs over the guarantee it may borrow while others idle (default: any)
          admins: [alice]
          pod_security: {level: baseline, reason: "..."}   # an exception to `restricted`, with why
          cpu_cores: 140                # its pods' CPU requests at most (default: its share of the GPU servers)
          memory_gb: 2560               # its pods' memory requests at most, GB (default: as cpu_cores)
          pods: 137                     # its pods at most (default: as cpu_cores)
          priority_classes: [batch-high]  # PriorityClasses its pods may name (default: none)
      storage_classes:                  # for a provisioner (CSI driver) the site installs; default none
        - name: nvme-fast
          provisioner: csi.example.com  # the driver's name, as its CSIDriver object has it
          parameters: {transport: rdma} # passed to the driver as they are
          reclaim_policy: Delete        # or Retain (default Delete)
          volume_binding_mode: WaitForFirstConsumer   # (the default) or Immediate
          default: false                # the cluster's default class (at most one)

A site without the file gets the defaults and no tenants. The data sets' volumes need no
class: they are static (rackform/k8s/data_sets.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rackform.k8s.gpu_sharing import GpuSharing, parse_gpu_sharing
from rackform.model.site import Site
from rackform.model.source import LineDict, LineList, Loc, SourceError, display_path, load_yaml

NETWORK_MODES = ("rdma_shared", "sriov")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
KNOWN_KEYS = {"network", "versions", "helm_repositories", "releases", "tenants", "gpu_sharing", "storage_classes"}
TENANT_KEYS = {"name", "gpus", "borrow", "admins", "pod_security", "cpu_cores", "memory_gb", "pods", "priority_classes"}
TENANT_COUNTS = {
    "cpu_cores": "a whole number of CPU cores",
    "memory_gb": "a whole number of GB of memory",
    "pods": "a whole number of pods",
}
"""The tenant keys that bound its namespace's compute (rackform.k8s.tenant_compute) -> what each is."""
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A PriorityClass's name (a DNS subdomain: lower case, 253 characters at most)."""
SYSTEM_PRIORITY_PREFIX = "system-"
"""Kubernetes reserves PriorityClass names starting so for its own critical pods
(system-cluster-critical, system-node-critical), which preempt anything else on a node."""
REMOVED_KEYS = {
    "nfs_export": "removed: it fed a `models-nfs-*` StorageClass for csi-driver-nfs, which rackform never installed; "
                  "serve the folder as a data set (`data_sets:` in the site file: a volume and a claim in the tenant's "
                  "namespace, docs/storage.md), or name a provisioner the site installs under `storage_classes:`",
}
"""Keys a platform file may no longer have -> what to write instead."""
STORAGE_CLASS_KEYS = {"name", "provisioner", "parameters", "reclaim_policy", "volume_binding_mode", "default"}
RECLAIM_POLICIES = ("Delete", "Retain")
BINDING_MODES = ("WaitForFirstConsumer", "Immediate")
CSI_DRIVER_NAME = re.compile(r"^[a-z0-9A-Z]([-a-z0-9A-Z.]{0,61}[a-z0-9A-Z])?$")
"""A CSI driver's name: 63 characters at most, alphanumerics at both ends, `-` and `.` between
(doc: Kubernetes CSIDriver object, as recalled)."""
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
"""Pod Security Standards levels, strictest first (doc: Kubernetes Pod Security Standards)."""
DEFAULT_POD_SECURITY = "restricted"
REPOSITORY_SCHEMES = ("https://", "http://")
"""What `helm --repo` and Pulumi's repository_opts accept: a classic chart repository URL."""


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    gpus: int
    """Guaranteed GPUs: the nominal quota of the tenant's queue."""
    admins: tuple[str, ...]
    loc: Loc
    borrow: int | None = None
    """GPUs over the guarantee the tenant may borrow from idle quota; None: as many as the site has."""
    pod_security: str = DEFAULT_POD_SECURITY
    """The Pod Security Standards level enforced in its namespace."""
    pod_security_reason: str | None = None
    """Why the design loosened `pod_security` (required for anything but restricted)."""
    cpu_cores: int | None = None
    """CPU its pods may request in all; None: its share of the GPU servers (rackform.k8s.tenant_compute)."""
    memory_gb: int | None = None
    """Memory its pods may request in all, GB; None: its share, as cpu_cores."""
    pods: int | None = None
    """Pods it may have at once; None: its share, as cpu_cores."""
    priority_classes: tuple[str, ...] = ()
    """The PriorityClasses its pods may name; a pod naming any other is refused (rackform.k8s.tenant_admission)."""


@dataclass(frozen=True, slots=True)
class StorageClass:
    """A StorageClass the design names, for a provisioner the site installs itself."""

    name: str
    provisioner: str
    loc: Loc
    parameters: dict[str, str] = field(default_factory=dict)
    reclaim_policy: str = "Delete"
    volume_binding_mode: str = "WaitForFirstConsumer"
    default: bool = False


@dataclass(frozen=True, slots=True)
class PlatformDesign:
    network: str = "rdma_shared"
    versions: dict[str, str] = field(default_factory=dict)
    version_locs: dict[str, Loc] = field(default_factory=dict)
    helm_repositories: dict[str, str] = field(default_factory=dict)
    """Chart repository alias (the `nvidia` of `nvidia/gpu-operator`) -> the site's mirror URL."""
    releases: tuple[str, ...] | None = None
    """The platform components whose Helm releases this site installs; None: every one."""
    releases_loc: Loc | None = None
    tenants: tuple[Tenant, ...] = ()
    gpu_sharing: GpuSharing = field(default_factory=GpuSharing)
    """How each GPU block's GPUs are shared (MIG or time-slicing; whole GPUs by default)."""
    storage_classes: tuple[StorageClass, ...] = ()
    """StorageClasses for provisioners the design names; none by default (the data sets' volumes are static)."""
    storage_classes_loc: Loc | None = None
    loc: Loc | None = None
    """The file's `platform:` line; None when the site has no platform file."""


def platform_path(site: Site) -> Path:
    """topologies/platform/<site>.yaml next to the site's topologies/sites/<site>.yaml."""
    return site.site_path.parent.parent / "platform" / f"{site.name}.yaml"


def load_platform(site: Site) -> PlatformDesign:
    """The site's platform design, or the defaults when it has no file; SourceError on bad input."""
    path = platform_path(site)
    if not path.exists():
        return PlatformDesign()
    shown = display_path(path, site.site_path.parent.parent.parent)
    data = load_yaml(path, shown_as=shown)
    block = data.get("platform") if isinstance(data, LineDict) else None
    if not isinstance(block, LineDict):
        raise SourceError(Loc(shown, 1), "platform", "expected a mapping under `platform:`")
    removed = sorted(set(block) & set(REMOVED_KEYS))
    if removed:
        raise SourceError(block.key_loc(removed[0]), f"platform.{removed[0]}", REMOVED_KEYS[removed[0]])
    unknown = sorted(set(block) - KNOWN_KEYS)
    if unknown:
        raise SourceError(block.key_loc(unknown[0]), f"platform.{unknown[0]}",
                          f"unknown key; expected one of {', '.join(sorted(KNOWN_KEYS))}")
    network = str(block.get("network", "rdma_shared"))
    if network not in NETWORK_MODES:
        raise SourceError(block.key_loc("network"), "platform.network", f"'{network}': expected one of {', '.join(NETWORK_MODES)}")
    versions = block.get("versions") or LineDict()
    if not isinstance(versions, LineDict):
        raise SourceError(block.key_loc("versions"), "platform.versions", "expected a mapping component: release")
    tenants = block.get("tenants") or LineList()
    if not isinstance(tenants, LineList):
        raise SourceError(block.key_loc("tenants"), "platform.tenants", "expected a list")
    repositories = _repositories(block)
    releases = block.get("releases")
    if releases is not None and (not isinstance(releases, LineList) or not all(isinstance(r, str) for r in releases)):
        raise SourceError(block.key_loc("releases"), "platform.releases",
                          "expected a list of platform components, e.g. [kueue, kube_prometheus_stack]")
    return PlatformDesign(
        network=network,
        versions={str(k): str(v) for k, v in versions.items()},
        version_locs={str(k): versions.key_loc(k) for k in versions},
        helm_repositories=repositories,
        releases=None if releases is None else tuple(str(r) for r in releases),
        releases_loc=block.key_loc("releases") if releases is not None else None,
        tenants=tuple(_tenant(tenants, index) for index in range(len(tenants))),
        gpu_sharing=parse_gpu_sharing(block.get("gpu_sharing"), site, block.key_loc("gpu_sharing")),
        storage_classes=_storage_classes(block),
        storage_classes_loc=block.key_loc("storage_classes") if "storage_classes" in block else None,
        loc=data.key_loc("platform"),
    )


def _storage_classes(block: LineDict) -> tuple[StorageClass, ...]:
    entries = block.get("storage_classes") or LineList()
    if not isinstance(entries, LineList):
        raise SourceError(block.key_loc("storage_classes"), "platform.storage_classes",
                          "expected a list of {name, provisioner, parameters}")
    classes = tuple(_storage_class(entries, index) for index in range(len(entries)))
    seen: set[str] = set()
    for index, storage_class in enumerate(classes):
        if storage_class.name in seen:
            raise SourceError(storage_class.loc, f"platform.storage_classes[{index}].name",
                              f"'{storage_class.name}' is named twice: a StorageClass name is unique in the cluster")
        seen.add(storage_class.name)
    defaults = [c for c in classes if c.default]
    if len(defaults) > 1:
        raise SourceError(defaults[1].loc, "platform.storage_classes",
                          f"{', '.join(c.name for c in defaults)} are all `default: true`: a cluster has one default class")
    return classes


def _storage_class(entries: LineList, index: int) -> StorageClass:
    entry, loc, key = entries[index], entries.item_loc(index), f"platform.storage_classes[{index}]"
    if not isinstance(entry, LineDict) or "name" not in entry or "provisioner" not in entry:
        raise SourceError(loc, key, "expected a mapping with name and provisioner (and parameters)")
    unknown = sorted(set(entry) - STORAGE_CLASS_KEYS)
    if unknown:
        raise SourceError(entry.key_loc(unknown[0]), f"{key}.{unknown[0]}",
                          f"unknown key; expected one of {', '.join(sorted(STORAGE_CLASS_KEYS))}")
    name, provisioner = str(entry["name"]), str(entry["provisioner"])
    if not DNS_LABEL.match(name):
        raise SourceError(entry.key_loc("name"), f"{key}.name", f"'{name}' is not a StorageClass name (lower-case DNS label)")
    if not CSI_DRIVER_NAME.match(provisioner):
        raise SourceError(entry.key_loc("provisioner"), f"{key}.provisioner",
                          f"'{provisioner}' is not a provisioner name: expected the CSI driver's name, e.g. "
                          f"nfs.csi.k8s.io (63 characters at most: letters, digits, '-' and '.')")
    parameters = entry.get("parameters") or LineDict()
    if not isinstance(parameters, LineDict):
        raise SourceError(entry.key_loc("parameters"), f"{key}.parameters", "expected a mapping name: value")
    for name_, value in parameters.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SourceError(parameters.key_loc(name_), f"{key}.parameters.{name_}",
                              f"{value!r}: a StorageClass parameter is a string: quote it")
    choices = {"reclaim_policy": RECLAIM_POLICIES, "volume_binding_mode": BINDING_MODES}
    for field_name, allowed in choices.items():
        if field_name in entry and entry[field_name] not in allowed:
            raise SourceError(entry.key_loc(field_name), f"{key}.{field_name}",
                              f"{entry[field_name]!r}: expected one of {', '.join(allowed)}")
    default = entry.get("default", False)
    if not isinstance(default, bool):
        raise SourceError(entry.key_loc("default"), f"{key}.default", f"{default!r}: expected true or false")
    return StorageClass(
        name=name, provisioner=provisioner, loc=loc,
        parameters={str(k): str(v) for k, v in parameters.items()},
        reclaim_policy=str(entry.get("reclaim_policy", RECLAIM_POLICIES[0])),
        volume_binding_mode=str(entry.get("volume_binding_mode", BINDING_MODES[0])),
        default=default,
    )


def _repositories(block: LineDict) -> dict[str, str]:
    repositories = block.get("helm_repositories") or LineDict()
    if not isinstance(repositories, LineDict):
        raise SourceError(block.key_loc("helm_repositories"), "platform.helm_repositories",
                          "expected a mapping alias: URL (e.g. nvidia: https://helm-mirror.example.com/nvidia)")
    for alias, url in repositories.items():
        if not isinstance(url, str) or not url.startswith(REPOSITORY_SCHEMES):
            raise SourceError(repositories.key_loc(alias), f"platform.helm_repositories.{alias}",
                              f"{url!r}: expected a chart repository URL starting with {' or '.join(REPOSITORY_SCHEMES)}")
    return {str(alias): str(url).rstrip("/") for alias, url in repositories.items()}


def _tenant(tenants: LineList, index: int) -> Tenant:
    entry, loc = tenants[index], tenants.item_loc(index)
    key = f"platform.tenants[{index}]"
    if not isinstance(entry, LineDict) or "name" not in entry:
        raise SourceError(loc, key, "expected a mapping with name, gpus, admins")
    unknown = sorted(set(entry) - TENANT_KEYS)
    if unknown:
        raise SourceError(entry.key_loc(unknown[0]), f"{key}.{unknown[0]}",
                          f"unknown key; expected one of {', '.join(sorted(TENANT_KEYS))}")
    name = str(entry["name"])
    if not DNS_LABEL.match(name):
        raise SourceError(loc, f"{key}.name", f"'{name}' is not a Kubernetes namespace name (lower-case DNS label)")
    gpus = entry.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise SourceError(loc, f"{key}.gpus", f"{gpus!r}: expected a whole number of GPUs, 0 or more")
    borrow = entry.get("borrow")
    if borrow is not None and (not isinstance(borrow, int) or isinstance(borrow, bool) or borrow < 0):
        raise SourceError(entry.key_loc("borrow"), f"{key}.borrow",
                          f"{borrow!r}: expected a whole number of GPUs the tenant may borrow, 0 or more")
    admins = entry.get("admins") or []
    if not isinstance(admins, list):
        raise SourceError(loc, f"{key}.admins", "expected a list of user names")
    level, reason = _pod_security(entry, key)
    counts = {field_name: _count(entry, key, field_name) for field_name in TENANT_COUNTS}
    return Tenant(name, gpus, tuple(str(a) for a in admins), loc, borrow, level, reason,
                  priority_classes=_priority_classes(entry, key), **counts)


def _count(entry: LineDict, key: str, field_name: str) -> int | None:
    """A compute bound of the tenant (cpu_cores, memory_gb, pods): a whole number, 1 or more; None when absent."""
    if field_name not in entry:
        return None
    value = entry[field_name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SourceError(entry.key_loc(field_name), f"{key}.{field_name}",
                          f"{value!r}: expected {TENANT_COUNTS[field_name]}, 1 or more (leave it out for the "
                          f"tenant's share of the GPU servers)")
    return value


def _priority_classes(entry: LineDict, key: str) -> tuple[str, ...]:
    """The PriorityClasses the tenant's pods may name: names, none of the system's own."""
    if "priority_classes" not in entry:
        return ()
    names, loc = entry["priority_classes"], entry.key_loc("priority_classes")
    if not isinstance(names, LineList):
        raise SourceError(loc, f"{key}.priority_classes", "expected a list of PriorityClass names, e.g. [batch-high]")
    for index, name in enumerate(names):
        where = names.item_loc(index)
        if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name):
            raise SourceError(where, f"{key}.priority_classes[{index}]",
                              f"{name!r} is not a PriorityClass name (lower-case DNS subdomain)")
        if name.startswith(SYSTEM_PRIORITY_PREFIX):
            raise SourceError(where, f"{key}.priority_classes[{index}]",
                              f"'{name}': names starting with `{SYSTEM_PRIORITY_PREFIX}` are the cluster's own "
                              f"critical classes, whose pods preempt any other tenant's on a node; name a class "
                              f"the site defines for tenants")
    return tuple(names)


def _pod_security(entry: LineDict, key: str) -> tuple[str, str | None]:
    """The tenant's Pod Security level and, for an exception to `restricted`, its reason."""
    if "pod_security" not in entry:
        return DEFAULT_POD_SECURITY, None
    block, loc = entry["pod_security"], entry.key_loc("pod_security")
    if not isinstance(block, LineDict):
        raise SourceError(loc, f"{key}.pod_security", "expected a mapping {level: baseline, reason: why}")
    level = str(block.get("level", DEFAULT_POD_SECURITY))
    if level not in POD_SECURITY_LEVELS:
        raise SourceError(loc, f"{key}.pod_security.level",
                          f"'{level}': expected one of {', '.join(POD_SECURITY_LEVELS)}")
    reason = block.get("reason")
    if level != DEFAULT_POD_SECURITY and not (isinstance(reason, str) and reason.strip()):
        raise SourceError(loc, f"{key}.pod_security.reason",
                          f"an exception to `{DEFAULT_POD_SECURITY}` ({level}) needs a reason: say why the tenant's "
                          f"pods need it")
    return level, str(reason).strip() if isinstance(reason, str) else None
