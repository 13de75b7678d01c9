"""The storage stage's host variables (rackform.render.storage_vars), its playbook, and the
server role's configurations as Ansible renders them, read back the way verify reads them
(tests/infra/nfslib.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from hang_limit import SUBPROCESS_HANG_S
from rackform.collection import short_name
from rackform.model.loader import load_site
from rackform.model.schema import StoragePlacement
from rackform.model.site import DataSet, Site
from rackform.model.source import Loc
from rackform.paths import INFRA_CHECKS_DIR
from rackform.render.project import render_files
from rackform.render.writer import write_project
from rackform.render.storage_vars import (
    EXPORT_ID_MAX,
    MARKER_FILE,
    export_ids,
    marker_content,
    marker_sha256,
    storage_host_vars,
)
from collection_support import ROLES_IN_PROJECT

ROOT = Path(__file__).resolve().parents[2]
GPU_CLIENTS = ["10.20.1.15/32", "10.20.2.15/32", "10.20.1.16/32", "10.20.2.16/32"]
"""Both fabric ports of gpu-1 and gpu-2 (inventories/lab/host_vars), as /32s."""
STORAGE_ROLES = ("storage_server", "storage_client")


def _load_nfslib():
    spec = importlib.util.spec_from_file_location("rackform_nfslib", INFRA_CHECKS_DIR / "nfslib.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


nfslib = _load_nfslib()


def data_set(name: str, mode: str = "ro", clients: tuple[str, ...] = ("gpu-1", "gpu-2"), server: str = "stor-1",
             path: str | None = None) -> DataSet:
    return DataSet(name=name, tenant="research", size_gb=1, mode=mode, server=server,
                   path=path or f"/srv/data-sets/{name}", clients=clients, loc=Loc("topologies/sites/lab.yaml", 1))


def with_data_sets(site: Site, *data_sets: DataSet, placement: StoragePlacement | None = None) -> Site:
    """The lab site with exactly these data sets (and stor-1's `storage:` placement, if given)."""
    if placement is not None:
        site.hosts["stor-1"].device.storage = placement
    return dataclasses.replace(site, data_sets=list(data_sets))


@pytest.fixture
def site(lab_site) -> Site:
    return with_data_sets(lab_site, data_set("imagenet-mini"), data_set("research-scratch", "rw"),
                          placement=StoragePlacement(nfs_server="ganesha"))


# ---------------------------------------------------------------- the server


def test_the_server_exports_each_data_set_to_every_storage_address_of_its_clients(site):
    server = storage_host_vars(site)["stor-1"]
    assert {key: server[key] for key in ("storage_nfs_server", "storage_nfs_rdma", "storage_address")} == {
        "storage_nfs_server": "ganesha", "storage_nfs_rdma": False, "storage_address": "10.20.1.14"}
    ids = export_ids(["imagenet-mini", "research-scratch"])
    assert server["storage_exports"] == [
        {"name": "imagenet-mini", "tenant": "research", "size_gb": 1, "mode": "ro",
         "path": "/srv/data-sets/imagenet-mini", "pseudo": "/imagenet-mini", "export_id": ids["imagenet-mini"],
         "clients": GPU_CLIENTS, "marker_file": MARKER_FILE, "marker": marker_content("imagenet-mini")},
        {"name": "research-scratch", "tenant": "research", "size_gb": 1, "mode": "rw",
         "path": "/srv/data-sets/research-scratch", "pseudo": "/research-scratch",
         "export_id": ids["research-scratch"], "clients": GPU_CLIENTS, "marker_file": MARKER_FILE,
         "marker": marker_content("research-scratch")},
    ]
    assert server["storage_ports"] == ["fab0", "fab1"]


def test_a_data_set_is_exported_only_to_the_clients_it_names(lab_site):
    site = with_data_sets(lab_site, data_set("gpu1-only", clients=("gpu-1",)))
    found = storage_host_vars(site)
    assert found["stor-1"]["storage_exports"][0]["clients"] == ["10.20.1.15/32", "10.20.2.15/32"]
    assert [entry["name"] for entry in found["gpu-1"]["storage_mounts"]] == ["gpu1-only"]
    assert "storage_mounts" not in found["gpu-2"]
    assert [entry["name"] for entry in found["gpu-2"]["storage_refused"]] == ["gpu1-only"]


@pytest.mark.parametrize(("placement", "rdma"), [
    (StoragePlacement(nfs_server="kernel", nfs_rdma=True), True),
    (StoragePlacement(nfs_server="kernel", nfs_rdma=False), False),
    # Only kernel nfsd's RDMA listener is rendered.
    (StoragePlacement(nfs_server="ganesha", nfs_rdma=True), False),
    (None, True),  # no `storage:` on the device: the schema's defaults (kernel, RDMA)
])
def test_nfs_over_rdma_is_rendered_for_kernel_nfsd_where_the_design_asks(lab_site, placement, rdma):
    lab_site.hosts["stor-1"].device.storage = placement
    server = storage_host_vars(with_data_sets(lab_site, data_set("a")))["stor-1"]
    assert (server["storage_nfs_server"], server["storage_nfs_rdma"]) == (
        placement.nfs_server if placement else "kernel", rdma)


# ---------------------------------------------------------------- export ids


def test_export_ids_come_from_the_name_not_from_the_order_or_the_others():
    """Removing or adding another data set never renumbers one: the id is in every file handle."""
    names = [f"set-{n}" for n in range(40)]
    everything = export_ids(names)
    assert export_ids(list(reversed(names))) == everything
    assert export_ids(names[::3]) == {name: everything[name] for name in names[::3]}
    assert len(set(everything.values())) == len(names)
    assert all(1 <= value <= EXPORT_ID_MAX for value in everything.values())


def test_names_whose_ids_meet_are_told_apart_in_name_order():
    by_id = defaultdict(list)
    for n in range(2000):  # enough names for two to share a 16-bit id
        by_id[export_ids([f"ds-{n}"])[f"ds-{n}"]].append(f"ds-{n}")
    first, second = sorted(next(names for names in by_id.values() if len(names) > 1))[:2]
    ids = export_ids([second, first])
    alone = export_ids([first])[first]
    assert ids[first] == alone and ids[second] == alone % EXPORT_ID_MAX + 1


# ---------------------------------------------------------------- clients and the others


def test_each_client_reads_each_data_set_at_its_servers_storage_address(site):
    found = storage_host_vars(site)
    for client in ("gpu-1", "gpu-2"):
        assert found[client]["storage_mounts"] == [
            {"name": name, "server": "stor-1", "address": "10.20.1.14", "pseudo": f"/{name}", "mode": mode,
             "marker_file": MARKER_FILE, "marker_sha256": marker_sha256(name)}
            for name, mode in (("imagenet-mini", "ro"), ("research-scratch", "rw"))]
        assert "storage_refused" not in found[client]


def test_the_other_hosts_on_the_storage_network_expect_to_be_refused(site):
    found = storage_host_vars(site)
    for host in ("mgmt-1", "mgmt-2", "mgmt-3"):
        assert [entry["name"] for entry in found[host]["storage_refused"]] == ["imagenet-mini", "research-scratch"]
        assert "storage_mounts" not in found[host] and "storage_exports" not in found[host]
    assert set(found) == {"mgmt-1", "mgmt-2", "mgmt-3", "stor-1", "gpu-1", "gpu-2"}  # no switch


def test_the_marker_digest_is_that_of_its_content():
    assert marker_sha256("imagenet-mini") == hashlib.sha256(marker_content("imagenet-mini").encode()).hexdigest()
    assert marker_content("a") != marker_content("b")


def test_a_site_without_data_sets_renders_no_storage_variable(lab_site):
    files = render_files(with_data_sets(lab_site))
    assert storage_host_vars(with_data_sets(lab_site)) == {}
    for path, content in files.items():
        if path.startswith("inventory/host_vars/"):
            assert b"storage_" not in content, path


# ---------------------------------------------------------------- the rendered project


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    site = load_site("lab", ROOT)
    if not site.data_sets:
        pytest.skip("the lab site declares no data sets")
    return render_files(site)


def test_the_storage_playbook_serves_then_prepares_the_readers(files):
    plays = yaml.safe_load(files["storage.yml"])
    assert [(play["hosts"], [short_name(role["role"]) for role in play["roles"]]) for play in plays] == [
        ("servers", ["storage_server"]), ("servers", ["storage_client"])]
    ends = [play["pre_tasks"][0]["when"] for play in plays]
    assert ends == ["storage_exports | default([]) | length == 0",
                    "(storage_mounts | default([]) + storage_refused | default([])) | length == 0"]


def test_the_host_vars_carry_the_storage_variables(files):
    stor = yaml.safe_load(files["inventory/host_vars/stor-1.yml"])
    gpu = yaml.safe_load(files["inventory/host_vars/gpu-1.yml"])
    assert stor["storage_nfs_server"] == "ganesha"
    assert [entry["pseudo"] for entry in stor["storage_exports"]] == ["/imagenet-mini", "/research-scratch"]
    assert [entry["address"] for entry in gpu["storage_mounts"]] == ["10.20.1.14", "10.20.1.14"]


@pytest.mark.parametrize("role", STORAGE_ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    defaults = yaml.safe_load(files[f"{ROLES_IN_PROJECT}{role}/defaults/main.yml"])
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []


def _environment(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}


def ansible_template(project: Path, template: str, deployed: Path, *extra: str) -> str:
    """A storage_server template rendered by Ansible's template module for stor-1."""
    result = subprocess.run(
        ["ansible", "stor-1", "-m", "ansible.builtin.template", "-a",
         f"src={ROLES_IN_PROJECT}storage_server/templates/{template} dest={deployed}",
         "-e", f"@{ROLES_IN_PROJECT}storage_server/defaults/main.yml", "-e", "ansible_connection=local",
         "-e", f"ansible_python_interpreter={sys.executable}", *extra],
        cwd=project, env=_environment(deployed.parent), capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr
    return deployed.read_text()


@pytest.mark.slow
def test_ganesha_config_exports_each_data_set_to_its_clients_only(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    text = ansible_template(project, "ganesha.conf.j2", tmp_path / "ganesha.conf")
    exports = nfslib.ganesha_exports(text)
    stor = yaml.safe_load(files["inventory/host_vars/stor-1.yml"])
    assert exports == {entry["pseudo"]: {
        "export_id": str(entry["export_id"]), "path": entry["path"], "access": "NONE", "squash": "root_squash",
        "clients": dict.fromkeys(GPU_CLIENTS, entry["mode"].upper())} for entry in stor["storage_exports"]}
    core = next(block for block in nfslib.parse_ganesha(text) if block.name == "NFS_CORE_PARAM")
    assert (core.params["protocols"], core.params["bind_addr"]) == ("4", "10.20.1.14")
    assert "Graceless = true;" in text


@pytest.mark.slow
def test_kernel_exports_and_nfs_conf_for_the_same_data_sets(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    exports = nfslib.kernel_exports(ansible_template(project, "exports.j2", tmp_path / "exports"))
    stor = yaml.safe_load(files["inventory/host_vars/stor-1.yml"])
    assert exports["/srv/nfs4"] == {client: {"ro", "fsid=0", "root_squash", "sec=sys", "no_subtree_check"}
                                    for client in GPU_CLIENTS}
    for entry in stor["storage_exports"]:
        assert exports[f"/srv/nfs4/{entry['name']}"] == {client: {
            entry["mode"], f"fsid={entry['export_id']}", "root_squash", "sec=sys", "no_subtree_check"}
            for client in GPU_CLIENTS}
    rdma = ansible_template(project, "nfs.conf.j2", tmp_path / "nfs.conf", "-e", "storage_nfs_rdma=true")
    plain = ansible_template(project, "nfs.conf.j2", tmp_path / "nfs-plain.conf")
    assert "rdma=y\nrdma-port=20049\n" in rdma and "rdma" not in plain.split("[nfsd]")[1]
    assert "vers3=n\nvers4=y\n" in plain


@pytest.mark.slow
def test_storage_roles_pass_ansible_lint_production_profile(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    result = subprocess.run(
        ["ansible-lint", "--offline", "--profile", "production", "--nocolor", "storage.yml",
         *(f"{ROLES_IN_PROJECT}{role}" for role in STORAGE_ROLES)],
        cwd=project, env=_environment(tmp_path), capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- how verify reads a configuration


def test_ganesha_parser_names_the_clients_of_each_export():
    text = """
    # a comment { that is no block
    EXPORT {
        Export_Id = 7; Path = "/srv/a"; Pseudo = "/a"; Access_Type = None; Squash = root_squash;
        FSAL { Name = VFS; }
        CLIENT { Clients = 10.0.0.1/32, 10.0.0.2/32; Access_Type = RO; }
        CLIENT { Clients = 10.0.0.9/32; access_type = rw; }
    }
    """
    assert nfslib.ganesha_exports(text) == {"/a": {
        "export_id": "7", "path": "/srv/a", "access": "NONE", "squash": "root_squash",
        "clients": {"10.0.0.1/32": "RO", "10.0.0.2/32": "RO", "10.0.0.9/32": "RW"}}}


@pytest.mark.parametrize("text", ["EXPORT { Path = /a; ", "EXPORT { Path = /a }", "}"])
def test_ganesha_parser_refuses_broken_text(text):
    with pytest.raises(ValueError):
        nfslib.parse_ganesha(text)
