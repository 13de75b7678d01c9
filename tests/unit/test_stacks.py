"""The Pulumi program under Pulumi's mocks: component tree, types, parents, stage order.

The engine cannot run here; `pulumi.runtime.set_mocks` stands in for it and records
every registration (type, name, parent, dependencies). Providers are not called
under mocks: tests/unit/test_providers.py calls them directly.
"""

from __future__ import annotations

import asyncio
import runpy
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pytest
import yaml
from pulumi.runtime.mocks import MockMonitor

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
# Pulumi runs the program with stacks/ first on sys.path (Pulumi.yaml `main: stacks/`).
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.blocks import BLOCK_COMPONENTS, DgxNode, component_for  # noqa: E402
from components.site import SiteCluster, SiteClusterArgs  # noqa: E402

from rackform.checks.findings import Finding  # noqa: E402
from rackform.model.source import Loc  # noqa: E402
from rackform.pipeline import STAGES, DesignRejected, load_and_check, stage_not_applicable  # noqa: E402

PLAYBOOK_TYPE = "pulumi-python:dynamic/rackform:Playbook"
PLATFORM_TYPE = "rackform:index:GpuPlatform"
NODE_TYPE = "pulumi-python:dynamic/rackform:BareMetalNode"
SWITCH_CONFIG_TYPE = "pulumi-python:dynamic/rackform:SwitchConfig"
SITES_WITH_STACKS = [
    pytest.param(
        site,
        marks=pytest.mark.skipif(not (REPO / f"topologies/sites/{site}.yaml").exists(), reason=f"no {site} site yet"),
    )
    for site in ("lab", "reference", "campus")
]
FAKE_DIGESTS = {stage.name: f"sha256:{stage.name}" for stage in STAGES}


@pytest.fixture(autouse=True)
def built_bundles(monkeypatch, tmp_path_factory):
    """Every carried release's mirror bundle "built" (its manifest.json, which is what built
    means: rackform.k8s.site_mirror.missing_bundle): `pulumi up` refuses a site without one."""
    from rackform.mirror import bundle

    bundles = tmp_path_factory.mktemp("built-bundles")
    for release in (REPO / "sources" / "kubernetes").iterdir():
        folder = bundle.bundle_path(release.name, bundles)
        folder.mkdir()
        (folder / "manifest.json").write_text(f'{{"format": 1, "kubernetes": "{release.name}", "artifacts": []}}\n')
    monkeypatch.setattr(bundle, "BUNDLES_DIR", bundles)
    monkeypatch.setenv("RACKFORM_MIRROR_BUNDLES", str(bundles))
    return bundles


def fake_digests(site) -> dict[str, str]:
    """FAKE_DIGESTS of the stages the site has (a site without data sets has no storage stage)."""
    return {name: digest for name, digest in FAKE_DIGESTS.items() if stage_not_applicable(site, name) is None}


@dataclass
class Registration:
    type: str
    name: str
    parent: str
    """The parent's resource name ('' for the stack itself)."""
    dependencies: list[str]
    """Resource names this one depends on."""
    inputs: dict
    retain_on_delete: bool = False
    aliases: list[str] = field(default_factory=list)
    """Former types this resource answers to (the engine then keeps the old state's resource)."""


class RecordingMonitor(MockMonitor):
    """Mock monitor that also keeps what the mocks API leaves out: parents, dependencies."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.registered: list[Registration] = []
        self.secret_outputs: dict[str, list[str]] = {}
        """Resource name -> the outputs it asked the engine to keep secret."""

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        self.secret_outputs[request.name] = list(request.additionalSecretOutputs)
        self.registered.append(
            Registration(
                type=request.type,
                name=request.name,
                parent=_urn_name(request.parent),
                dependencies=[_urn_name(urn) for urn in request.dependencies],
                inputs=self.resources[response.urn].state if response.urn in self.resources else {},
                retain_on_delete=request.retainOnDelete,
                aliases=[alias.spec.type for alias in request.aliases if alias.spec.type],
            )
        )
        return response

    def by_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registered if r.type == type_]

    def named(self, name: str) -> Registration:
        return next(r for r in self.registered if r.name == name)


class EchoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}, None


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else ""


def use_mocks(stack: str, config: dict[str, str] | None = None) -> RecordingMonitor:
    """Fresh mocks, root stack and config: nothing leaks from one program run to the next."""
    monitor = RecordingMonitor(EchoMocks())
    # Pulumi's test runner uses the thread's current event loop; another test
    # (asyncio.run in the Onyx emulator's tests) may have closed and unset it.
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_all_config(config or {})
    pulumi.runtime.set_mocks(monitor.mocks, project="rackform", stack=stack, preview=False, monitor=monitor)
    return monitor


@dataclass
class Built:
    site: str
    monitor: RecordingMonitor
    cluster: SiteCluster | None = None
    outputs: dict = field(default_factory=dict)
    """Resolved outputs of the block and switch-group components, by device / group name."""
    kubeconfig_value: str | None = None
    kubeconfig_secret: bool | None = None
    """The kubeconfig the site exports (the stack's `kubeconfig` output), and whether it is a secret Output."""


def build_site(site_name: str) -> Built:
    built = Built(site_name, use_mocks(site_name))
    site, _warnings = load_and_check(site_name, REPO)

    @pulumi.runtime.test
    def program():
        built.cluster = SiteCluster(site.name, SiteClusterArgs(site=site, root=str(REPO), stage_digests=fake_digests(site)))
        components = {**built.cluster.blocks, **built.cluster.switch_groups}
        watched = ("hosts", "rack", "position_u", "power_w", "bmc_addresses", "gpu_count", "switches", "asns")
        resolved = {
            name: {key: getattr(component, key) for key in watched if hasattr(component, key)}
            for name, component in components.items()
        }
        done = [pulumi.Output.from_input(resolved).apply(built.outputs.update)]
        kubeconfig = built.cluster.kubeconfig
        if kubeconfig is not None:
            done.append(kubeconfig.apply(lambda value: setattr(built, "kubeconfig_value", value)))
            done.append(pulumi.Output.from_input(kubeconfig.is_secret()).apply(
                lambda secret: setattr(built, "kubeconfig_secret", secret)))
        return pulumi.Output.all(*done)

    program()
    return built


@pytest.fixture(scope="module", params=SITES_WITH_STACKS)
def built(request) -> Built:
    return build_site(request.param)


@pytest.fixture(scope="module")
def lab() -> Built:
    return build_site("lab")


# ---------------------------------------------------------------- every site


def test_one_site_cluster_under_the_stack(built: Built):
    clusters = built.monitor.by_type("rackform:index:SiteCluster")
    assert [(c.name, c.parent) for c in clusters] == [(built.site, f"rackform-{built.site}")]


def test_every_placed_block_has_the_component_of_its_category(built: Built):
    site, _ = load_and_check(built.site, REPO)
    expected = {
        f"{site.name}-{device.name}": f"rackform:index:{component_for(device.block).__name__}"
        for device in site.devices()
        if device.switch is None
    }
    block_types = {f"rackform:index:{cls.__name__}" for cls in (*BLOCK_COMPONENTS.values(), DgxNode)}
    found = {r.name: r.type for r in built.monitor.registered if r.type in block_types}
    assert found == expected


def test_every_child_is_parented_to_the_site(built: Built):
    """Blocks, switch groups and stages; the platform's own objects sit under the platform,
    each node under its block, each switch configuration under its switch group."""
    children = [
        r for r in built.monitor.registered
        if r.type not in ("pulumi:pulumi:Stack", "rackform:index:SiteCluster", NODE_TYPE, SWITCH_CONFIG_TYPE)
        and r.parent != f"{built.site}-platform"
    ]
    assert {r.parent for r in children} == {built.site}


def test_every_server_with_a_bmc_is_a_bare_metal_node_under_its_block(built: Built):
    site, _ = load_and_check(built.site, REPO)
    expected = {(f"{site.name}-{host.name}-bmc", f"{site.name}-{host.device.name}", str(host.bmc_address))
                for host in site.hosts.values() if host.bmc_address is not None}
    nodes = built.monitor.by_type(NODE_TYPE)
    assert expected and {(r.name, r.parent, r.inputs["bmc_address"]) for r in nodes} == expected


def test_bare_metal_nodes_wait_for_the_provision_stage_and_log_in_from_the_site_store(built: Built):
    nodes = built.monitor.by_type(NODE_TYPE)
    assert {tuple(r.dependencies) for r in nodes} == {(f"{built.site}-provision",)}
    assert {(r.inputs["login"], r.inputs["power_state"], r.inputs["boot_device"]) for r in nodes} == {
        ("site", "on", "disk")}


def test_deleting_a_bare_metal_node_only_forgets_it_and_a_preview_says_so(built: Built):
    nodes = built.monitor.by_type(NODE_TYPE)
    assert nodes and all(r.retain_on_delete for r in nodes)


def test_only_gpu_servers_answer_to_a_former_block_type(built: Built):
    """Non-NVIDIA GPU blocks were DgxNodes: without the alias an existing stack would replace them."""
    block_types = {f"rackform:index:{cls.__name__}" for cls in (*BLOCK_COMPONENTS.values(), DgxNode)}
    aliased = {(r.type, tuple(r.aliases)) for r in built.monitor.registered if r.type in block_types}
    assert {entry for entry in aliased if entry[1]} <= {("rackform:index:GpuServer", ("rackform:index:DgxNode",))}
    assert all(aliases for type_, aliases in aliased if type_ == "rackform:index:GpuServer")


def test_every_switch_is_in_exactly_one_group(built: Built):
    site, _ = load_and_check(built.site, REPO)
    grouped = [name for values in built.outputs.values() for name in values.get("switches", [])]
    assert sorted(grouped) == sorted(site.switches)


def test_stages_run_in_pipeline_order(built: Built):
    """Every stage is a Playbook, the platform's too (inside its GpuPlatform)."""
    playbooks = built.monitor.by_type(PLAYBOOK_TYPE)
    site, _warnings = load_and_check(built.site, REPO)
    assert [r.inputs["stage"] for r in playbooks] == [stage.name for stage in STAGES
                                                      if stage_not_applicable(site, stage.name) is None]


def test_each_stage_depends_on_the_previous_one(built: Built):
    stages = built.monitor.by_type(PLAYBOOK_TYPE)
    chain = [(r.name, set(r.dependencies)) for r in stages]
    expected = [(s.name, {previous.name}) for previous, s in zip(stages, stages[1:])]
    assert chain[1:] == expected


def test_no_switch_has_a_second_owner_besides_the_fabric_stage(built: Built):
    """Onyx and Cumulus switches alike are configured by the fabric stage's playbook
    (roles onyx_switch, switch_baseline): the program registers no SwitchConfig."""
    assert built.monitor.by_type(SWITCH_CONFIG_TYPE) == []


def test_the_platform_stage_sits_between_kubernetes_and_verify(built: Built):
    stages = [r.name for r in built.monitor.registered if r.type in (PLAYBOOK_TYPE, PLATFORM_TYPE)]
    assert stages[-4:] == [f"{built.site}-kubernetes", f"{built.site}-platform", f"{built.site}-platform-apply",
                           f"{built.site}-verify"]


def test_stage_inputs_carry_site_root_and_digest(built: Built):
    provision = built.monitor.by_type(PLAYBOOK_TYPE)[0]
    expected = {"site": built.site, "stage": "provision", "root": str(REPO), "digest": "sha256:provision"}
    assert {key: provision.inputs[key] for key in expected} == expected


def test_resource_count_stays_in_the_hundreds(built: Built):
    assert len(built.monitor.registered) < 1000
    assert built.cluster.resource_count() == len(built.monitor.registered) - 1  # less the stack


# ---------------------------------------------------------------- the lab, by name


def test_lab_component_tree(lab: Built):
    tree = sorted((r.type.split(":")[-1], r.name) for r in lab.monitor.registered if r.parent == "lab")
    assert tree == [
        ("DgxNode", "lab-gpu-1"),
        ("DgxNode", "lab-gpu-2"),
        ("GpuPlatform", "lab-platform"),
        ("HciBlock", "lab-hci-1"),
        ("Playbook", "lab-fabric"),
        ("Playbook", "lab-kubernetes"),
        ("Playbook", "lab-os"),
        ("Playbook", "lab-provision"),
        ("Playbook", "lab-storage"),
        ("Playbook", "lab-verify"),
        ("StorageBlock", "lab-stor-1"),
        ("SwitchGroup", "lab-compute-leaf-r1"),
        ("SwitchGroup", "lab-compute-spine"),
        ("SwitchGroup", "lab-oob-r1"),
    ]


def test_lab_platform_is_a_component_around_the_platform_playbook(lab: Built):
    assert lab.monitor.named("lab-platform").type == PLATFORM_TYPE
    apply = lab.monitor.named("lab-platform-apply")
    assert (apply.type, apply.parent, apply.inputs["stage"]) == (PLAYBOOK_TYPE, "lab-platform", "platform")


def test_stack_lists_every_stage_including_the_platform(lab: Built):
    assert list(lab.cluster.stage_resources) == [stage.name for stage in STAGES]


def test_the_storage_stage_runs_between_os_and_the_bootstrap(lab: Built):
    assert lab.monitor.named("lab-storage").dependencies == ["lab-os"]
    assert lab.monitor.named("lab-kubernetes").dependencies == ["lab-storage"]


def test_a_site_without_data_sets_has_no_storage_stage_resource():
    edge = build_site("edge")
    assert "storage" not in edge.cluster.stage_resources
    assert edge.monitor.named("edge-kubernetes").dependencies == ["edge-os"]


def test_kubernetes_stage_marks_its_kubeconfig_secret(lab: Built):
    assert "kubeconfig" in lab.monitor.secret_outputs["lab-kubernetes"]


def test_the_platform_depends_on_the_bootstrap(lab: Built):
    assert lab.monitor.named("lab-platform").dependencies == ["lab-kubernetes"]


def test_the_site_exports_the_bootstraps_kubeconfig_as_a_secret(lab: Built):
    """What a user's own stack of workloads reads through a StackReference (examples/workloads/)."""
    assert lab.kubeconfig_secret is True


def test_verify_waits_for_the_platform_playbook(lab: Built):
    """Which waits for the bootstrap: verify runs after the whole platform."""
    assert lab.monitor.named("lab-verify").dependencies == ["lab-platform-apply"]


def test_hci_block_exposes_its_hosts_and_place(lab: Built):
    hci = lab.outputs["hci-1"]
    assert (hci["hosts"], hci["rack"], hci["position_u"]) == (["mgmt-1", "mgmt-2", "mgmt-3"], "r1", 1)


def test_dgx_node_exposes_gpus_and_bmc(lab: Built):
    site, _ = load_and_check("lab", REPO)
    gpu = lab.outputs["gpu-1"]
    assert gpu["gpu_count"] == 8
    assert gpu["bmc_addresses"] == {"gpu-1": str(site.hosts["gpu-1"].bmc_address)}


def test_block_power_follows_the_site_power_basis(lab: Built):
    site, _ = load_and_check("lab", REPO)
    assert lab.outputs["gpu-1"]["power_w"] == site.hosts["gpu-1"].device.power_w(site.power_basis)


def test_leaf_pair_is_one_group(lab: Built):
    assert lab.outputs["compute-leaf-r1"]["switches"] == ["leaf-1", "leaf-2"]
    assert lab.outputs["compute-leaf-r1"]["asns"] == {"leaf-1": 65101, "leaf-2": 65102}


def test_unknown_block_category_names_the_known_ones():
    site, _ = load_and_check("lab", REPO)
    with pytest.raises(ValueError, match="known: compute, gpu, hci, storage"):
        component_for(site.switches["leaf-1"].device.block)


def test_the_reference_vgpu_pod_is_a_gpu_server_that_keeps_its_dgx_node_state():
    vgpu = build_site("reference").monitor.named("reference-vgpu-1")
    assert (vgpu.type, vgpu.aliases) == ("rackform:index:GpuServer", ["rackform:index:DgxNode"])


def test_only_nvidia_gpu_blocks_are_dgx_nodes():
    site, _ = load_and_check("reference", REPO)
    gpu_components = {device.block.name: component_for(device.block).__name__
                      for device in site.devices() if device.block.category == "gpu"}
    assert gpu_components == {"dgx2": "DgxNode", "vgpu": "GpuServer"}


# ---------------------------------------------------------------- the program itself (stacks/__main__.py)


def run_program(
    stack: str, config: dict[str, str] | None = None, *, digests=None, monkeypatch=None
) -> RecordingMonitor:
    monitor = use_mocks(stack, config)
    if digests is not None:
        import components.stages

        monkeypatch.setattr(components.stages, "stage_digests", lambda site: digests)

    @pulumi.runtime.test
    def program():
        runpy.run_path(str(STACKS), run_name="__main__")

    program()
    return monitor


@pytest.fixture()
def repo_copy(tmp_path, monkeypatch):
    """A repo of sites and stack files to edit; the program reads it through $RACKFORM_ROOT."""
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    for path in REPO.glob("Pulumi*.yaml"):
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.setenv("RACKFORM_ROOT", str(tmp_path))
    return tmp_path


def test_program_reads_the_site_from_config(monkeypatch, repo_copy):
    (repo_copy / "Pulumi.lab.yaml").unlink()
    monitor = run_program("production", {"rackform:site": "lab"}, digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert [r.name for r in monitor.by_type("rackform:index:SiteCluster")] == ["lab"]


def test_a_second_stack_for_a_site_is_refused(monkeypatch, repo_copy):
    with pytest.raises(pulumi.RunError, match=r"site 'lab' already has the stack lab \(Pulumi.lab.yaml\)"):
        run_program("lab-staging", {"rackform:site": "lab"}, digests=FAKE_DIGESTS, monkeypatch=monkeypatch)


def test_the_stack_of_a_site_is_not_its_own_second_stack(monkeypatch, repo_copy):
    monitor = run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert [r.name for r in monitor.by_type("rackform:index:SiteCluster")] == ["lab"]


def test_program_creates_bare_metal_nodes_unless_told_not_to(monkeypatch):
    default = run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    without = run_program("lab", {"rackform:bareMetalNodes": "false"}, digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert (len(default.by_type(NODE_TYPE)), len(without.by_type(NODE_TYPE))) == (6, 0)


def test_program_refuses_a_bare_metal_nodes_setting_that_is_not_a_bool(monkeypatch):
    with pytest.raises(pulumi.RunError, match="rackform:bareMetalNodes is 'sometimes'; expected true or false"):
        run_program("lab", {"rackform:bareMetalNodes": "sometimes"}, digests=FAKE_DIGESTS, monkeypatch=monkeypatch)


def test_program_defaults_to_the_stack_name(monkeypatch):
    monitor = run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert [r.name for r in monitor.by_type("rackform:index:SiteCluster")] == ["lab"]


def test_program_reports_an_unknown_site_without_traceback(monkeypatch):
    with pytest.raises(pulumi.RunError, match="site 'nope' cannot be loaded:\n.*no such site 'nope'"):
        run_program("nope", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)


def test_program_reports_design_errors_with_file_and_line(monkeypatch):
    import rackform.pipeline

    finding = Finding("rack_power", "error", Loc("topologies/sites/lab.yaml", 11), "racks[r1]", "over budget")

    def rejected(site_name, root):
        raise DesignRejected([finding])

    monkeypatch.setattr(rackform.pipeline, "load_and_check", rejected)
    with pytest.raises(pulumi.RunError, match="topologies/sites/lab.yaml:11: error: racks\\[r1\\]: over budget"):
        run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)


def test_program_logs_design_warnings(monkeypatch, caplog):
    site, warnings = load_and_check("lab", REPO)
    assert warnings, "the lab is expected to carry at least one warning"
    run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert str(warnings[0]) in caplog.text


def test_program_digests_are_the_ones_deploy_records():
    """rackform.pipeline.stage_digests: what `rackform deploy` records in state/<site>.json."""
    from rackform.pipeline import stage_digests
    from rackform.render.digest import stage_digest
    from rackform.render.project import render_files

    site, _ = load_and_check("lab", REPO)
    files = render_files(site)
    monitor = run_program("lab")
    digests = {r.inputs["stage"]: r.inputs["digest"] for r in monitor.by_type(PLAYBOOK_TYPE)}
    recorded = stage_digests(files)
    assert digests == {stage.name: recorded[stage.name] for stage in STAGES}  # the platform's too
    # every stage hashes what it reads; verify also covers every stage before it
    assert all(digests[stage.name] == stage_digest(files, stage.name) for stage in STAGES[:-1])
    assert digests["verify"] != stage_digest(files, "verify")


def test_playbooks_chain_failed_hosts_and_only_the_last_fails_the_stack():
    monitor = run_program("lab")
    playbooks = {r.inputs["stage"]: r for r in monitor.by_type(PLAYBOOK_TYPE)}
    assert [stage for stage, r in playbooks.items() if r.inputs["last"]] == ["verify"]
    assert playbooks["provision"].inputs["left_out"] == []


# ---------------------------------------------------------------- project and stack files


def stack_files() -> list[Path]:
    return sorted(REPO.glob("Pulumi.*.yaml"))


def test_project_file_runs_the_stacks_program():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert (project["name"], project["runtime"]["name"], project["main"]) == ("rackform", "python", "stacks/")
    assert (REPO / project["main"] / "__main__.py").is_file()


@pytest.mark.parametrize("stack_file", stack_files(), ids=lambda path: path.name)
def test_stack_config_names_its_own_site(stack_file: Path):
    stack = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    config = yaml.safe_load(stack_file.read_text())["config"]
    assert config["rackform:site"] == stack
    assert (REPO / "topologies/sites" / f"{stack}.yaml").is_file()


def test_without_rackform_root_the_program_reads_the_pulumi_projects_own_repo(monkeypatch, repo_copy):
    """A site repo made by `rackform init` runs the program installed with rackform: the engine's
    project root (where Pulumi.yaml is) is the repo whose sites it deploys, not the package's copy."""
    monkeypatch.delenv("RACKFORM_ROOT")
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: str(repo_copy))
    monitor = run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert {r.inputs["root"] for r in monitor.by_type(PLAYBOOK_TYPE)} == {str(repo_copy)}


def test_without_an_engine_or_rackform_root_the_program_reads_this_checkout(monkeypatch, repo_copy):
    monkeypatch.delenv("RACKFORM_ROOT")
    monkeypatch.setattr(pulumi, "get_root_directory", lambda: "root_directory")  # what the mocks answer
    monitor = run_program("lab", digests=FAKE_DIGESTS, monkeypatch=monkeypatch)
    assert {r.inputs["root"] for r in monitor.by_type(PLAYBOOK_TYPE)} == {str(REPO)}
