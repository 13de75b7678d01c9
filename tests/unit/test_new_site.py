"""`rackform new-site NAME --from SITE`: a scaffold that validates, with the new site's addresses,
and bad input that writes nothing."""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest

from rackform.cli import main
from rackform.model.loader import load_site

EXIT_OK, EXIT_BAD_INPUT = 0, 2
NEW_PREFIXES = ["--management-prefix", "10.30.0.0/24", "--oob-prefix", "10.30.1.0/24",
                 "--fabric-prefix", "compute=10.40.0.0/16"]
MANAGEMENT, OOB, COMPUTE = (IPv4Network(p) for p in ("10.30.0.0/24", "10.30.1.0/24", "10.40.0.0/16"))


def new_site(root: Path, *options: str, name: str = "branch", source: str = "lab") -> int:
    return main(["new-site", name, "--from", source, "--root", str(root), *options])


def written(root: Path, name: str = "branch") -> list[Path]:
    return [path for path in (root / "topologies" / "sites" / f"{name}.yaml", root / "inventories" / name)
            if path.exists()]


def fill_placeholders(root: Path, name: str = "branch") -> None:
    """What a person does after scaffolding: serials and MACs from the delivery note."""
    for index, path in enumerate(sorted((root / "inventories" / name / "host_vars").glob("*.yml")), start=1):
        counter = iter(range(1, 100))

        def mac(_match, index=index, counter=counter) -> str:
            return f"02:b0:00:{index:02x}:00:{next(counter):02x}"

        text = path.read_text(encoding="utf-8")
        text = text.replace('# serial: "TO FILL IN"', f"serial: BRANCH-{index:03d}")
        text = re.sub(r'# (management_mac|bmc_mac): "TO FILL IN"', lambda m: f'{m[1]}: "{mac(m)}"', text)
        text = re.sub(r'\{address: (\S+)\}  # mac: "TO FILL IN"', lambda m: f'{{address: {m[1]}, mac: "{mac(m)}"}}', text)
        path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- a scaffold that validates


def test_scaffold_from_lab_validates_before_and_after_filling_in(site_root, capsys):
    assert new_site(site_root, *NEW_PREFIXES) == EXIT_OK
    assert "fill in the serials and MACs marked TO FILL IN" in capsys.readouterr().out
    assert main(["validate", "branch", "--root", str(site_root)]) == EXIT_OK

    fill_placeholders(site_root)

    assert main(["validate", "branch", "--root", str(site_root)]) == EXIT_OK
    branch = load_site("branch", site_root)
    assert branch.hosts["gpu-1"].serial.startswith("BRANCH-") and branch.switches["leaf-1"].management_mac.startswith("02:b0:")
    assert all(host.fabric_macs for host in branch.hosts.values())


def test_scaffold_has_the_source_design_and_a_stub_per_host_and_managed_switch(site_root):
    new_site(site_root, *NEW_PREFIXES)
    lab, branch = load_site("lab", site_root), load_site("branch", site_root)

    assert branch.name == "branch" and [r.name for r in branch.racks] == [r.name for r in lab.racks]
    assert list(branch.hosts) == list(lab.hosts) and list(branch.switches) == list(lab.switches)
    assert len(branch.cables) == len(lab.cables)
    stubs = sorted(path.stem for path in (site_root / "inventories/branch/host_vars").glob("*.yml"))
    assert stubs == sorted([*lab.hosts, "leaf-1", "leaf-2", "spine-1"])  # oob-1 is unmanaged


def test_every_address_comes_from_the_new_prefixes(site_root):
    new_site(site_root, *NEW_PREFIXES)
    branch = load_site("branch", site_root)

    nodes = [*branch.hosts.values(), *(s for s in branch.switches.values() if s.os != "unmanaged")]
    assert all(node.management_address in MANAGEMENT for node in nodes)
    assert all(host.bmc_address in OOB for host in branch.hosts.values())
    fabric = [iface for host in branch.hosts.values() for iface in host.fabric_addresses.values()]
    assert len(fabric) == 12 and all(iface.ip in COMPUTE for iface in fabric)
    assert branch.networks["mgmt"].gateway == IPv4Address("10.30.0.1")
    assert branch.kubernetes.api_vip == IPv4Address("10.30.0.2")
    inventory_text = "".join(p.read_text() for p in (site_root / "inventories/branch").rglob("*.yml"))
    site_text = (site_root / "topologies/sites/branch.yaml").read_text()
    assert "10.10." not in inventory_text + site_text and "10.20." not in inventory_text + site_text


def test_each_leaf_and_port_gets_its_own_server_subnet_and_keeps_the_first_address(site_root):
    new_site(site_root, *NEW_PREFIXES)
    branch = load_site("branch", site_root)

    gpu = branch.hosts["gpu-1"].fabric_addresses
    assert {str(gpu["fab0"].network), str(gpu["fab1"].network)} == {"10.40.0.0/24", "10.40.1.0/24"}
    fabric = [iface for host in branch.hosts.values() for iface in host.fabric_addresses.values()]
    assert IPv4Address("10.40.0.1") not in {iface.ip for iface in fabric}  # leaf-1's: the servers' gateway


def test_a_small_fabric_prefix_gets_smaller_leaf_subnets(site_root):
    assert new_site(site_root, *NEW_PREFIXES[:4], "--fabric-prefix", "compute=10.40.0.0/26") == EXIT_OK

    gpu = load_site("branch", site_root).hosts["gpu-1"].fabric_addresses
    assert gpu["fab0"].network.prefixlen == 28 and gpu["fab0"].ip in IPv4Network("10.40.0.0/26")


def test_a_fabric_network_not_named_keeps_the_source_prefix(site_root, capsys):
    assert new_site(site_root, *NEW_PREFIXES[:4]) == EXIT_OK

    assert "fabric network compute keeps lab's prefix 10.20.0.0/16" in capsys.readouterr().out
    assert load_site("branch", site_root).networks["compute"].prefix == IPv4Network("10.20.0.0/16")


@pytest.mark.parametrize("source", ["reference", "campus"])
def test_scaffolds_from_the_other_shipped_sites_validate(site_root, source):
    options = ["--management-prefix", "10.50.0.0/24", "--oob-prefix", "10.50.1.0/24"]

    assert new_site(site_root, *options, name="second", source=source) == EXIT_OK
    assert main(["validate", "second", "--root", str(site_root)]) == EXIT_OK
    for host in load_site("second", site_root).hosts.values():
        subnets = [iface.network for iface in host.fabric_addresses.values()]
        assert len(subnets) == len(set(subnets)), f"{host.name} has two ports in one subnet"


# ---------------------------------------------------------------- bad input writes nothing


def test_an_existing_site_is_never_overwritten(site_root, capsys):
    before = (site_root / "topologies/sites/reference.yaml").read_text()

    assert new_site(site_root, *NEW_PREFIXES, name="reference") == EXIT_BAD_INPUT

    assert "reference.yaml already exists: new-site never overwrites a site" in capsys.readouterr().err
    assert (site_root / "topologies/sites/reference.yaml").read_text() == before


def test_an_existing_inventory_alone_is_refused(site_root):
    (site_root / "inventories/branch").mkdir()

    assert new_site(site_root, *NEW_PREFIXES) == EXIT_BAD_INPUT
    assert not (site_root / "topologies/sites/branch.yaml").exists()


def test_a_management_prefix_too_small_is_a_clear_error_that_writes_nothing(site_root, capsys):
    assert new_site(site_root, "--management-prefix", "10.30.0.0/29", *NEW_PREFIXES[2:]) == EXIT_BAD_INPUT

    err = capsys.readouterr().err
    assert ("--management-prefix 10.30.0.0/29 holds 6 usable addresses but the new site needs 11 "
            "(9 hosts and managed switches, the gateway, the API VIP): use a shorter prefix") in err
    assert "nothing was written" in err and "Traceback" not in err
    assert written(site_root) == []


def test_an_oob_prefix_too_small_writes_nothing(site_root, capsys):
    assert new_site(site_root, *NEW_PREFIXES[:2], "--oob-prefix", "10.30.1.0/30") == EXIT_BAD_INPUT

    assert "--oob-prefix 10.30.1.0/30 holds 2 usable addresses but the new site needs 6" in capsys.readouterr().err
    assert written(site_root) == []


def test_a_fabric_prefix_too_small_writes_nothing(site_root, capsys):
    assert new_site(site_root, *NEW_PREFIXES[:4], "--fabric-prefix", "compute=10.40.0.0/29") == EXIT_BAD_INPUT

    assert "fabric network compute 10.40.0.0/29 holds 8 addresses" in capsys.readouterr().err
    assert written(site_root) == []


def test_a_missing_prefix_is_named(site_root, capsys):
    assert new_site(site_root, "--management-prefix", "10.30.0.0/24") == EXIT_BAD_INPUT

    assert "give the new site's out-of-band prefix: --oob-prefix (lab uses 10.10.1.0/24)" in capsys.readouterr().err
    assert written(site_root) == []


def test_prefixes_that_overlap_are_refused_by_validation_and_leave_nothing(site_root, capsys):
    # both fit, but the management and out-of-band networks are one range: validate refuses
    assert new_site(site_root, "--management-prefix", "10.30.0.0/24", "--oob-prefix", "10.30.0.0/25") == EXIT_BAD_INPUT

    err = capsys.readouterr().err
    assert "error: networks[" in err and "overlaps" in err and "[prefixes_do_not_overlap]" in err
    assert written(site_root) == []


def test_an_unknown_fabric_network_is_named(site_root, capsys):
    assert new_site(site_root, *NEW_PREFIXES[:4], "--fabric-prefix", "storage=10.40.0.0/16") == EXIT_BAD_INPUT

    assert "lab has no fabric network 'storage'; its fabric networks: compute" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["Branch", "branch_2", "branch-"])
def test_a_bad_site_name_is_refused(site_root, name):
    assert new_site(site_root, *NEW_PREFIXES, name=name) == EXIT_BAD_INPUT
    assert written(site_root, name) == []


def test_a_prefix_with_host_bits_is_refused_by_the_command_line(site_root, capsys):
    with pytest.raises(SystemExit) as exited:
        new_site(site_root, "--management-prefix", "10.30.0.5/24", *NEW_PREFIXES[2:])

    assert exited.value.code == EXIT_BAD_INPUT
    assert "has host bits set" in capsys.readouterr().err
