"""`rackform bmc status|power` and `rackform discover` (rackform.commands), end to end on the
shipped lab design with each BMC address answered by a fake BMC on the loopback network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

import rackform

from rackform.commands import bmc as bmc_command
from rackform.commands import discover as discover_command
from rackform.ipmi import cli_options, discovery
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.ipmi.fleet import BmcLocks, Fleet, RetryPolicy
from rackform.ipmi.session import LanSession, Timeouts
from rackform.ipmi.status import rack_power, site_targets
from rackform.lab.fru import fru_area
from rackform.model.loader import load_site

LAB_BMCS = {"mgmt-1": "10.10.1.11", "mgmt-2": "10.10.1.12", "mgmt-3": "10.10.1.13", "stor-1": "10.10.1.14",
            "gpu-1": "10.10.1.15", "gpu-2": "10.10.1.16"}
WATTS = {"mgmt-1": 400, "mgmt-2": 400, "mgmt-3": 400, "stor-1": 900, "gpu-1": 8500, "gpu-2": 8500}


class FakeRack:
    """One fake BMC per lab host, on 127.0.0.N (same port); sessions are redirected there."""

    def __init__(self, configs: dict[str, FakeBmcConfig]):
        self.fakes: dict[str, FakeBmc] = {}
        port = 0
        for n, (host, config) in enumerate(sorted(configs.items()), start=2):
            fake = FakeBmc(config, host=f"127.0.0.{n}", port=port)
            port = fake.port
            self.fakes[LAB_BMCS[host]] = fake
        self.port = port

    def __enter__(self) -> FakeRack:
        for fake in self.fakes.values():
            fake.start()
        return self

    def __exit__(self, *_exc) -> None:
        for fake in self.fakes.values():
            fake.stop()

    def session(self, address: str, credentials, **options) -> LanSession:
        fake = self.fakes.get(address)
        where = (fake.address, fake.port) if fake else ("127.0.0.250", self.port)
        return LanSession(where[0], credentials, **{**options, "port": where[1]})

    def fleet(self, args, credentials) -> Fleet:
        return Fleet(credentials, retry=RetryPolicy(attempts=max(1, args.attempts), jitter=0.0),
                     timeouts=Timeouts(reply_s=0.2, resends=0), session_factory=self.session,
                     sleep=lambda _s: None, locks=BmcLocks())


def lab_configs(**overrides: FakeBmcConfig) -> dict[str, FakeBmcConfig]:
    return {host: overrides.get(host.replace("-", "_"), FakeBmcConfig(dcmi_power_w=WATTS[host], power="on"))
            for host in LAB_BMCS}


def parse(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture()
def rack(monkeypatch, request):
    configs = getattr(request, "param", None) or lab_configs()
    with FakeRack(configs) as fake_rack:
        monkeypatch.setattr(bmc_command, "fleet_from", fake_rack.fleet)
        monkeypatch.setattr(discover_command, "fleet_from", fake_rack.fleet)
        yield fake_rack


def status(root: Path, capsys, *extra: str) -> tuple[int, str]:
    code = bmc_command.run(parse(bmc_command, ["status", "lab", "--root", str(root), "--factory", *extra]))
    return code, capsys.readouterr().out


# --- bmc status -------------------------------------------------------------------------------------


def test_status_prints_one_row_per_node(rack, lab_files, capsys):
    code, out = status(lab_files.root, capsys)
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0] in LAB_BMCS}
    assert code == 0 and rows["gpu-1"][1:] == ["r1", "10.10.1.15", "on", "8,500", "2.17", "-", "none", "ok"]


def _with_fru(serial: str) -> FakeBmcConfig:
    return FakeBmcConfig(dcmi_power_w=8500, power="on", fru=fru_area("NVIDIA", "NVIDIA DGX-1", serial))


@pytest.mark.parametrize("rack", [lab_configs(gpu_1=_with_fru("LAB-GPU-1"))], indirect=True)
def test_status_shows_the_fru_serial(rack, lab_files, capsys):
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 0 and gpu_1.split()[6:] == ["LAB-GPU-1", "none", "ok"]


WEAK_GPU_1 = [lab_configs(gpu_1=FakeBmcConfig(suites=frozenset({0, 3, 17}), ipmi15=True, power="on"))]
NO_LAB_EXCEPTION = ("manufacturer_id: 4753", "manufacturer_id: 343")  # the fakes report 4753, as ipmi_sim


@pytest.mark.parametrize("rack", WEAK_GPU_1, indirect=True)
def test_a_bmc_that_lets_suite_0_and_ipmi_15_in_fails_the_status(rack, lab_files, capsys):
    lab_files.edit_site(*NO_LAB_EXCEPTION)
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 1 and "suite 0, IPMI 1.5" in gpu_1 and "no site exception for this model" in gpu_1
    assert "1 BMC(s) let a weak login in: gpu-1" in out
    assert rack.fakes["10.10.1.15"].suite0_logins == 1  # really tried, not inferred


@pytest.mark.parametrize("rack", [lab_configs(gpu_1=FakeBmcConfig(suites=frozenset({0, 3, 17}), power="on"))],
                         indirect=True)
def test_a_bmc_with_suite_0_closed_passes_the_status(rack, lab_files, capsys):
    lab_files.edit_site(*NO_LAB_EXCEPTION)
    fake = rack.fakes["10.10.1.15"]
    fake.cipher_levels[fake.cipher_entries.index(0)] = 0  # what hardening sets (tests/unit/test_ipmi_ciphers.py)
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 0 and gpu_1.split()[-2:] == ["none", "ok"]


@pytest.mark.parametrize("rack", WEAK_GPU_1, indirect=True)
def test_the_sites_exception_for_the_model_shows_the_open_logins_with_its_reason(rack, lab_files, capsys):
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 0 and "suite 0, IPMI 1.5" in gpu_1
    assert "ok, accepted by the site: a simulator that stores the cipher suite privilege levels" in gpu_1


@pytest.mark.parametrize("rack", WEAK_GPU_1, indirect=True)
def test_an_exception_for_suite_0_only_still_fails_ipmi_15(rack, lab_files, capsys):
    lab_files.edit_site("allow: [cipher_suite_0, ipmi_1.5]", "allow: [cipher_suite_0]")
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 1 and "IPMI 1.5 still get(s) in" in gpu_1 and "accepted by the site" in gpu_1


@pytest.mark.parametrize("rack", [lab_configs(gpu_1=_with_fru("LAB-GPU-2"))], indirect=True)
def test_a_bmc_whose_serial_contradicts_the_inventory_fails_the_status(rack, lab_files, capsys):
    code, out = status(lab_files.root, capsys)
    gpu_1 = next(line for line in out.splitlines() if line.startswith("gpu-1 "))
    assert code == 1 and "serial mismatch: the BMC says LAB-GPU-2, the inventory says LAB-GPU-1" in gpu_1
    assert "1 serial mismatch(es): gpu-1" in out


def test_status_compares_each_rack_with_its_budget(rack, lab_files, capsys):
    _code, out = status(lab_files.root, capsys)
    rack_row = next(line for line in out.splitlines() if line.startswith("r1 "))
    assert rack_row.split()[:6] == ["r1", "19,100", "35,000", "55%", "6/6", "ok"]


def test_rack_over_budget_fails_the_status(rack, lab_files, capsys):
    lab_files.edit_site("power_budget_w: 35000", "power_budget_w: 18000")
    code, out = status(lab_files.root, capsys)
    assert code == 1 and "1 rack(s) over budget: r1" in out


@pytest.mark.parametrize("rack", [lab_configs(gpu_2=FakeBmcConfig(password="rotated"))], indirect=True)
def test_a_node_that_refuses_the_login_says_so_and_fails_the_status(rack, lab_files, capsys):
    code, out = status(lab_files.root, capsys)
    gpu_2 = next(line for line in out.splitlines() if line.startswith("gpu-2 "))
    assert code == 1 and "auth rejected:" in gpu_2 and "rejected the password of user 'ADMIN'" in gpu_2
    assert "5/6 BMCs answered" in out


@pytest.mark.parametrize("rack", [lab_configs(stor_1=FakeBmcConfig(answer_packets=0))], indirect=True)
def test_an_unreachable_node_leaves_its_rack_figure_incomplete(rack, lab_files, capsys):
    _code, out = status(lab_files.root, capsys, "--attempts", "1")
    assert "incomplete: 1 node(s) without a reading" in out


def test_status_of_an_unknown_site_is_bad_input(rack, lab_files, capsys):
    code = bmc_command.run(parse(bmc_command, ["status", "nosuch", "--root", str(lab_files.root), "--factory"]))
    assert code == 2 and "no such site" in capsys.readouterr().err


def test_without_a_secret_store_status_asks_for_a_login(rack, lab_files, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rackform.secrets", None)  # as if the store were not installed
    monkeypatch.delattr(rackform, "secrets", raising=False)
    code = bmc_command.run(parse(bmc_command, ["status", "lab", "--root", str(lab_files.root)]))
    assert code == 2 and "--factory" in capsys.readouterr().err


def test_a_secret_store_without_a_vault_says_so(rack, lab_files, capsys, monkeypatch):
    import types

    store = types.ModuleType("rackform.secrets")

    def bmc_credentials(site, root):
        raise RuntimeError("no vault for site lab yet: run `rackform secrets lab`")

    store.bmc_credentials = bmc_credentials
    monkeypatch.setitem(sys.modules, "rackform.secrets", store)
    monkeypatch.setattr(rackform, "secrets", store, raising=False)  # `from rackform import secrets` reads this
    code = bmc_command.run(parse(bmc_command, ["status", "lab", "--root", str(lab_files.root)]))
    assert code == 2 and "no vault for site lab yet" in capsys.readouterr().err


def test_password_file_supplies_the_login(rack, lab_files, capsys, tmp_path: Path):
    secret = tmp_path / "bmc-password"
    secret.write_text("ADMIN\n")
    code = bmc_command.run(parse(bmc_command, ["status", "lab", "--root", str(lab_files.root),
                                               "--password-file", str(secret)]))
    assert code == 0


def test_rack_power_counts_only_nodes_with_a_reading(lab_site):
    from rackform.ipmi.fleet import NodeResult
    from rackform.ipmi.status import NodeStatus

    results = [NodeResult("gpu-1", "a", value=NodeStatus("on", 8500.0)), NodeResult("gpu-2", "b", value=NodeStatus("on", None))]
    (r1,) = rack_power(lab_site, results)
    assert (r1.measured_w, r1.nodes_measured, r1.nodes_with_bmc) == (8500.0, 1, 2)


def test_targets_follow_rack_order(lab_site):
    assert [t.node for t in site_targets(lab_site)] == ["mgmt-1", "mgmt-2", "mgmt-3", "stor-1", "gpu-1", "gpu-2"]


# --- bmc power ---------------------------------------------------------------------------------------


def test_power_off_on_named_nodes_only(rack, lab_files, capsys):
    code = bmc_command.run(parse(bmc_command, ["power", "lab", "off", "--root", str(lab_files.root), "--factory",
                                               "--nodes", "gpu-1", "gpu-2"]))
    powers = {address: fake.power for address, fake in rack.fakes.items()}
    assert code == 0 and powers == {**{a: "on" for a in LAB_BMCS.values()}, "10.10.1.15": "off", "10.10.1.16": "off"}


def test_power_on_an_unknown_node_is_bad_input(rack, lab_files, capsys):
    code = bmc_command.run(parse(bmc_command, ["power", "lab", "on", "--root", str(lab_files.root), "--factory",
                                               "--nodes", "gpu-9"]))
    assert code == 2 and "no BMC known for gpu-9" in capsys.readouterr().err


# --- discover -----------------------------------------------------------------------------------------


@pytest.fixture()
def pending_lab(lab_files):
    for host in ("stor-1", "gpu-2"):
        lab_files.path(f"inventories/lab/host_vars/{host}.yml").unlink()
        lab_files.edit("inventories/lab/hosts.yml", f"    {host}:\n", "")
    return lab_files


@pytest.fixture()
def sweep_redirected(rack, monkeypatch):
    """The sweep asks the fakes (127.0.0.N) and reports their lab addresses."""
    real_sweep = discovery.sweep
    by_loopback = {fake.address: address for address, fake in rack.fakes.items()}

    def sweep(addresses, **options):
        asked = [rack.fakes[str(a)].address for a in addresses if str(a) in rack.fakes]
        answers = real_sweep(asked, **{**options, "port": rack.port, "timeouts": Timeouts(0.3, 0)})
        return {by_loopback[a]: discovery.SweepAnswer(by_loopback[a], answer.capabilities)
                for a, answer in answers.items()}

    monkeypatch.setattr(discovery, "sweep", sweep)
    monkeypatch.setattr(discovery, "neighbour_mac", lambda address, *a: None)


def test_discover_enlists_the_hosts_the_design_awaits(sweep_redirected, pending_lab, capsys):
    code = discover_command.run(parse(discover_command, ["lab", "--root", str(pending_lab.root), "--oob", "10.10.1.0/24"]))
    site = load_site("lab", pending_lab.root)
    assert code == 0 and (str(site.hosts["stor-1"].bmc_address), str(site.hosts["gpu-2"].bmc_address)) == (
        "10.10.1.14", "10.10.1.16")


def test_discover_dry_run_writes_nothing(sweep_redirected, pending_lab, capsys):
    before = (pending_lab.root / "inventories" / "lab" / "hosts.yml").read_text()
    code = discover_command.run(parse(discover_command, ["lab", "--root", str(pending_lab.root), "--oob",
                                                         "10.10.1.0/24", "--dry-run"]))
    out = capsys.readouterr().out
    assert code == 0 and "stor-1: bmc 10.10.1.14" in out
    assert (pending_lab.root / "inventories" / "lab" / "hosts.yml").read_text() == before


@pytest.mark.parametrize("rack", [lab_configs(gpu_2=FakeBmcConfig(password="rotated"))], indirect=True)
def test_discover_reports_a_bmc_it_cannot_log_in_to(sweep_redirected, pending_lab, capsys):
    code = discover_command.run(parse(discover_command, ["lab", "--root", str(pending_lab.root), "--oob",
                                                         "10.10.1.10-20", "--attempts", "1"]))
    err = capsys.readouterr().err
    assert code == 1 and "not enlisted: 10.10.1.16: auth rejected" in err


def test_discover_again_finds_nothing_new(sweep_redirected, pending_lab, capsys):
    arguments = ["lab", "--root", str(pending_lab.root), "--oob", "10.10.1.0/24"]
    discover_command.run(parse(discover_command, arguments))
    capsys.readouterr()
    code = discover_command.run(parse(discover_command, arguments))
    assert code == 0 and "nothing new to enlist" in capsys.readouterr().out


@pytest.mark.parametrize(("oob", "message"), [("10.10.0.0/24", "outside the site's OOB network"),
                                               ("ten-ten", "not an address range")])
def test_discover_refuses_a_range_outside_the_oob_network(lab_files, capsys, oob: str, message: str):
    code = discover_command.run(parse(discover_command, ["lab", "--root", str(lab_files.root), "--oob", oob]))
    assert code == 2 and message in capsys.readouterr().err


def test_discover_logs_in_with_the_factory_login_by_default():
    args = parse(discover_command, ["lab", "--oob", "10.10.1.0/24"])
    login = cli_options.credential_source(args, "lab", Path("."))("anything")
    assert (login.user, login.password) == ("ADMIN", "ADMIN")
