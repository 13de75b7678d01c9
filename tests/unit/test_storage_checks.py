"""Data sets in the design: how the loader resolves them, and the preflight rules that refuse
what the storage blocks could not serve (rackform.checks.storage, docs/storage.md)."""

from __future__ import annotations

import pytest

from rackform.checks.runner import run_checks
from rackform.checks.storage import (
    data_set_capacity,
    data_set_names_and_paths,
    data_set_network,
    data_set_servers,
    data_set_tenants,
    storage_placements,
    usable_capacity_gb,
)
from rackform.model.source import BadInput, Loc
from rackform.model.storage_network import STORAGE_PURPOSES

SITE = "topologies/sites/lab.yaml"
STOR_1 = "      - {name: stor-1, block: stor-xl, position_u: 3, storage: {nfs_server: ganesha}}  # the lab's kernel has no nfsd\n"
IMAGENET = "  - {name: imagenet-mini, tenant: research, size_gb: 2, mode: ro, server: stor-1}\n"
SCRATCH = "  - {name: research-scratch, tenant: research, size_gb: 1, mode: rw, server: stor-1}\n"
STOR_XL_USABLE_GB = 54 * 18 * 1000 * 8 // 10
"""The lab's stor-xl: 54x 18 TB HDDs under erasure 8+2."""
STORAGE_CHECKS = [storage_placements, data_set_names_and_paths, data_set_servers, data_set_capacity,
                  data_set_tenants, data_set_network]


def line_of(lab_files, text: str, relative: str = SITE) -> int:
    return lab_files.read(relative).splitlines().index(text.rstrip("\n")) + 1


def set_data_set(lab_files, old: str, new: str) -> None:
    lab_files.edit_site(old, new)


def imagenet_line(lab_files) -> int:
    """The first data set's line, however a test rewrote it (it is the line before the second's)."""
    return line_of(lab_files, SCRATCH) - 1


def only(findings) -> object:
    [finding] = list(findings)
    return finding


# ---------------------------------------------------------------- the loader


def test_the_lab_resolves_its_data_sets_with_defaults(lab_site):
    imagenet, scratch = lab_site.data_sets

    assert (imagenet.name, imagenet.tenant, imagenet.size_gb, imagenet.mode, imagenet.server) == \
        ("imagenet-mini", "research", 2, "ro", "stor-1")
    assert imagenet.path == "/srv/data-sets/imagenet-mini" and scratch.path == "/srv/data-sets/research-scratch"
    assert imagenet.clients == scratch.clients == ("gpu-1", "gpu-2")  # the GPU hosts, by default
    assert imagenet.client_locs == ()
    assert (scratch.mode, scratch.loc.path) == ("rw", SITE)


def test_each_data_set_remembers_its_line(lab_files):
    site = lab_files.load()

    assert [data_set.loc for data_set in site.data_sets] == [
        Loc(SITE, line_of(lab_files, IMAGENET)), Loc(SITE, line_of(lab_files, SCRATCH))]


def test_the_storage_placement_lands_on_its_device_only(lab_site):
    placements = {device.name: device.storage for device in lab_site.devices() if device.storage is not None}

    assert list(placements) == ["stor-1"]
    assert (placements["stor-1"].nfs_server, placements["stor-1"].nfs_rdma) == ("ganesha", True)


def test_listed_clients_are_sorted_once_each_with_their_lines(lab_files):
    set_data_set(lab_files, IMAGENET, "  - name: imagenet-mini\n    tenant: research\n    size_gb: 2\n    mode: ro\n"
                                      "    server: stor-1\n    path: /data/imagenet\n"
                                      "    clients:\n      - mgmt-2\n      - gpu-1\n      - mgmt-2\n")
    site = lab_files.load()

    imagenet = site.data_sets[0]
    text = lab_files.read(SITE).splitlines()
    gpu_1_line, mgmt_2_line = text.index("      - gpu-1") + 1, text.index("      - mgmt-2") + 1
    assert imagenet.clients == ("gpu-1", "mgmt-2")
    assert imagenet.client_locs == (Loc(SITE, gpu_1_line), Loc(SITE, mgmt_2_line))
    assert imagenet.path == "/data/imagenet"


def test_a_site_without_data_sets_has_none(lab_files):
    set_data_set(lab_files, IMAGENET + SCRATCH, "")
    lab_files.edit_site("data_sets:\n", "")

    assert lab_files.load().data_sets == []


def test_a_profile_may_not_carry_data_sets(lab_files):
    lab_files.write("topologies/profiles/roce.yaml",
                    lab_files.read("topologies/profiles/roce.yaml") + "data_sets: []\n")

    with pytest.raises(BadInput) as refused:
        lab_files.load()

    [error] = refused.value.errors
    assert (error.loc.path, error.key) == ("topologies/profiles/roce.yaml", "data_sets")
    assert "belongs to one site" in error.message


def test_a_storage_section_on_a_block_that_is_not_storage_is_refused(lab_files):
    block = "topologies/blocks/hci.yaml"
    lab_files.write(block, lab_files.read(block).replace(
        "sources:", "storage:\n  data_media: [ssd]\n  protection: {scheme: mirror, data_units: 1, parity_units: 1}\nsources:"))

    with pytest.raises(BadInput) as refused:
        lab_files.load()

    assert any(error.key == "storage" and "only storage blocks" in error.message and error.loc.path == block
               for error in refused.value.errors)


def test_the_site_schema_refuses_a_data_set_without_a_mode(lab_files):
    set_data_set(lab_files, IMAGENET, IMAGENET.replace(" mode: ro,", ""))

    with pytest.raises(BadInput) as refused:
        lab_files.load()

    [error] = refused.value.errors
    assert (error.key, error.loc) == ("data_sets[imagenet-mini].mode", Loc(SITE, imagenet_line(lab_files)))


# ---------------------------------------------------------------- usable capacity


def test_stor_xl_usable_capacity_is_its_hdds_less_erasure_parity(lab_site):
    usable_gb, basis = usable_capacity_gb(lab_site.catalog["stor-xl"])

    assert usable_gb == STOR_XL_USABLE_GB  # 972 TB raw of HDD, 8 of every 10 units data; NVMe is cache
    assert basis == "972 TB of hdd drives x 8/10, erasure 8+2"


def test_flash_hybrid_usable_capacity_is_unknown_without_drive_sizes(lab_site):
    usable_gb, why = usable_capacity_gb(lab_site.catalog["flash-hybrid"])

    assert usable_gb is None and why.startswith("the block gives no drive sizes")


def test_a_storage_block_without_a_storage_section_has_no_known_capacity(lab_site):
    block = lab_site.catalog["stor-xl"].model_copy(update={"storage": None})

    usable_gb, why = usable_capacity_gb(block)

    assert usable_gb is None and why.startswith("the block gives no protection")


# ---------------------------------------------------------------- the rules


@pytest.mark.parametrize("storage_check", STORAGE_CHECKS)
def test_the_lab_data_sets_pass_every_rule(lab_site, storage_check):
    assert list(storage_check(lab_site)) == []


def test_the_storage_checks_run_with_the_preflight(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("tenant: research", "tenant: nobody"))

    storage_check_names = {storage_check.__name__ for storage_check in STORAGE_CHECKS}
    assert [f.check for f in run_checks(lab_files.load()) if f.check in storage_check_names] == ["data_set_tenants"]


def test_data_sets_over_the_usable_capacity_are_refused_at_the_last(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("size_gb: 1,", f"size_gb: {STOR_XL_USABLE_GB - 1},"))

    finding = only(data_set_capacity(lab_files.load()))

    assert (finding.severity, finding.loc, finding.key) == \
        ("error", Loc(SITE, line_of(lab_files, IMAGENET) + 1), "data_sets[research-scratch].size_gb")
    assert finding.message.startswith(f"the data sets on stor-1 total {STOR_XL_USABLE_GB + 1} GB "
                                      f"(imagenet-mini 2, research-scratch {STOR_XL_USABLE_GB - 1}) but its stor-xl "
                                      f"block holds {STOR_XL_USABLE_GB} GB usable (972 TB of hdd drives x 8/10")


def test_data_sets_that_fill_the_block_exactly_fit(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("size_gb: 1,", f"size_gb: {STOR_XL_USABLE_GB - 2},"))

    assert list(data_set_capacity(lab_files.load())) == []


def test_a_server_whose_block_gives_no_drive_sizes_is_refused(lab_files):
    lab_files.edit_site(STOR_1, STOR_1.replace("block: stor-xl", "block: flash-hybrid"))

    finding = only(data_set_capacity(lab_files.load()))

    assert (finding.loc, finding.key) == (Loc(SITE, line_of(lab_files, IMAGENET)), "data_sets[imagenet-mini].server")
    assert finding.message.startswith("usable capacity unknown: the block gives no drive sizes: flash-hybrid's ssd")


def test_a_server_whose_block_has_no_storage_section_is_refused(lab_files):
    block = "topologies/blocks/stor-xl.yaml"
    storage_lines = ("storage:", "  data_media:", "  protection:", "  storage:")
    lab_files.write(block, "".join(line for line in lab_files.read(block).splitlines(keepends=True)
                                   if not line.startswith(storage_lines)))

    finding = only(data_set_capacity(lab_files.load()))

    assert finding.message.startswith("usable capacity unknown: the block gives no protection: stor-xl has no "
                                      "`storage:` section")


def test_an_unknown_tenant_is_refused_naming_the_platform_file(lab_files):
    set_data_set(lab_files, IMAGENET, IMAGENET.replace("tenant: research", "tenant: reserch"))

    finding = only(data_set_tenants(lab_files.load()))

    assert (finding.loc, finding.key) == (Loc(SITE, imagenet_line(lab_files)), "data_sets[imagenet-mini].tenant")
    assert finding.message == "no tenant 'reserch' in topologies/platform/lab.yaml; tenants: research, inference"


def test_a_site_without_a_platform_file_has_no_tenants(lab_files):
    lab_files.path("topologies/platform/lab.yaml").unlink()

    findings = list(data_set_tenants(lab_files.load()))

    assert [f.key for f in findings] == ["data_sets[imagenet-mini].tenant", "data_sets[research-scratch].tenant"]
    assert findings[0].message == ("no tenant 'research': the site has no platform design "
                                   "(topologies/platform/lab.yaml, where tenants are declared)")


def test_two_data_sets_on_one_path_are_refused(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("server: stor-1", "server: stor-1, path: /srv/data-sets/imagenet-mini/"))

    finding = only(data_set_names_and_paths(lab_files.load()))

    assert (finding.loc, finding.key) == (Loc(SITE, line_of(lab_files, IMAGENET) + 1), "data_sets[research-scratch].path")
    assert finding.message.startswith("/srv/data-sets/imagenet-mini on stor-1 is also the folder of data set 'imagenet-mini'")


def test_a_data_set_inside_another_is_refused(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("server: stor-1", "server: stor-1, path: /srv/data-sets/imagenet-mini/tmp"))

    finding = only(data_set_names_and_paths(lab_files.load()))

    assert "data set 'research-scratch' (/srv/data-sets/imagenet-mini/tmp) lies inside data set 'imagenet-mini'" \
        in finding.message


def test_a_sibling_folder_with_a_common_prefix_is_not_inside(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("server: stor-1", "server: stor-1, path: /srv/data-sets/imagenet-mini-2"))

    assert list(data_set_names_and_paths(lab_files.load())) == []


def test_one_path_on_two_servers_is_fine(make_site_files, tmp_path):
    files = make_site_files(tmp_path)
    files.write("topologies/sites/reference.yaml", files.read("topologies/sites/reference.yaml") + (
        "data_sets:\n"
        "  - {name: a, tenant: t, size_gb: 1, mode: ro, server: stor-1, path: /data}\n"
        "  - {name: b, tenant: t, size_gb: 1, mode: ro, server: stor-2, path: /data}\n"))

    assert list(data_set_names_and_paths(files.load("reference"))) == []


def test_a_data_set_name_used_twice_is_refused(lab_files):
    set_data_set(lab_files, SCRATCH, SCRATCH.replace("research-scratch", "imagenet-mini"))

    finding = only(data_set_names_and_paths(lab_files.load()))

    assert (finding.key, finding.loc.line) == ("data_sets[imagenet-mini].name", line_of(lab_files, IMAGENET) + 1)
    assert finding.message.startswith(f"data set name used twice (first at {SITE}:{line_of(lab_files, IMAGENET)})")


@pytest.mark.parametrize(("server", "what"), [
    ("gpu-1", "'gpu-1' is a gpu host"),
    ("stor-9", "no host named 'stor-9'"),
    ("leaf-1", "no host named 'leaf-1'"),
])
def test_a_server_that_is_not_a_storage_host_is_refused(lab_files, server, what):
    set_data_set(lab_files, IMAGENET, IMAGENET.replace("server: stor-1", f"server: {server}"))
    site = lab_files.load()

    finding = only(data_set_servers(site))

    assert (finding.loc, finding.key) == (Loc(SITE, imagenet_line(lab_files)), "data_sets[imagenet-mini].server")
    assert finding.message == f"{what}; a data set is served by a storage host: stor-1"
    assert list(data_set_capacity(site)) == [] and list(data_set_network(site)) == []  # not reported twice


@pytest.mark.parametrize(("client", "what"), [("leaf-1", "a switch"), ("gpu-9", "no host of the site")])
def test_a_client_that_is_not_a_server_host_is_refused_at_its_line(lab_files, client, what):
    set_data_set(lab_files, IMAGENET, IMAGENET.replace("server: stor-1", f"server: stor-1, clients: [gpu-1, {client}]"))

    finding = only(data_set_network(lab_files.load()))

    assert (finding.loc, finding.key) == (Loc(SITE, imagenet_line(lab_files)), "data_sets[imagenet-mini].clients")
    assert finding.message.startswith(f"'{client}' is {what}")


def test_a_client_without_a_storage_address_is_refused_once(lab_files):
    lab_files.edit_host_vars("gpu-2", "address: 10.20.1.16/24", "address: 10.99.1.16/24")
    lab_files.edit_host_vars("gpu-2", "address: 10.20.2.16/24", "address: 10.99.2.16/24")

    finding = only(data_set_network(lab_files.load()))  # both data sets read by gpu-2: one finding

    assert (finding.loc, finding.key) == (Loc(SITE, line_of(lab_files, IMAGENET)), "data_sets[imagenet-mini].clients")
    assert finding.message.startswith("gpu-2 has no address on the storage network compute (10.20.0.0/16)")


def test_a_server_without_a_storage_address_is_refused(lab_files):
    lab_files.edit_host_vars("stor-1", "address: 10.20.1.14/24", "address: 10.99.1.14/24")
    lab_files.edit_host_vars("stor-1", "address: 10.20.2.14/24", "address: 10.99.2.14/24")

    finding = only(data_set_network(lab_files.load()))

    assert (finding.key, finding.loc.line) == ("data_sets[imagenet-mini].server", line_of(lab_files, IMAGENET))
    assert finding.message.startswith("stor-1 has no address on the storage network compute")


def test_a_site_without_a_storage_network_is_refused(lab_site):
    lab_site.networks = {name: net for name, net in lab_site.networks.items() if net.purpose not in STORAGE_PURPOSES}

    finding = only(data_set_network(lab_site))

    assert finding.message.startswith("the site has no storage network to serve data sets on")


def test_a_storage_placement_on_a_gpu_block_is_refused(lab_files):
    gpu_1 = "      - {name: gpu-1, block: dgx-h100, position_u: 7, storage: {nfs_server: kernel}}\n"
    lab_files.edit_site(gpu_1.replace(", storage: {nfs_server: kernel}", ""), gpu_1)

    finding = only(storage_placements(lab_files.load()))

    assert (finding.severity, finding.key, finding.loc) == ("error", "devices[gpu-1].storage",
                                                            Loc(SITE, line_of(lab_files, gpu_1)))
    assert finding.message == "block 'dgx-h100' is a gpu block; only storage blocks serve data sets"


def test_ganesha_asked_for_rdma_is_warned_that_it_serves_tcp_only(lab_files):
    lab_files.edit_site(STOR_1, STOR_1.replace("nfs_server: ganesha", "nfs_server: ganesha, nfs_rdma: true"))

    finding = only(storage_placements(lab_files.load()))

    assert (finding.severity, finding.key) == ("warning", "devices[stor-1].storage.nfs_rdma")
    assert "has no NFS over RDMA" in finding.message


@pytest.mark.parametrize("placement", ["nfs_server: ganesha, nfs_rdma: false", "nfs_server: kernel, nfs_rdma: true",
                                       "nfs_server: kernel"])
def test_rdma_where_the_server_can_or_not_asked_for_is_quiet(lab_files, placement):
    lab_files.edit_site(STOR_1, STOR_1.replace("nfs_server: ganesha", placement))

    assert list(storage_placements(lab_files.load())) == []


# ---------------------------------------------------------------- around the design


def test_a_new_site_from_the_lab_starts_without_its_data_sets(lab_files):
    from rackform.cli import main

    assert main(["new-site", "branch", "--from", "lab", "--root", str(lab_files.root), "--management-prefix",
                 "10.50.0.0/24", "--oob-prefix", "10.50.1.0/24", "--fabric-prefix", "compute=10.70.0.0/16"]) == 0

    assert lab_files.load("branch").data_sets == []
    assert "lab's data sets were not copied" in lab_files.read("topologies/sites/branch.yaml")


def _deploy_lab(root):
    from rackform.run.ansible import HostStats, RunResult
    from rackform.run.stages import run_stages

    def every_host_ok(project_dir, playbook, **options):
        return RunResult(playbook, "successful", 0, {"mgmt-1": HostStats(ok=1)}, [])

    run_stages("lab", root, runner=every_host_ok)


def _edit_site(root, old: str, new: str) -> None:
    path = root / SITE
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")


def _stage_status(root) -> dict:
    from rackform.run.plan import plan_site

    return {stage.stage: stage for stage in plan_site("lab", root).stages}


def test_plan_shows_a_new_data_set_as_a_change_of_the_storage_stage(fleet_root):
    from rackform.run.plan import CHANGED, UNCHANGED

    _deploy_lab(fleet_root)
    assert _stage_status(fleet_root)["storage"].status == UNCHANGED
    _edit_site(fleet_root, SCRATCH, SCRATCH + "  - {name: coco, tenant: inference, size_gb: 20, mode: ro, server: stor-1}\n")

    storage = _stage_status(fleet_root)["storage"]

    assert storage.status == CHANGED
    assert {change.path for change in storage.files} >= {"inventory/host_vars/stor-1.yml", "inventory/host_vars/gpu-1.yml"}


def test_plan_shows_a_first_data_set_as_a_new_storage_stage(fleet_root):
    from rackform.run.plan import NEW

    _edit_site(fleet_root, IMAGENET + SCRATCH, "")
    _edit_site(fleet_root, "data_sets:\n", "data_sets: []\n")
    _deploy_lab(fleet_root)
    assert "storage" not in _stage_status(fleet_root)  # nothing to serve: no storage stage
    _edit_site(fleet_root, "data_sets: []\n", "data_sets:\n" + IMAGENET)

    assert _stage_status(fleet_root)["storage"].status == NEW

