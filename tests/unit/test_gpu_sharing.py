"""GPU sharing per block (rackform/k8s/gpu_sharing.py): the platform file's `gpu_sharing:` is
parsed with file:line on every mistake, rendered into the device plugin's and the MIG manager's
ConfigMaps (exact shapes, kubernetes-validate --strict), the GPU Operator's Helm values, node
labels, and the resources each host will advertise. No device plugin or MIG manager ran any of
it; the H100 80GB and H200 profile facts were read (read-only) from nvidia-smi on those GPUs."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from platform_validation import problems

from rackform.k8s.gpu_sharing import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    DEVICE_PLUGIN_CONFIG_MAP,
    MIG_CONFIG_LABEL,
    MIG_MODELS,
    MIG_PARTED_CONFIG_FILE,
    MIG_PARTED_CONFIG_MAP,
    NO_MIG_FAMILIES,
    GpuSharing,
    SharingPolicy,
    advertised_resources,
    device_plugin_configs,
    gpu_operator_values,
    layout_problem,
    merge_values,
    mig_model,
    mig_parted_config,
    node_labels,
    parse_gpu_sharing,
    sharing_manifests,
)
from rackform.model.loader import load_catalog, load_site
from rackform.model.schema import Gpus
from rackform.model.source import Loc, SourceError, load_yaml

REPO = Path(__file__).resolve().parents[2]
SHOWN = "topologies/platform/lab.yaml"
H100_PROFILES = "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
GPU_BLOCKS = "dgx-h100, dgx1, dgx2, vgpu"
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
"""Kubernetes label values: 63 characters at most, alphanumeric at both ends."""
CONFIG_MAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


@pytest.fixture(scope="module")
def lab():
    return load_site("lab", REPO)


@pytest.fixture(scope="module")
def reference():
    return load_site("reference", REPO)


def parse(tmp_path: Path, site, body: str) -> GpuSharing:
    """`body` (lines under `gpu_sharing:`, indented 4) parsed as the platform file would be."""
    path = tmp_path / "platform.yaml"
    path.write_text(f"platform:\n  gpu_sharing:\n{body}", encoding="utf-8")
    block = load_yaml(path, shown_as=SHOWN)["platform"]
    return parse_gpu_sharing(block.get("gpu_sharing"), site, block.key_loc("gpu_sharing"))


# ------------------------------------------------------------------ parsing: good


def test_no_gpu_sharing_is_whole_gpus_and_renders_nothing(lab):
    sharing = parse_gpu_sharing(None, lab, Loc(SHOWN, 1))

    assert sharing == GpuSharing()
    assert not sharing.enabled
    assert sharing.policy("dgx-h100") == SharingPolicy("dgx-h100")
    assert sharing_manifests(sharing) == [] and gpu_operator_values(sharing) == {} and node_labels(lab, sharing) == {}
    assert advertised_resources(lab, sharing) == {"gpu-1": {"nvidia.com/gpu": 8}, "gpu-2": {"nvidia.com/gpu": 8}}


def test_mig_policy_with_its_line(tmp_path, lab):
    sharing = parse(tmp_path, lab, '    dgx-h100: {mig: {"1g.10gb": 7}}\n')

    assert sharing.policies == (SharingPolicy("dgx-h100", "mig", (("1g.10gb", 7),), loc=Loc(SHOWN, 3)),)
    assert sharing.loc == Loc(SHOWN, 2)
    assert sharing.mig_strategy == "single"


def test_time_slicing_and_explicit_none(tmp_path, reference):
    sharing = parse(tmp_path, reference, "    dgx2: {time_slicing: {replicas: 4}}\n    vgpu: none\n")

    assert sharing.policy("dgx2") == SharingPolicy("dgx2", "time_slicing", replicas=4, loc=Loc(SHOWN, 3))
    assert sharing.policy("vgpu") == SharingPolicy("vgpu", "none", loc=Loc(SHOWN, 4))
    assert sharing.policy("dgx1") == SharingPolicy("dgx1")  # not named: whole GPUs


@pytest.mark.parametrize("layout", [
    {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},   # the operator's all-balanced for 80 GB parts
    {"4g.40gb": 1, "3g.40gb": 1},
    {"3g.40gb": 2},
    {"1g.20gb": 4},
    {"2g.20gb": 3, "1g.10gb": 1},
    {"7g.80gb": 1},
])
def test_layouts_within_the_slices_are_accepted(tmp_path, lab, layout):
    body = "    dgx-h100:\n      mig:\n" + "".join(f'        "{name}": {count}\n' for name, count in layout.items())

    sharing = parse(tmp_path, lab, body)

    assert sharing.policy("dgx-h100").mig_devices == tuple(layout.items())
    assert sharing.mig_strategy == ("single" if len(layout) == 1 else "mixed")


# ------------------------------------------------------------------ parsing: every mistake, with file:line


BAD = [
    pytest.param("    - dgx-h100\n", 2, "platform.gpu_sharing", "expected a mapping GPU block: policy", id="not-a-mapping"),
    pytest.param("    dgx-a100: {mig: {\"1g.5gb\": 7}}\n", 3, "platform.gpu_sharing.dgx-a100",
                 f"unknown block 'dgx-a100'; GPU blocks in the catalog: {GPU_BLOCKS}", id="unknown-block"),
    pytest.param("    hci: {time_slicing: {replicas: 2}}\n", 3, "platform.gpu_sharing.hci",
                 f"'hci' is not a GPU block (category hci); GPU blocks: {GPU_BLOCKS}", id="not-a-gpu-block"),
    pytest.param("    dgx1:\n      mig: {\"1g.10gb\": 7}\n", 4, "platform.gpu_sharing.dgx1.mig",
                 "GPU model V100-SXM2-16GB (Volta) has no MIG; share its GPUs with time_slicing: {replicas: N} instead",
                 id="mig-on-v100"),
    pytest.param("    dgx-h100:\n      mig:\n        \"1g.5gb\": 7\n", 5, "platform.gpu_sharing.dgx-h100.mig.1g.5gb",
                 f"unknown MIG profile '1g.5gb' for H100-SXM5-80GB (H100-80GB); valid: {H100_PROFILES}",
                 id="unknown-profile"),
    pytest.param("    dgx-h100:\n      mig:\n        \"4g.40gb\": 1\n        \"2g.20gb\": 2\n", 4,
                 "platform.gpu_sharing.dgx-h100.mig",
                 "4g.40gb x1 + 2g.20gb x2 uses 8 of the 7 compute slices of one H100-80GB GPU", id="over-compute-slices"),
    pytest.param("    dgx-h100:\n      mig:\n        \"3g.40gb\": 2\n        \"1g.10gb\": 1\n", 4,
                 "platform.gpu_sharing.dgx-h100.mig",
                 "3g.40gb x2 + 1g.10gb x1 uses 9 of the 8 memory slices of one H100-80GB GPU", id="over-memory-slices"),
    pytest.param("    dgx-h100:\n      mig:\n        \"1g.10gb\": 8\n", 5, "platform.gpu_sharing.dgx-h100.mig.1g.10gb",
                 "8 x 1g.10gb: at most 7 per H100-80GB GPU", id="too-many-instances"),
    pytest.param("    dgx-h100:\n      mig:\n        \"1g.10gb\": \"7\"\n", 5, "platform.gpu_sharing.dgx-h100.mig.1g.10gb",
                 "'7': expected a whole number of instances per GPU, 1 or more", id="count-not-an-int"),
    pytest.param("    dgx-h100:\n      mig:\n        \"1g.10gb\": 0\n", 5, "platform.gpu_sharing.dgx-h100.mig.1g.10gb",
                 "0: expected a whole number of instances per GPU, 1 or more", id="count-zero"),
    pytest.param("    dgx-h100:\n      mig: {}\n", 4, "platform.gpu_sharing.dgx-h100.mig",
                 "expected a mapping profile: instances per GPU", id="mig-empty"),
    pytest.param("    dgx1:\n      time_slicing:\n        replicas: 1\n", 5, "platform.gpu_sharing.dgx1.time_slicing.replicas",
                 "1: expected a whole number of pods per GPU, 2 or more", id="replicas-one"),
    pytest.param("    dgx1:\n      time_slicing:\n        replicas: \"4\"\n", 5,
                 "platform.gpu_sharing.dgx1.time_slicing.replicas", "'4': expected a whole number", id="replicas-a-string"),
    pytest.param("    dgx1:\n      time_slicing:\n        replicas: 2.5\n", 5,
                 "platform.gpu_sharing.dgx1.time_slicing.replicas", "2.5: expected a whole number", id="replicas-a-float"),
    pytest.param("    dgx1:\n      time_slicing:\n        replicas: true\n", 5,
                 "platform.gpu_sharing.dgx1.time_slicing.replicas", "True: expected a whole number", id="replicas-a-bool"),
    pytest.param("    dgx1:\n      time_slicing: 4\n", 4, "platform.gpu_sharing.dgx1.time_slicing",
                 "expected {replicas: N}", id="time-slicing-not-a-mapping"),
    pytest.param("    dgx1:\n      time_slicing:\n        replicas: 4\n        rename: shared\n", 6,
                 "platform.gpu_sharing.dgx1.time_slicing.rename", "unknown key; expected replicas", id="time-slicing-unknown-key"),
    pytest.param("    dgx-h100:\n      mig: {\"1g.10gb\": 7}\n      time_slicing: {replicas: 2}\n", 5,
                 "platform.gpu_sharing.dgx-h100", "both mig and time_slicing: choose one", id="both"),
    pytest.param("    dgx1:\n      mps: {replicas: 2}\n", 4, "platform.gpu_sharing.dgx1.mps",
                 "unknown key; expected none, {mig: {profile: count}} or {time_slicing: {replicas: N}}", id="unknown-mode"),
    pytest.param("    dgx1: {}\n", 3, "platform.gpu_sharing.dgx1", "{}: expected none, {mig:", id="empty-policy"),
    pytest.param("    dgx1:\n", 3, "platform.gpu_sharing.dgx1", "None: expected none, {mig:", id="null-policy"),
    pytest.param("    dgx1: shared\n", 3, "platform.gpu_sharing.dgx1", "'shared': expected none, {mig:", id="scalar-policy"),
]


@pytest.mark.parametrize(("body", "line", "key", "message"), BAD)
def test_every_mistake_is_refused_with_file_line_and_key(tmp_path, lab, body, line, key, message):
    with pytest.raises(SourceError) as raised:
        parse(tmp_path, lab, body)

    assert str(raised.value).startswith(f"{SHOWN}:{line}: {key}: {message}"), str(raised.value)


def test_mig_on_a_model_outside_the_catalogue_names_the_catalogue(tmp_path, lab):
    block = lab.catalog["dgx-h100"]
    b200 = block.model_copy(update={"name": "dgx-b200", "node": block.node.model_copy(
        update={"gpus": Gpus(count=8, model="B200-SXM-180GB", memory_gb=180)})})
    site = replace(lab, catalog={**lab.catalog, "dgx-b200": b200})

    with pytest.raises(SourceError) as raised:
        parse(tmp_path, site, '    dgx-b200:\n      mig: {"1g.23gb": 7}\n')

    assert str(raised.value).startswith(
        f"{SHOWN}:4: platform.gpu_sharing.dgx-b200.mig: GPU model B200-SXM-180GB (180 GB) is not a MIG model rackform knows "
        f"(rackform/k8s/gpu_sharing.py MIG_MODELS: {', '.join(MIG_MODELS)}); share its GPUs with time_slicing")


def test_a_block_named_like_a_reserved_key_is_refused(tmp_path, lab):
    block = lab.catalog["dgx1"]
    site = replace(lab, catalog={**lab.catalog, "all-disabled": block.model_copy(update={"name": "all-disabled"})})

    with pytest.raises(SourceError, match=rf"^{SHOWN}:3: platform.gpu_sharing.all-disabled: a block named"):
        parse(tmp_path, site, "    all-disabled: {time_slicing: {replicas: 2}}\n")


# ------------------------------------------------------------------ the catalogue


def test_every_gpu_block_is_either_a_mig_model_or_a_known_non_mig_family():
    catalog = load_catalog(REPO / "topologies" / "blocks")
    for block in catalog.values():
        if block.category != "gpu":
            continue
        gpus = block.node.gpus
        assert mig_model(gpus) is not None or gpus.model.split("-")[0] in NO_MIG_FAMILIES, block.name
    assert mig_model(catalog["dgx-h100"].node.gpus).name == "H100-80GB"
    assert mig_model(catalog["dgx2"].node.gpus) is None


@pytest.mark.parametrize(("model", "memory", "expected"), [
    ("A100-SXM4-40GB", 40, "A100-40GB"), ("A100-PCIE-80GB", 80, "A100-80GB"), ("H100-PCIE-80GB", 80, "H100-80GB"),
    ("H100-NVL-94GB", 94, "H100-94GB"), ("H200-SXM5-141GB", 141, "H200-141GB"), ("A30-PCIE-24GB", 24, "A30-24GB"),
    ("V100-SXM2-16GB", 16, None), ("H100-SXM5-80GB", 96, None),
])
def test_a_gpu_maps_to_its_catalogue_entry_by_family_and_memory(model, memory, expected):
    found = mig_model(Gpus(count=8, model=model, memory_gb=memory))
    assert (found.name if found else None) == expected


@pytest.mark.parametrize("model", list(MIG_MODELS.values()), ids=list(MIG_MODELS))
def test_catalogue_is_consistent(model):
    """Each profile alone, at its documented instance count, fits the GPU's slices; the largest
    profile takes the whole GPU; the profile names carry the model's memory at full size."""
    for profile in model.profiles:
        assert profile.max_instances * profile.compute_slices <= model.compute_slices, profile
        assert profile.max_instances * profile.memory_slices <= model.memory_slices, profile
    whole = model.profiles[-1]
    assert (whole.compute_slices, whole.memory_slices, whole.max_instances) == (model.compute_slices, model.memory_slices, 1)
    assert whole.name.endswith(model.name.split("-")[1].lower())


MEASURED_PLACEMENTS = {
    # `nvidia-smi mig -lgip` and `-lgipp`, read-only (MIG mode disabled, nothing created), driver
    # 580.159.04: profile -> (instances total, start memory slices, size in memory slices).
    # Both GPUs list the same placements; only the memory in the names differs.
    "H100-80GB": {"1g.10gb": (7, (0, 1, 2, 3, 4, 5, 6), 1), "1g.20gb": (4, (0, 2, 4, 6), 2),
                  "2g.20gb": (3, (0, 2, 4), 2), "3g.40gb": (2, (0, 4), 4), "4g.40gb": (1, (0,), 4),
                  "7g.80gb": (1, (0,), 8)},                      # NVIDIA H100 80GB HBM3
    "H200-141GB": {"1g.18gb": (7, (0, 1, 2, 3, 4, 5, 6), 1), "1g.35gb": (4, (0, 2, 4, 6), 2),
                   "2g.35gb": (3, (0, 2, 4), 2), "3g.71gb": (2, (0, 4), 4), "4g.71gb": (1, (0,), 4),
                   "7g.141gb": (1, (0,), 8)},                    # NVIDIA H200
}


def placeable(placements: dict, layout: dict[str, int]) -> bool:
    """Whether the driver could place every instance: disjoint memory-slice spans at listed starts."""
    items = sorted((name for name, count in layout.items() for _ in range(count)), key=lambda n: -placements[n][2])

    def place(index: int, used: frozenset) -> bool:
        if index == len(items):
            return True
        _, starts, size = placements[items[index]]
        return any(not (span := frozenset(range(start, start + size))) & used and place(index + 1, used | span)
                   for start in starts)
    return place(0, frozenset())


@pytest.mark.parametrize("model_name", list(MEASURED_PLACEMENTS))
def test_catalogue_matches_what_nvidia_smi_lists(model_name):
    model, measured = MIG_MODELS[model_name], MEASURED_PLACEMENTS[model_name]

    assert model.profile_names == tuple(measured)
    for profile in model.profiles:
        assert (profile.max_instances, profile.memory_slices) == (measured[profile.name][0], measured[profile.name][2])


@pytest.mark.parametrize("model_name", list(MEASURED_PLACEMENTS))
def test_slice_sums_accept_exactly_the_placeable_layouts(model_name):
    """Every layout of up to 9 instances: the parser's rule (per-profile maximum, then the slice
    sums) accepts it exactly when the listed placements can hold it."""
    model, measured = MIG_MODELS[model_name], MEASURED_PLACEMENTS[model_name]
    disagreements, tried = [], 0
    for counts in itertools.product(range(9), repeat=len(model.profiles)):
        if not 0 < sum(counts) <= 9:
            continue
        layout = [(profile, count) for profile, count in zip(model.profiles, counts) if count]
        accepted = all(count <= profile.max_instances for profile, count in layout) and layout_problem(model, layout) is None
        tried += 1
        if accepted != placeable(measured, {profile.name: count for profile, count in layout}):
            disagreements.append(layout)
    assert tried > 4000 and disagreements == []


# ------------------------------------------------------------------ rendering: exact shapes


@pytest.fixture()
def mixed(tmp_path, reference):
    """dgx-h100 in a balanced MIG layout (mixed strategy) and the reference's V100s time-sliced."""
    return parse(tmp_path, reference, '    dgx-h100: {mig: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}\n'
                                      "    dgx2: {time_slicing: {replicas: 4}}\n")


def test_device_plugin_config_map(mixed):
    plugin = sharing_manifests(mixed, "gpu-operator")[0]

    assert {k: v for k, v in plugin.items() if k != "data"} == {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIG_MAP, "namespace": "gpu-operator",
                     "labels": {"app.kubernetes.io/managed-by": "rackform"}}}
    assert {key: yaml.safe_load(text) for key, text in plugin["data"].items()} == {
        "whole-gpus": {"version": "v1", "flags": {"migStrategy": "none"}},
        "dgx-h100": {"version": "v1", "flags": {"migStrategy": "mixed"}},
        "dgx2": {"version": "v1", "flags": {"migStrategy": "none"},
                 "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
    }
    assert device_plugin_configs(mixed) == {key: yaml.safe_load(text) for key, text in plugin["data"].items()}


def test_mig_parted_config_map(mixed):
    mig = sharing_manifests(mixed, "gpu-operator")[1]

    assert mig["metadata"]["name"] == MIG_PARTED_CONFIG_MAP and list(mig["data"]) == [MIG_PARTED_CONFIG_FILE]
    assert yaml.safe_load(mig["data"][MIG_PARTED_CONFIG_FILE]) == mig_parted_config(mixed) == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "dgx-h100": [{"devices": "all", "mig-enabled": True,
                          "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
        },
    }


def test_gpu_operator_values_merge_over_the_others(mixed):
    values = gpu_operator_values(mixed)
    base = {"devicePlugin": {"enabled": True}, "driver": {"enabled": True}}

    assert values == {
        "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": "whole-gpus"}},
        "mig": {"strategy": "mixed"},
        "migManager": {"enabled": True, "config": {"name": MIG_PARTED_CONFIG_MAP, "default": "all-disabled"}},
    }
    assert merge_values(base, values)["devicePlugin"] == {
        "enabled": True, "config": {"name": DEVICE_PLUGIN_CONFIG_MAP, "default": "whole-gpus"}}
    assert merge_values(base, values)["driver"] == {"enabled": True}
    assert base == {"devicePlugin": {"enabled": True}, "driver": {"enabled": True}}  # not changed in place


def test_single_strategy_when_every_mig_block_has_one_profile(tmp_path, lab):
    sharing = parse(tmp_path, lab, '    dgx-h100: {mig: {"3g.40gb": 2}}\n')

    assert gpu_operator_values(sharing)["mig"] == {"strategy": "single"}
    assert device_plugin_configs(sharing)["dgx-h100"] == {"version": "v1", "flags": {"migStrategy": "single"}}


def test_node_labels_pick_each_hosts_policy(tmp_path, lab, reference, mixed):
    on_lab = parse(tmp_path, lab, '    dgx-h100: {mig: {"1g.10gb": 7}}\n')

    assert node_labels(lab, on_lab) == {
        "gpu-1": {DEVICE_PLUGIN_CONFIG_LABEL: "dgx-h100", MIG_CONFIG_LABEL: "dgx-h100"},
        "gpu-2": {DEVICE_PLUGIN_CONFIG_LABEL: "dgx-h100", MIG_CONFIG_LABEL: "dgx-h100"},
    }
    # V100s: no MIG manager there, so no MIG label; a block not named gets whole GPUs.
    assert node_labels(reference, mixed) == {
        "dgx2-1": {DEVICE_PLUGIN_CONFIG_LABEL: "dgx2"},
        "dgx2-2": {DEVICE_PLUGIN_CONFIG_LABEL: "dgx2"},
        "vgpu-1": {DEVICE_PLUGIN_CONFIG_LABEL: "whole-gpus"},
    }


def test_a_time_sliced_mig_capable_host_gets_mig_disabled(tmp_path, lab):
    sharing = parse(tmp_path, lab, "    dgx-h100: {time_slicing: {replicas: 2}}\n")

    assert node_labels(lab, sharing)["gpu-1"] == {DEVICE_PLUGIN_CONFIG_LABEL: "dgx-h100", MIG_CONFIG_LABEL: "all-disabled"}
    assert advertised_resources(lab, sharing)["gpu-1"] == {"nvidia.com/gpu": 16}


def test_every_label_value_and_config_key_is_valid(mixed, reference):
    for labels in node_labels(reference, mixed).values():
        assert all(len(value) <= 63 and LABEL_VALUE.match(value) for value in labels.values()), labels
    for manifest in sharing_manifests(mixed):
        assert all(CONFIG_MAP_KEY.match(key) for key in manifest["data"]), manifest["data"]
    for key in mig_parted_config(mixed)["mig-configs"]:
        assert len(key) <= 63 and LABEL_VALUE.match(key)


# ------------------------------------------------------------------ resources per host


def test_resources_time_slicing_and_whole_gpus(reference, mixed):
    assert advertised_resources(reference, mixed) == {
        "dgx2-1": {"nvidia.com/gpu": 64},   # 16 V100 x 4 replicas
        "dgx2-2": {"nvidia.com/gpu": 64},
        "vgpu-1": {"nvidia.com/gpu": 4},    # whole GPUs
    }


def test_resources_mig_single(tmp_path, lab):
    sharing = parse(tmp_path, lab, '    dgx-h100: {mig: {"1g.10gb": 7}}\n')

    assert advertised_resources(lab, sharing) == {"gpu-1": {"nvidia.com/gpu": 56}, "gpu-2": {"nvidia.com/gpu": 56}}


def test_resources_mig_mixed(tmp_path, lab):
    sharing = parse(tmp_path, lab, '    dgx-h100: {mig: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}\n')

    assert advertised_resources(lab, sharing)["gpu-1"] == {
        "nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}


# ------------------------------------------------------------------ kubernetes-validate


@pytest.mark.parametrize("site_name", ["lab", "reference"])
def test_config_maps_validate_strictly(tmp_path, site_name):
    site = load_site(site_name, REPO)
    sharing = parse(tmp_path, site, '    dgx-h100: {mig: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}\n'
                                    "    dgx2: {time_slicing: {replicas: 4}}\n    dgx1: {time_slicing: {replicas: 2}}\n")

    manifests = sharing_manifests(sharing)

    assert [manifest["kind"] for manifest in manifests] == ["ConfigMap", "ConfigMap"]
    assert [problem for manifest in manifests for problem in problems(manifest, site.kubernetes.version)] == []


def test_the_validation_would_refuse_a_broken_config_map(mixed, lab):
    """The check bites: a config file left as a mapping instead of text is refused."""
    plugin = sharing_manifests(mixed)[0]
    broken = {**plugin, "data": {**plugin["data"], "dgx2": {"version": "v1"}}}

    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, lab.kubernetes.version, strict=True)
