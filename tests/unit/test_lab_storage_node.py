"""What a lab node needs to serve or read data sets over NFS (docs/lab.md, docs/storage.md): the
data disk and open_by_handle_at for NFS-Ganesha on storage nodes, the NFS packages in the base
image with their units off until the storage role starts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackform.lab import base, nodes
from rackform.lab.state import NodeSpec


def spec(role: str) -> NodeSpec:
    return NodeSpec(name="n1", kind="host", os="debian", role=role, machine="s-n1", netns="rf.s.n1",
                    node_dir="/var/lib/rackform/labs/s/n1", mgmt_ifname="mgmt0", mgmt_root_ifname="s.n1",
                    mgmt_mac="02:00:00:00:00:01", mgmt_address="10.0.0.2/24", gateway="10.0.0.1")


@pytest.mark.parametrize("role", ["storage", "gpu", "management_plane"])
def test_every_node_has_its_data_sets_folder_on_the_machines_filesystem(role):
    assert "--bind=/var/lib/rackform/labs/s/n1/data-sets:/srv/data-sets" in nodes.nspawn_command(spec(role))


@pytest.mark.parametrize(("role", "allowed"), [("storage", True), ("gpu", False), ("management_plane", False)])
def test_only_storage_nodes_may_open_files_by_handle(role, allowed):
    assert ("--system-call-filter=open_by_handle_at" in nodes.nspawn_command(spec(role))) is allowed


def test_the_image_carries_the_nfs_packages_with_their_units_off():
    assert {"nfs-ganesha", "nfs-ganesha-vfs", "nfs-common", "libnfs-utils"} <= set(base.PACKAGES)
    assert "nfs-kernel-server" not in base.PACKAGES  # no nfsd in the lab's kernel
    assert {"nfs-ganesha.service", "rpcbind.service", "rpcbind.socket", "nfs-client.target"} <= set(
        base.DISABLED_UNITS)


def test_a_disabled_unit_leaves_every_target_that_wanted_it(tmp_path):
    systemd = tmp_path / "etc/systemd/system"
    wanted = {"sockets.target.wants": "rpcbind.socket", "multi-user.target.wants": "nfs-ganesha.service",
              "remote-fs.target.wants": "nfs-client.target"}
    for folder, unit in wanted.items():
        (systemd / folder).mkdir(parents=True)
        (systemd / folder / unit).symlink_to(f"/lib/systemd/system/{unit}")
    (systemd / "multi-user.target.wants" / "lldpd.service").symlink_to("/lib/systemd/system/lldpd.service")
    base.configure(tmp_path)
    assert [path for folder, unit in wanted.items() for path in [systemd / folder / unit] if path.is_symlink()] == []
    assert (systemd / "multi-user.target.wants" / "lldpd.service").is_symlink()
