"""`rackform node add` against an in-process BMC: the refusals come before any power change or write.

The fake BMC (rackform.ipmi.fakebmc) listens on 127.0.1.23:623, so the lab site's copy here
has its out-of-band network moved to 127.0.1.0/24 (loopback: no interface to configure).
Binding port 623 needs root: skipped otherwise.
"""

from __future__ import annotations

import os

import pytest

from rackform.cli import main
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.lab.fru import fru_area

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="binds UDP port 623 (needs root)")

BMC = "127.0.1.23"
CHASSIS_CONTROL = (0x00, 0x02)


def snapshot(root):
    return {path.relative_to(root): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture()
def loopback_site(site_root):
    """The lab site with its OOB network (and every BMC address) on 127.0.1.0/24."""
    for path in [site_root / "topologies/sites/lab.yaml", *(site_root / "inventories/lab/host_vars").glob("*.yml")]:
        path.write_text(path.read_text().replace("10.10.1.", "127.0.1."))
    return site_root


def fake_bmc(manufacturer: str, product: str) -> FakeBmc:
    return FakeBmc(FakeBmcConfig(fru=fru_area(manufacturer, product, "NEW-1")), host=BMC, port=623)


def test_ambiguous_block_type_is_refused_before_power_or_files(loopback_site, capsys):
    before = snapshot(loopback_site)
    with fake_bmc("vScaler", "vScaler") as bmc:
        code = main(["node", "add", "lab", "--root", str(loopback_site), "--oob", "127.0.1.20-30", "--reply-timeout", "0.5"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "127.0.1.23: ambiguous block type: FRU manufacturer 'vScaler', product 'vScaler' fits" in err
    assert "choose one with --block" in err
    assert CHASSIS_CONTROL not in bmc.commands  # never powered on
    assert snapshot(loopback_site) == before


def test_rack_full_is_refused_before_power_or_files(loopback_site, capsys):
    before = snapshot(loopback_site)
    with fake_bmc("NVIDIA", "NVIDIA DGX H100") as bmc:
        code = main(["node", "add", "lab", "--root", str(loopback_site), "--oob", "127.0.1.23", "--reply-timeout", "0.5"])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "1 BMC(s) answered in 127.0.1.23: 0 known, 1 new" in captured.out
    assert "rack full: no place for a dgx-h100 (8 U, 10200 W): r1: power: 26700 W + 10200 W (max) exceeds the " \
           "budget of 35000 W" in captured.err
    assert CHASSIS_CONTROL not in bmc.commands
    assert snapshot(loopback_site) == before


def test_a_given_position_that_overlaps_is_refused(loopback_site, capsys):
    with fake_bmc("vScaler", "vScaler vGPU (1 node, 1U, 4x V100)") as bmc:
        code = main(["node", "add", "lab", "--root", str(loopback_site), "--oob", "127.0.1.23", "--reply-timeout", "0.5", "--rack", "r1",
                     "--position", "8"])
    assert code == 2
    assert "vgpu cannot go at U8: U8-U8 overlaps gpu-1" in capsys.readouterr().err
    assert CHASSIS_CONTROL not in bmc.commands


def test_a_dry_run_never_powers_a_node_on_and_writes_nothing(loopback_site, capsys):
    before = snapshot(loopback_site)
    with fake_bmc("vScaler", "vScaler vGPU (1 node, 1U, 4x V100)") as bmc:
        code = main(["node", "add", "lab", "--root", str(loopback_site), "--oob", "127.0.1.23", "--reply-timeout", "0.5",
                     "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "127.0.1.23: powered off; a dry run does not power it on" in out
    assert "dry run: " in out and "nothing was written" in out
    assert "+" in out  # the diff of the site files it would write
    assert CHASSIS_CONTROL not in bmc.commands
    assert snapshot(loopback_site) == before
