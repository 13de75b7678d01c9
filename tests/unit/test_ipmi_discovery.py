"""Discovery (rackform.ipmi.discovery, rackform.ipmi.enlist): ranges, the sweep, naming new
nodes, and writing inventory entries that never touch existing ones."""

from __future__ import annotations

import hashlib
import ipaddress
from pathlib import Path

import pytest
import yaml

from rackform.ipmi import discovery, enlist
from rackform.ipmi.credentials import factory_credentials
from rackform.ipmi.discovery import BmcFacts, RangeError, parse_range
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.lab.fru import fru_area
from rackform.ipmi.fleet import BmcLocks, Fleet, RetryPolicy
from rackform.ipmi.session import Timeouts
from rackform.model.loader import load_site

OOB = ipaddress.IPv4Network("10.10.1.0/24")
QUICK = Timeouts(reply_s=0.3, resends=1)


# --- ranges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "first", "last", "count"), [
    ("10.10.1.0/24", "10.10.1.1", "10.10.1.254", 254),
    ("10.10.1.10-10.10.1.20", "10.10.1.10", "10.10.1.20", 11),
    ("10.10.1.10-20", "10.10.1.10", "10.10.1.20", 11),
    ("10.10.1.7", "10.10.1.7", "10.10.1.7", 1),
])
def test_range_forms(text: str, first: str, last: str, count: int):
    addresses = parse_range(text, OOB)
    assert (str(addresses[0]), str(addresses[-1]), len(addresses)) == (first, last, count)


@pytest.mark.parametrize(("text", "message"), [
    ("10.10.0.0/24", "outside the site's OOB network"),
    ("10.10.1.20-10", "ends before it starts"),
    ("banana", "is not an address range"),
    ("10.0.0.0/8", "scan at most"),
])
def test_bad_ranges_say_why(text: str, message: str):
    with pytest.raises(RangeError, match=message):
        parse_range(text, OOB if "outside" in message else None)


# --- the sweep -----------------------------------------------------------------------------------


@pytest.fixture()
def three_bmcs():
    """Fake BMCs on 127.0.0.2-4, one port, like a rack's BMCs on UDP 623; 127.0.0.5 has none."""
    first = FakeBmc(FakeBmcConfig(fru=fru_area("Acme", "X1", "SN-2")), host="127.0.0.2")
    port = first.port
    fakes = [first, FakeBmc(FakeBmcConfig(ipmi20=False), host="127.0.0.3", port=port),
             FakeBmc(FakeBmcConfig(password="rotated"), host="127.0.0.4", port=port)]
    for fake in fakes:
        fake.start()
    yield fakes
    for fake in fakes:
        fake.stop()


def test_sweep_finds_the_bmcs_and_only_them(three_bmcs):
    answers = discovery.sweep(["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"], port=three_bmcs[0].port,
                              timeouts=QUICK)
    assert sorted(answers) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def test_sweep_sends_no_credentials(three_bmcs):
    discovery.sweep(["127.0.0.2"], port=three_bmcs[0].port, timeouts=QUICK)
    assert (three_bmcs[0].commands, three_bmcs[0].logins) == ([], 0)


def test_an_ipmi_15_only_bmc_is_refused_from_its_sweep_answer(three_bmcs):
    answers = discovery.sweep(["127.0.0.2", "127.0.0.3"], port=three_bmcs[0].port, timeouts=QUICK)
    assert (discovery.refusal(answers["127.0.0.2"]), str(discovery.refusal(answers["127.0.0.3"]))) == (
        None, "suite refused: 127.0.0.3: the BMC speaks only IPMI 1.5 (no RMCP+/lanplus): its logins use MD5 "
              "or plain-text passwords, so rackform refuses it; enable IPMI 2.0 (lanplus) on the BMC")


def test_identify_reads_serial_mac_and_firmware(three_bmcs):
    fleet = Fleet(factory_credentials(), timeouts=QUICK, retry=RetryPolicy(attempts=1), locks=BmcLocks())
    fleet_targets = discovery.identify(_on_port(fleet, three_bmcs[0].port), ["127.0.0.2"])
    facts = fleet_targets[0].value
    assert (facts.serial, facts.bmc_mac, facts.firmware, facts.guid) == (
        "SN-2", "02:00:00:aa:bb:cc", "2.17", bytes(range(16))[::-1].hex())


def test_identify_reports_a_bmc_that_refuses_the_factory_login(three_bmcs):
    fleet = Fleet(factory_credentials(), timeouts=QUICK, retry=RetryPolicy(attempts=1), locks=BmcLocks())
    result = discovery.identify(_on_port(fleet, three_bmcs[0].port), ["127.0.0.4"])[0]
    assert str(result.reason) == "auth rejected"


def _on_port(fleet: Fleet, port: int) -> Fleet:
    """The fleet with every session on `port` (the fakes cannot all listen on 623)."""
    factory = fleet.session_factory
    fleet.session_factory = lambda address, credentials, **options: factory(address, credentials,
                                                                             **{**options, "port": port})
    return fleet


def test_neighbour_mac_reads_the_arp_table(tmp_path: Path):
    table = tmp_path / "arp"
    table.write_text("IP address       HW type     Flags       HW address            Mask     Device\n"
                     "10.10.1.15       0x1         0x2         02:0a:0a:01:00:0f     *        lab_oob\n"
                     "10.10.1.16       0x1         0x0         00:00:00:00:00:00     *        lab_oob\n")
    assert [discovery.neighbour_mac(a, table) for a in ("10.10.1.15", "10.10.1.16", "10.10.1.17")] == [
        "02:0a:0a:01:00:0f", None, None]


# --- naming and writing ----------------------------------------------------------------------------


def facts(address: str, serial: str | None = None, mac: str | None = None) -> BmcFacts:
    return BmcFacts(address=address, serial=serial, product=None, manufacturer_id=0x1291, product_id=1,
                    firmware="1.00", bmc_mac=mac, guid=None)


@pytest.fixture()
def pending_lab(lab_files):
    """The lab with stor-1 and gpu-2 placed in the design but missing from the inventory."""
    for host in ("stor-1", "gpu-2"):
        lab_files.path(f"inventories/lab/host_vars/{host}.yml").unlink()
        lab_files.edit("inventories/lab/hosts.yml", f"    {host}:\n", "")
    return lab_files


def test_design_lists_its_servers_in_rack_order(lab_files):
    design = enlist.load_design("lab", lab_files.root)
    assert design.server_hosts == ("mgmt-1", "mgmt-2", "mgmt-3", "stor-1", "gpu-1", "gpu-2")


def test_design_loads_while_the_inventory_lags_behind(pending_lab):
    design = enlist.load_design("lab", pending_lab.root)
    assert (design.oob, str(design.management)) == (OOB, "10.10.0.0/24")


def test_known_bmcs_come_from_the_inventory(pending_lab):
    inventory = enlist.read_inventory(pending_lab.root / "inventories" / "lab")
    assert inventory.bmc_addresses["10.10.1.15"] == "gpu-1" and "10.10.1.14" not in inventory.bmc_addresses


def test_new_bmcs_pair_with_the_hosts_the_design_awaits(pending_lab):
    design = enlist.load_design("lab", pending_lab.root)
    inventory = enlist.read_inventory(pending_lab.root / "inventories" / "lab")
    found = [facts("10.10.1.16"), facts("10.10.1.14"), facts("10.10.1.11")]  # .11 is mgmt-1's: known
    entries = enlist.plan_entries(design, inventory, found)
    assert [(e.name, e.facts.address, str(e.management_address)) for e in entries] == [
        ("stor-1", "10.10.1.14", "10.10.0.14"), ("gpu-2", "10.10.1.16", "10.10.0.16")]


def test_unmatched_counts_name_new_nodes_by_address(pending_lab):
    design = enlist.load_design("lab", pending_lab.root)
    inventory = enlist.read_inventory(pending_lab.root / "inventories" / "lab")
    entries = enlist.plan_entries(design, inventory, [facts("10.10.1.40")])
    assert [(e.name, e.placed_in_design) for e in entries] == [("node-10-10-1-40", False)]


def test_a_taken_management_address_moves_to_the_lowest_free_one(pending_lab):
    design = enlist.load_design("lab", pending_lab.root)
    taken = {ipaddress.IPv4Address("10.10.0.14"), ipaddress.IPv4Address("10.10.0.2")}
    address = enlist.allocate_management_address(design, "10.10.1.14", taken | set(design.reserved_management))
    assert str(address) == "10.10.0.3"  # .1 is the gateway, .2 taken


def test_gateway_and_api_vip_are_never_allocated(lab_files):
    design = enlist.load_design("lab", lab_files.root)
    assert {str(a) for a in design.reserved_management} == {"10.10.0.1", "10.10.0.5"}


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.yml")}


def test_written_entries_load_as_a_valid_site(pending_lab):
    inventory_path = pending_lab.root / "inventories" / "lab"
    design = enlist.load_design("lab", pending_lab.root)
    entries = enlist.plan_entries(design, enlist.read_inventory(inventory_path),
                                  [facts("10.10.1.14", "SN-14", "02:0a:0a:01:00:0e"), facts("10.10.1.16")])
    enlist.write_entries(inventory_path, entries)
    site = load_site("lab", pending_lab.root)
    assert (str(site.hosts["stor-1"].bmc_address), site.hosts["stor-1"].serial, site.hosts["stor-1"].bmc_mac) == (
        "10.10.1.14", "SN-14", "02:0a:0a:01:00:0e")


def test_existing_inventory_files_are_untouched(pending_lab):
    inventory_path = pending_lab.root / "inventories" / "lab"
    before = _digests(inventory_path)
    before.pop("hosts.yml")
    design = enlist.load_design("lab", pending_lab.root)
    enlist.write_entries(inventory_path, enlist.plan_entries(design, enlist.read_inventory(inventory_path),
                                                             [facts("10.10.1.14")]))
    after = _digests(inventory_path)
    assert {name: digest for name, digest in after.items() if name in before} == before


def test_existing_hosts_lines_are_kept_byte_for_byte(pending_lab):
    hosts_file = pending_lab.root / "inventories" / "lab" / "hosts.yml"
    before = hosts_file.read_text().splitlines(keepends=True)
    design = enlist.load_design("lab", pending_lab.root)
    inventory = enlist.read_inventory(hosts_file.parent)
    found = [facts("10.10.1.14"), facts("10.10.1.16")]
    enlist.write_entries(hosts_file.parent, enlist.plan_entries(design, inventory, found))
    after = hosts_file.read_text().splitlines(keepends=True)
    assert [line for line in after if line not in before] == ["    stor-1:\n", "    gpu-2:\n"]
    assert [line for line in after if line in before] == before


def test_an_existing_host_vars_file_is_never_overwritten(tmp_path: Path):
    inventory = tmp_path / "inv"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n    a:\n")
    (inventory / "host_vars" / "b.yml").write_text("precious: true\n")
    entry = enlist.Entry("b", facts("10.0.1.2"), ipaddress.IPv4Address("10.0.0.2"), placed_in_design=True)
    with pytest.raises(FileExistsError, match="nothing was written"):
        enlist.write_entries(inventory, [entry])
    assert ((inventory / "host_vars" / "b.yml").read_text(), (inventory / "hosts.yml").read_text()) == (
        "precious: true\n", "all:\n  hosts:\n    a:\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("all:\n  hosts:\n    a:\n    b:\n", "all:\n  hosts:\n    a:\n    b:\n    new-1:\n"),
    ("all:\n  hosts:\n    a:\n    b:", "all:\n  hosts:\n    a:\n    b:\n    new-1:\n"),
    ("all:\n  hosts:\n    a:\n      x: 1\n  children:\n    g: {}\n",
     "all:\n  hosts:\n    a:\n      x: 1\n    new-1:\n  children:\n    g: {}\n"),
    ("# site\nall:\n  hosts:\n", "# site\nall:\n  hosts:\n    new-1:\n"),
    ("all:\n    hosts:\n        a:\n", "all:\n    hosts:\n        a:\n        new-1:\n"),
])
def test_new_hosts_go_under_all_hosts(text: str, expected: str):
    updated = enlist.insert_hosts(text, ["new-1"])
    assert updated == expected and "new-1" in yaml.safe_load(updated)["all"]["hosts"]


def test_hosts_file_without_all_hosts_is_refused():
    with pytest.raises(ValueError, match="all.hosts"):
        enlist.insert_hosts("all:\n  children: {}\n", ["x"])


def test_host_vars_quote_an_odd_serial():
    entry = enlist.Entry("n", facts("10.0.1.2", serial="0123: odd # serial"), ipaddress.IPv4Address("10.0.0.2"),
                         placed_in_design=False)
    assert yaml.safe_load(enlist.host_vars_text(entry, "today"))["serial"] == "0123: odd # serial"
