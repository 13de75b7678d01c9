"""Where the PXE service runs: the `provisioning` group and the provision playbook's first play."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from rackform.model.loader import load_site
from rackform.render.groups import build_groups
from rackform.render.project_files import playbook_files


@pytest.fixture(scope="module")
def lab():
    return load_site("lab")


@pytest.fixture(scope="module")
def provision_plays(lab) -> list[dict]:
    return yaml.safe_load(playbook_files(lab)["provision.yml"])


def test_provisioning_group_is_the_first_management_plane_host(lab):
    assert build_groups(lab)["children"]["provisioning"] == {"hosts": {"mgmt-1": None}}


def test_provisioning_group_follows_design_order_not_names():
    hosts = {name: SimpleNamespace(name=name, role=role)
             for name, role in [("gpu-1", "gpu"), ("hci-b", "management_plane"), ("hci-a", "management_plane")]}
    site = SimpleNamespace(hosts=hosts, switches={}, kubernetes=None, racks=[], user_inventory=None)
    assert build_groups(site)["children"]["provisioning"] == {"hosts": {"hci-b": None}}


def test_provisioning_group_exists_empty_without_management_plane_hosts():
    site = SimpleNamespace(hosts={"gpu-1": SimpleNamespace(name="gpu-1", role="gpu")}, switches={},
                           kubernetes=None, racks=[], user_inventory=None)
    assert build_groups(site)["children"]["provisioning"] == {}


def test_pxe_play_comes_first_in_the_provision_stage(provision_plays):
    assert (provision_plays[0]["hosts"], provision_plays[0]["roles"]) == (
        "provisioning", [{"role": "rackform.site.pxe_server", "tags": ["provision", "pxe"]}])


def test_pxe_play_gathers_no_facts(provision_plays):
    assert provision_plays[0]["gather_facts"] is False
