"""`node add`'s plan and file edits on a copy of the lab site: only the lines a person would write."""

from __future__ import annotations

import difflib
import ipaddress

import pytest

from rackform.day2 import add, files
from rackform.day2.allocate import FabricLink
from rackform.model.source import BadInput
from rackform.pipeline import load_and_check

STOR = dict(bmc_address="10.10.1.23", bmc_mac="02:0a:0a:01:00:17", serial="LAB-STOR-2",
            links=(FabricLink("fab0", "leaf-1", "swp7"), FabricLink("fab1", "leaf-2", "swp7")),
            management_mac="02:0a:0a:00:00:17", fru="vScaler vScaler Stor XL (1 node, 4U, 60 bays)")


def found(site, **overrides):
    return add.Found(block=site.catalog["stor-xl"], **(STOR | overrides))


def added_lines(change: files.FileChange) -> list[str]:
    return [line for line in difflib.unified_diff((change.old or "").splitlines(), change.new.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_plan_names_places_and_addresses_the_node(lab_site):
    plan = add.plan_node(lab_site, found(lab_site))
    assert (plan.host, plan.device) == ("stor-2", "stor-2")
    assert (plan.place.rack, plan.place.position_u) == ("r1", 23)
    assert plan.management_address == ipaddress.IPv4Address("10.10.0.23")
    assert plan.fabric == {"fab0": ipaddress.IPv4Interface("10.20.1.23/24"),
                           "fab1": ipaddress.IPv4Interface("10.20.2.23/24")}


def test_file_changes_touch_only_the_new_lines_and_validate(lab_files):
    site = lab_files.load()
    plan = add.plan_node(site, found(site))
    changes = add.file_changes(site, lab_files.root, [plan], when="2026-01-02")
    design, hosts, host_vars = changes
    assert added_lines(design) == ["+      - {name: stor-2, block: stor-xl, position_u: 23}",
                                   "+  - {a: stor-2:fab0, b: leaf-1:swp7}",
                                   "+  - {a: stor-2:fab1, b: leaf-2:swp7}"]
    # The new cables sit with the host cables, above the uplinks' comment.
    assert "  - {a: stor-2:fab1, b: leaf-2:swp7}\n  # leaf-spine uplinks" in design.new
    assert added_lines(hosts) == ["+    stor-2:"]
    assert host_vars.old is None and host_vars.new == (
        "# Added by `rackform node add` on 2026-01-02: BMC 10.10.1.23, FRU vScaler vScaler Stor XL (1 node, 4U, 60 bays).\n"
        "management_address: 10.10.0.23\n"
        'management_mac: "02:0a:0a:00:00:17"\n'
        "bmc_address: 10.10.1.23\n"
        'bmc_mac: "02:0a:0a:01:00:17"\n'
        "serial: LAB-STOR-2\n"
        "fabric_ports:\n"
        "  fab0: {address: 10.20.1.23/24}\n"
        "  fab1: {address: 10.20.2.23/24}\n")
    files.check_on_copy("lab", lab_files.root, changes)  # the edited site validates
    before = (lab_files.root / "topologies/sites/lab.yaml").read_text()
    assert before == design.old  # nothing written yet
    files.write(lab_files.root, changes)
    site_after, _warnings = load_and_check("lab", lab_files.root)
    assert site_after.hosts["stor-2"].fabric_addresses["fab1"] == ipaddress.IPv4Interface("10.20.2.23/24")
    assert [str(c.b) for c in site_after.cables if c.a.device == "stor-2"] == ["leaf-1:swp7", "leaf-2:swp7"]


def test_a_port_the_block_lacks_is_refused(lab_site):
    with pytest.raises(BadInput, match="LLDP shows port 'eth9' on leaf-1:swp7, which a stor-xl does not have"):
        add.plan_node(lab_site, found(lab_site, links=(FabricLink("eth9", "leaf-1", "swp7"),)))


def test_a_cable_to_a_used_switch_port_fails_validation_and_writes_nothing(lab_files):
    site = lab_files.load()
    plan = add.plan_node(site, found(site, links=(FabricLink("fab0", "leaf-1", "swp1"),)))
    changes = add.file_changes(site, lab_files.root, [plan])
    before = (lab_files.root / "topologies/sites/lab.yaml").read_text()
    with pytest.raises(Exception) as error:
        files.check_on_copy("lab", lab_files.root, changes)
    assert "leaf-1:swp1" in str(getattr(error.value, "findings", error.value)) or "swp1" in repr(error.value)
    assert (lab_files.root / "topologies/sites/lab.yaml").read_text() == before


def test_diff_shows_the_new_file(lab_files):
    site = lab_files.load()
    changes = add.file_changes(site, lab_files.root, [add.plan_node(site, found(site))])
    text = files.diff_text(changes)
    assert "--- /dev/null\n+++ b/inventories/lab/host_vars/stor-2.yml\n" in text
    assert "+++ b/topologies/sites/lab.yaml\n" in text and "+++ b/inventories/lab/hosts.yml\n" in text


def test_two_nodes_in_one_run_get_their_own_names_places_and_addresses(lab_files):
    site = lab_files.load()
    from rackform.day2 import naming

    names, addresses, reserved = naming.taken_names(site), set(), []
    first = add.plan_node(site, found(site), taken_names=names, taken_addresses=addresses, reserved=reserved)
    second = add.plan_node(site, found(site, bmc_address="10.10.1.24", serial="LAB-STOR-3", bmc_mac="02:0a:0a:01:00:18",
                                       management_mac="02:0a:0a:00:00:18",
                                       links=(FabricLink("fab0", "leaf-1", "swp8"), FabricLink("fab1", "leaf-2", "swp8"))),
                           taken_names=names, taken_addresses=addresses, reserved=reserved)
    assert (first.host, first.place.position_u) == ("stor-2", 23)
    assert (second.host, second.place.position_u) == ("stor-3", 27)  # above the first's 4 U
    assert second.management_address == ipaddress.IPv4Address("10.10.0.24")
    changes = add.file_changes(site, lab_files.root, [first, second])
    files.check_on_copy("lab", lab_files.root, changes)
