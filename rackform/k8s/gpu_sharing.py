"""GPU sharing per GPU block: whole GPUs, MIG partitions or time-slicing, as data, rendered
into the NVIDIA GPU Operator's configuration (docs/gpu-sharing.md).

The platform file (topologies/platform/<site>.yaml) names a policy per GPU block:

    platform:
      gpu_sharing:
        dgx-h100: {mig: {"1g.10gb": 7}}          # or {"3g.40gb": 2}, or a mix within the GPU's slices
        dgx1: {time_slicing: {replicas: 4}}      # V100: no MIG, time-slicing only
        dgx2: none                               # whole GPUs (the default for a block not named)

What it renders, all from one `GpuSharing`:
  - the device plugin's config ConfigMap, one key per policy (k8s-device-plugin config file, v1);
  - the MIG manager's mig-parted ConfigMap, one MIG config per MIG block plus `all-disabled`;
  - the GPU Operator Helm values that point the operator at both (`gpu_operator_values`);
  - per host, the node labels that pick its policy (`node_labels`);
  - per host, the extended resources it will advertise (`advertised_resources`).

Nothing here has run against a GPU's device plugin or MIG manager: the shapes follow NVIDIA's
documented formats (sources at each fact) and the ConfigMaps are validated with kubernetes-validate
in the unit tests. The H100 80GB and H200 profiles were read (read-only) from nvidia-smi on those GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from rackform.model.schema import BlockType, Gpus
from rackform.model.site import Site
from rackform.model.source import LineDict, Loc, SourceError

Manifest = dict[str, Any]

# ------------------------------------------------------------------ the catalogue


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile: its compute and memory slices and how many fit on one GPU."""

    name: str
    compute_slices: int
    memory_slices: int
    max_instances: int


@dataclass(frozen=True, slots=True)
class MigModel:
    """A MIG-capable GPU model: its slices and the profiles it offers."""

    name: str
    compute_slices: int
    memory_slices: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((profile for profile in self.profiles if profile.name == name), None)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(profile.name for profile in self.profiles)


def _seven_slice_model(name: str, one: str, one_double: str, two: str, three: str, four: str, seven: str) -> MigModel:
    """The layout every 7-compute/8-memory-slice GPU shares (A100, H100, H200): only the memory
    sizes in the names differ. 1g with 1/8 memory x7, 1g with 2/8 x4, 2g x3, 3g x2, 4g x1, 7g x1."""
    return MigModel(name, 7, 8, (
        MigProfile(one, 1, 1, 7),
        MigProfile(one_double, 1, 2, 4),
        MigProfile(two, 2, 2, 3),
        MigProfile(three, 3, 4, 2),
        MigProfile(four, 4, 4, 1),
        MigProfile(seven, 7, 8, 1),
    ))


MIG_MODELS: dict[str, MigModel] = {model.name: model for model in (
    # doc: NVIDIA MIG user guide, supported profiles (A100 table: 1g.5gb 1/8 memory x7, 1g.10gb 2/8 x4,
    # 2g.10gb x3, 3g.20gb 4/8 x2, 4g.20gb x1, 7g.40gb full x1); GPU Operator default-mig-parted-config
    # (assets/state-mig-manager/0400_configmap.yaml) lists the same counts, as recalled.
    _seven_slice_model("A100-40GB", "1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    # doc: same guide: "for A100-SXM4-80GB the names change with the memory: 1g.10gb, 1g.20gb,
    # 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"; the H100 80 GB table has the same profiles.
    # checked (H100-80GB): `nvidia-smi mig -lgip` and `-lgipp` (read-only, MIG mode left disabled)
    # on an NVIDIA H100 80GB HBM3, driver 580.159.04: these names, counts and placements.
    _seven_slice_model("A100-80GB", "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    _seven_slice_model("H100-80GB", "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    # doc: GPU Operator default-mig-parted-config, "H100 NVL" entries (1g.12gb x7, 1g.24gb x4, 2g.24gb x3,
    # 3g.47gb x2, 4g.47gb, 7g.94gb), as recalled.
    _seven_slice_model("H100-94GB", "1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    # doc: same ConfigMap, "H200-141GB" entries (1g.18gb x7, 1g.35gb x4, 2g.35gb x3, 3g.71gb x2,
    # 4g.71gb, 7g.141gb); checked: `nvidia-smi mig -lgip`/`-lgipp` on an NVIDIA H200, driver 580.159.04.
    _seven_slice_model("H200-141GB", "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    # doc: NVIDIA MIG user guide, A30-24GB table: 4 slices; 1g.6gb 1/4 x4, 2g.12gb 2/4 x2, 4g.24gb full x1.
    MigModel("A30-24GB", 4, 4, (
        MigProfile("1g.6gb", 1, 1, 4),
        MigProfile("2g.12gb", 2, 2, 2),
        MigProfile("4g.24gb", 4, 4, 1),
    )),
)}
"""MIG-capable GPU models by `<family>-<memory>GB`, the name a block's `node.gpus` maps to
(`mig_model`). The `+me` (media extension) profiles are left out: one per GPU, for video
decoding, which no block here is sized for."""

NO_MIG_FAMILIES: dict[str, str] = {
    # doc: NVIDIA MIG user guide, supported GPUs: MIG starts with the Ampere A100/A30 (compute
    # capability 8.0); Volta, Pascal, Turing and the Ampere/Ada graphics-class cards are not listed.
    "V100": "Volta", "P100": "Pascal", "T4": "Turing",
    "A10": "Ampere (graphics class)", "A40": "Ampere (graphics class)",
    "L4": "Ada", "L40": "Ada", "L40S": "Ada",
}
"""GPU families known to have no MIG at all: time-slicing is how they are shared."""


def mig_model(gpus: Gpus) -> MigModel | None:
    """The catalogue entry of a block's GPUs: family (`H100` of `H100-SXM5-80GB`) and memory
    (`memory_gb`), so SXM and PCIe cards of one size share an entry; None without MIG."""
    return MIG_MODELS.get(f"{_family(gpus)}-{gpus.memory_gb}GB")


def _family(gpus: Gpus) -> str:
    return gpus.model.split("-", 1)[0].upper()


def _gpus(block: BlockType) -> Gpus | None:
    return block.node.gpus if block.category == "gpu" and block.node is not None else None


# ------------------------------------------------------------------ the policy

NONE, MIG, TIME_SLICING = "none", "mig", "time_slicing"
MODES = (NONE, MIG, TIME_SLICING)
GPU_RESOURCE = "nvidia.com/gpu"
"""Whole GPUs, time-sliced replicas and (with the `single` MIG strategy) MIG devices all
advertise this name; the `mixed` strategy advertises `nvidia.com/mig-<profile>` instead."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

DEVICE_PLUGIN_CONFIG_MAP = "device-plugin-config"
"""Our ConfigMap in the operator's namespace; the operator mounts it into the device plugin
(Helm value devicePlugin.config.name) and each node picks a key by label."""
MIG_PARTED_CONFIG_MAP = "mig-parted-config"
"""Our own, not the operator's `default-mig-parted-config`: that one is the operator's and is
rewritten on upgrade; ours names exactly the layouts this site's blocks get."""
MIG_PARTED_CONFIG_FILE = "config.yaml"
"""The key the MIG manager reads from its ConfigMap (the operator's default ConfigMap uses it too)."""
WHOLE_GPUS_KEY = "whole-gpus"
"""Device plugin config of a GPU block with no policy; also the operator's default key, so a GPU
node that somehow lacks the label gets whole GPUs rather than someone else's sharing."""
MIG_DISABLED_KEY = "all-disabled"
"""The MIG config that turns MIG off; the name the operator's own config uses for it."""
RESERVED_KEYS = (WHOLE_GPUS_KEY, MIG_DISABLED_KEY)
"""A block with a policy gets its own key named after it; these names are taken."""
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
"""The node label the device plugin's config manager reads to pick a key of its ConfigMap."""
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""The node label the MIG manager watches to pick (and apply) a mig-parted config."""


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """How one GPU block's GPUs are shared. Every GPU of a host gets the same policy."""

    block: str
    mode: str = NONE
    """none | mig | time_slicing"""
    mig_devices: tuple[tuple[str, int], ...] = ()
    """(profile, instances per GPU) in the order written; mode mig only."""
    replicas: int = 1
    """Pods per GPU; mode time_slicing only (2 or more)."""
    loc: Loc | None = None
    """The block's line under `gpu_sharing:`; None for a block not named there."""

    @property
    def device_plugin_key(self) -> str:
        """The key of DEVICE_PLUGIN_CONFIG_MAP (and label value) for this block's hosts."""
        return WHOLE_GPUS_KEY if self.mode == NONE else self.block

    @property
    def mig_config_key(self) -> str:
        """The mig-parted config (and label value) for this block's hosts."""
        return self.block if self.mode == MIG else MIG_DISABLED_KEY


@dataclass(frozen=True, slots=True)
class GpuSharing:
    """Every GPU block's policy; a block not named shares nothing (whole GPUs)."""

    policies: tuple[SharingPolicy, ...] = ()
    """Only the blocks named under `gpu_sharing:`, in file order."""
    loc: Loc | None = None
    """The `gpu_sharing:` line; None when the platform file has none."""

    @property
    def enabled(self) -> bool:
        """False when no block is named: nothing is rendered, the operator keeps its defaults."""
        return bool(self.policies)

    def policy(self, block: str) -> SharingPolicy:
        return next((policy for policy in self.policies if policy.block == block), SharingPolicy(block))

    @property
    def mig_strategy(self) -> str:
        """`single` when every MIG block uses one profile (each MIG device is an `nvidia.com/gpu`),
        else `mixed` (one resource per profile). The operator takes one strategy for the cluster."""
        mig = [policy for policy in self.policies if policy.mode == MIG]
        return "mixed" if any(len(policy.mig_devices) > 1 for policy in mig) else "single"


def parse_gpu_sharing(node: Any, site: Site, key_loc: Loc) -> GpuSharing:
    """The `gpu_sharing:` mapping of the platform file (None when absent); SourceError on bad input.

    `key_loc` is the `gpu_sharing:` line, for an error about the mapping as a whole.
    """
    key = "platform.gpu_sharing"
    if node is None:
        return GpuSharing()
    if not isinstance(node, LineDict):
        raise SourceError(key_loc, key, "expected a mapping GPU block: policy "
                                        "(e.g. dgx-h100: {mig: {\"1g.10gb\": 7}} or dgx1: {time_slicing: {replicas: 4}})")
    gpu_blocks = sorted(name for name, block in site.catalog.items() if _gpus(block) is not None)
    policies = []
    for name in node:
        loc, entry_key = node.key_loc(name), f"{key}.{name}"
        block = site.catalog.get(str(name))
        if block is None:
            raise SourceError(loc, entry_key, f"unknown block '{name}'; GPU blocks in the catalog: {', '.join(gpu_blocks)}")
        gpus = _gpus(block)
        if gpus is None:
            raise SourceError(loc, entry_key, f"'{name}' is not a GPU block (category {block.category}); "
                                              f"GPU blocks: {', '.join(gpu_blocks)}")
        if name in RESERVED_KEYS:
            raise SourceError(loc, entry_key, f"a block named '{name}' cannot have a policy: the name is the "
                                              f"operator configuration key {', '.join(RESERVED_KEYS)} use")
        policies.append(_policy(str(name), node[name], loc, entry_key, gpus))
    return GpuSharing(tuple(policies), key_loc)


def _policy(block: str, value: Any, loc: Loc, key: str, gpus: Gpus) -> SharingPolicy:
    if value == NONE:
        return SharingPolicy(block, NONE, loc=loc)
    expected = "expected none, {mig: {profile: count}} or {time_slicing: {replicas: N}}"
    if not isinstance(value, LineDict) or not value:
        raise SourceError(loc, key, f"{value!r}: {expected}")
    unknown = sorted(str(k) for k in value if k not in (MIG, TIME_SLICING))
    if unknown:
        raise SourceError(value.key_loc(unknown[0]), f"{key}.{unknown[0]}", f"unknown key; {expected}")
    if MIG in value and TIME_SLICING in value:
        raise SourceError(value.key_loc(TIME_SLICING), key,
                          "both mig and time_slicing: choose one (a block's GPUs are either partitioned or time-sliced)")
    if MIG in value:
        return SharingPolicy(block, MIG, mig_devices=_mig_devices(value, f"{key}.{MIG}", gpus), loc=loc)
    return SharingPolicy(block, TIME_SLICING, replicas=_replicas(value, f"{key}.{TIME_SLICING}"), loc=loc)


def _mig_devices(value: LineDict, key: str, gpus: Gpus) -> tuple[tuple[str, int], ...]:
    loc = value.key_loc(MIG)
    model = mig_model(gpus)
    if model is None:
        family = _family(gpus)
        if family in NO_MIG_FAMILIES:
            why = f"GPU model {gpus.model} ({NO_MIG_FAMILIES[family]}) has no MIG"
        else:
            why = (f"GPU model {gpus.model} ({gpus.memory_gb} GB) is not a MIG model rackform knows "
                   f"(rackform/k8s/gpu_sharing.py MIG_MODELS: {', '.join(MIG_MODELS)})")
        raise SourceError(loc, key, f"{why}; share its GPUs with time_slicing: {{replicas: N}} instead")
    devices = value[MIG]
    if not isinstance(devices, LineDict) or not devices:
        raise SourceError(loc, key, f"expected a mapping profile: instances per GPU (e.g. \"{model.profiles[0].name}\": "
                                    f"{model.profiles[0].max_instances}); {model.name} profiles: {', '.join(model.profile_names)}")
    layout = []
    for name, count in devices.items():
        at, profile_key = devices.key_loc(name), f"{key}.{name}"
        profile = model.profile(str(name))
        if profile is None:
            raise SourceError(at, profile_key, f"unknown MIG profile '{name}' for {gpus.model} ({model.name}); "
                                               f"valid: {', '.join(model.profile_names)}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise SourceError(at, profile_key, f"{count!r}: expected a whole number of instances per GPU, 1 or more")
        if count > profile.max_instances:
            raise SourceError(at, profile_key, f"{count} x {profile.name}: at most {profile.max_instances} per {model.name} GPU")
        layout.append((profile, count))
    problem = layout_problem(model, layout)
    if problem:
        raise SourceError(loc, key, problem)
    return tuple((profile.name, count) for profile, count in layout)


def layout_problem(model: MigModel, layout: list[tuple[MigProfile, int]]) -> str | None:
    """Why a layout of profiles (each within its per-GPU maximum) does not fit one GPU, else None.

    Sums of compute and memory slices: for the 7/8-slice GPUs this is exactly the set of layouts
    the driver's placements allow (checked over every layout against the placements nvidia-smi
    lists on an H100 80GB and an H200: tests/unit/test_gpu_sharing.py)."""
    for kind, total in (("compute", model.compute_slices), ("memory", model.memory_slices)):
        used = sum(count * (profile.compute_slices if kind == "compute" else profile.memory_slices) for profile, count in layout)
        if used > total:
            parts = " + ".join(f"{profile.name} x{count}" for profile, count in layout)
            return f"{parts} uses {used} of the {total} {kind} slices of one {model.name} GPU"
    return None


def _replicas(value: LineDict, key: str) -> int:
    loc = value.key_loc(TIME_SLICING)
    settings = value[TIME_SLICING]
    if not isinstance(settings, LineDict) or "replicas" not in settings:
        raise SourceError(loc, key, "expected {replicas: N}, N pods sharing each GPU (2 or more)")
    unknown = sorted(str(k) for k in settings if k != "replicas")
    if unknown:
        raise SourceError(settings.key_loc(unknown[0]), f"{key}.{unknown[0]}", "unknown key; expected replicas")
    replicas = settings["replicas"]
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
        raise SourceError(settings.key_loc("replicas"), f"{key}.replicas",
                          f"{replicas!r}: expected a whole number of pods per GPU, 2 or more (1 is no sharing: leave the block out)")
    return replicas


# ------------------------------------------------------------------ rendering

GPU_OPERATOR_NAMESPACE = "gpu-operator"
"""The namespace of topologies/versions.yaml's gpu_operator component; pass the matrix's own."""


def _config_map(name: str, namespace: str, data: dict[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "rackform"}},
            "data": data}


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def device_plugin_configs(sharing: GpuSharing) -> dict[str, dict[str, Any]]:
    """Key -> k8s-device-plugin config file (version v1): `flags.migStrategy` and, for time-slicing,
    `sharing.timeSlicing.resources` (source: NVIDIA/k8s-device-plugin api/config/v1, Config,
    Flags.migStrategy, Sharing.TimeSlicing, ReplicaResource{name, replicas})."""
    configs: dict[str, dict[str, Any]] = {WHOLE_GPUS_KEY: {"version": "v1", "flags": {"migStrategy": "none"}}}
    for policy in sharing.policies:
        if policy.mode == MIG:
            configs[policy.device_plugin_key] = {"version": "v1", "flags": {"migStrategy": sharing.mig_strategy}}
        elif policy.mode == TIME_SLICING:
            configs[policy.device_plugin_key] = {
                "version": "v1", "flags": {"migStrategy": "none"},
                "sharing": {"timeSlicing": {"resources": [{"name": GPU_RESOURCE, "replicas": policy.replicas}]}}}
    return configs


def mig_parted_config(sharing: GpuSharing) -> dict[str, Any]:
    """The mig-parted config file (version v1): `all-disabled` and one config per MIG block, every
    GPU of the host alike (source: NVIDIA/mig-parted config format; the operator's default ConfigMap)."""
    configs: dict[str, Any] = {MIG_DISABLED_KEY: [{"devices": "all", "mig-enabled": False}]}
    for policy in sharing.policies:
        if policy.mode == MIG:
            configs[policy.mig_config_key] = [{"devices": "all", "mig-enabled": True,
                                               "mig-devices": dict(policy.mig_devices)}]
    return {"version": "v1", "mig-configs": configs}


def sharing_manifests(sharing: GpuSharing, namespace: str = GPU_OPERATOR_NAMESPACE) -> list[Manifest]:
    """The two ConfigMaps, in the GPU Operator's namespace; none when no block is named."""
    if not sharing.enabled:
        return []
    plugin = {key: _dump(config) for key, config in device_plugin_configs(sharing).items()}
    return [_config_map(DEVICE_PLUGIN_CONFIG_MAP, namespace, plugin),
            _config_map(MIG_PARTED_CONFIG_MAP, namespace, {MIG_PARTED_CONFIG_FILE: _dump(mig_parted_config(sharing))})]


def gpu_operator_values(sharing: GpuSharing) -> dict[str, Any]:
    """GPU Operator Helm values to merge (`merge_values`) into its others; {} when no block is named.

    devicePlugin.config.{name,default}: the device plugin's ConfigMap and the key of a node without
    the label; mig.strategy: the cluster's one strategy; migManager.config.{name,default}: the
    mig-parted ConfigMap and the config of an unlabelled node (doc: GPU Operator chart values, as recalled).
    """
    if not sharing.enabled:
        return {}
    return {"devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": WHOLE_GPUS_KEY}},
            "mig": {"strategy": sharing.mig_strategy},
            "migManager": {"enabled": True, "config": {"name": MIG_PARTED_CONFIG_MAP, "default": MIG_DISABLED_KEY}}}


def merge_values(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it, mappings merged key by key (as Helm merges values files)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def _gpu_hosts(site: Site):
    for host in sorted(site.hosts.values(), key=lambda h: h.name):
        gpus = _gpus(host.block)
        if gpus is not None:
            yield host, gpus


def node_labels(site: Site, sharing: GpuSharing) -> dict[str, dict[str, str]]:
    """GPU host -> the labels that pick its policy; {} when no block is named. The MIG label only
    on hosts whose GPUs have MIG (the MIG manager runs nowhere else)."""
    if not sharing.enabled:
        return {}
    labels: dict[str, dict[str, str]] = {}
    for host, gpus in _gpu_hosts(site):
        policy = sharing.policy(host.block.name)
        labels[host.name] = {DEVICE_PLUGIN_CONFIG_LABEL: policy.device_plugin_key}
        if mig_model(gpus) is not None:
            labels[host.name][MIG_CONFIG_LABEL] = policy.mig_config_key
    return labels


def advertised_resources(site: Site, sharing: GpuSharing) -> dict[str, dict[str, int]]:
    """GPU host -> the extended resources its kubelet will advertise under the policy:
    whole GPUs `nvidia.com/gpu: gpus`; time-slicing `nvidia.com/gpu: gpus x replicas`; MIG `single`
    `nvidia.com/gpu: gpus x instances`; MIG `mixed` `nvidia.com/mig-<profile>: gpus x instances` each."""
    resources: dict[str, dict[str, int]] = {}
    for host, gpus in _gpu_hosts(site):
        policy = sharing.policy(host.block.name)
        if policy.mode == TIME_SLICING:
            resources[host.name] = {GPU_RESOURCE: gpus.count * policy.replicas}
        elif policy.mode == MIG and sharing.mig_strategy == "single":
            resources[host.name] = {GPU_RESOURCE: gpus.count * sum(count for _, count in policy.mig_devices)}
        elif policy.mode == MIG:
            resources[host.name] = {f"{MIG_RESOURCE_PREFIX}{profile}": gpus.count * count
                                    for profile, count in policy.mig_devices}
        else:
            resources[host.name] = {GPU_RESOURCE: gpus.count}
    return resources
