"""`node remove` edits and the day-2 commands' refusals: exit 2 with file:line, nothing touched."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from rackform.cli import main
from rackform.day2 import files, remove
from rackform.model.source import BadInput
from rackform.pipeline import DesignRejected, load_and_check


def snapshot(root):
    return {path.relative_to(root): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_removing_gpus_the_tenants_are_guaranteed_is_refused(lab_files):
    """The lab's 16 GPUs guarantee research 8 and inference 4: without gpu-2, 8 cannot hold 12."""
    site = lab_files.load()
    before = snapshot(lab_files.root)
    changes = remove.file_changes(site, lab_files.root, "gpu-2")
    with pytest.raises(DesignRejected) as caught:
        files.check_on_copy("lab", lab_files.root, changes)
    assert [(f.check, f.key) for f in caught.value.findings if f.severity == "error"] == [
        ("platform_tenants", "platform.tenants")]
    assert "guaranteed 12 GPUs (research 8, inference 4) but the site has 8" in str(caught.value.findings)
    assert snapshot(lab_files.root) == before


def test_remove_takes_the_host_out_everywhere_and_the_site_validates(lab_files):
    # research's guarantee shrunk first, so the tenants' 4 + 4 GPUs fit in what gpu-1 alone holds
    lab_files.edit("topologies/platform/lab.yaml", "{name: research, gpus: 8,", "{name: research, gpus: 4,")
    site = lab_files.load()
    changes = remove.file_changes(site, lab_files.root, "gpu-2")
    assert [str(change.path) for change in changes] == [
        "topologies/sites/lab.yaml", "inventories/lab/hosts.yml", "inventories/lab/host_vars/gpu-2.yml"]
    files.check_on_copy("lab", lab_files.root, changes)
    files.write(lab_files.root, changes)
    after, _warnings = load_and_check("lab", lab_files.root)
    assert "gpu-2" not in after.hosts and all("gpu-2" not in (c.a.device, c.b.device) for c in after.cables)
    assert not (lab_files.root / "inventories/lab/host_vars/gpu-2.yml").exists()
    text = (lab_files.root / "topologies/sites/lab.yaml").read_text()
    assert "  # leaf-spine uplinks (BGP unnumbered)\n" in text and "gpu-2" not in text


def test_remove_one_node_of_a_chassis_keeps_the_chassis(lab_files):
    lab_files.edit_site("control_plane: [mgmt-1, mgmt-2, mgmt-3]", "control_plane: [mgmt-1]")
    site = lab_files.load()
    design = remove.file_changes(site, lab_files.root, "mgmt-3")[0]
    assert "{name: hci-1, block: hci, position_u: 1, hosts: [mgmt-1, mgmt-2]}" in design.new


def test_a_control_plane_node_is_refused(lab_site, repo_root):
    with pytest.raises(BadInput, match="mgmt-1 is a control-plane node"):
        remove.file_changes(lab_site, repo_root, "mgmt-1")


@pytest.mark.parametrize("action", ["remove", "replace"])
def test_unknown_host_exits_2_and_touches_nothing(site_root, capsys, action):
    before = snapshot(site_root)
    assert main(["node", action, "lab", "gpu-9", "--root", str(site_root)]) == 2
    err = capsys.readouterr().err
    assert "topologies/sites/lab.yaml:4: hosts: unknown host 'gpu-9'; the site's hosts are: gpu-1, gpu-2" in err
    assert snapshot(site_root) == before


def test_a_switch_is_not_a_node_to_remove(site_root, capsys):
    assert main(["node", "remove", "lab", "leaf-1", "--root", str(site_root)]) == 2
    assert "it is a switch" in capsys.readouterr().err


def test_a_storage_node_serving_data_sets_is_refused_naming_them(site_root, capsys):
    before = snapshot(site_root)
    assert main(["node", "remove", "lab", "stor-1", "--root", str(site_root)]) == 2
    err = capsys.readouterr().err
    assert "stor-1 serves data set(s) imagenet-mini, research-scratch: move them" in err
    assert "topologies/sites/lab.yaml:" in err and snapshot(site_root) == before


def _without_data_sets(site_root: Path) -> None:
    design = site_root / "topologies" / "sites" / "lab.yaml"
    text = design.read_text()
    start = text.index("\ndata_sets:\n")
    design.write_text(text[:start] + text[text.index("\n\n", start + 1):])


def test_remove_dry_run_prints_the_diff_and_writes_nothing(site_root, capsys):
    _without_data_sets(site_root)
    before = snapshot(site_root)
    assert main(["node", "remove", "lab", "stor-1", "--root", str(site_root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-      - {name: stor-1, block: stor-xl, position_u: 3, storage: {nfs_server: ganesha}}" in out
    assert "--- a/inventories/lab/host_vars/stor-1.yml\n+++ /dev/null\n" in out
    assert "dry run: stor-1 would be drained, powered off and removed; nothing was changed" in out
    assert snapshot(site_root) == before


def test_add_refuses_a_range_outside_the_oob_network(site_root, capsys):
    assert main(["node", "add", "lab", "--oob", "10.99.1.0/24", "--root", str(site_root)]) == 2
    assert "outside the site's OOB network 10.10.1.0/24" in capsys.readouterr().err


def test_console_for_an_unknown_host_exits_2(site_root, capsys):
    assert main(["console", "lab", "gpu-9", "--root", str(site_root)]) == 2
    assert "unknown host 'gpu-9'" in capsys.readouterr().err
