"""`rackform fabric check SITE` as a command: exit status, text and JSON reports, and
where live values come from (the lab when it is up, devices with --live, none with
--design-only). Live reads are replaced by the recordings of tests/unit/data/fabric_check."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabric_check_support import DATA, SITE, make_root
from rackform.commands import fabric as command
from rackform.fabric import live_report
from rackform.fabric.live import SshTransport, read_cumulus, read_host



@pytest.fixture
def root(tmp_path) -> Path:
    return make_root(tmp_path)


def recorded(pfc_on_leaf: str = "[3]") -> dict:
    leaf = (DATA / "leaf-1.snapshot").read_text().replace("pfc.roce_ports.cos_list = [3]",
                                                          f"pfc.roce_ports.cos_list = {pfc_on_leaf}")
    return {
        "leaf-1": read_cumulus("leaf-1", leaf),
        "spine-1": read_cumulus("spine-1", (DATA / "spine-1.snapshot").read_text()),
        "node-1": read_host("node-1", (DATA / "node-1.snapshot").read_text(), ["fab0"]),
        "node-2": read_host("node-2", (DATA / "node-2.snapshot").read_text(), ["fab0"]),
    }


@pytest.fixture
def lab_up(monkeypatch):
    """Pretend the site's lab is up; `set(devices)` chooses what reading it returns."""
    state = {"devices": recorded()}
    monkeypatch.setattr(live_report, "lab_transport", lambda site_name: SshTransport())
    monkeypatch.setattr(live_report, "read_site", lambda site, reader: state["devices"])
    return state


@pytest.fixture
def no_lab(monkeypatch):
    monkeypatch.setattr(live_report, "lab_transport", lambda site_name: None)
    monkeypatch.setattr(live_report, "read_site", lambda site, reader: pytest.fail("no device may be read"))


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    code = command.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_clean_lab_exits_0(root, lab_up, capsys):
    code, out, _ = run([SITE, "--root", str(root)], capsys)
    assert code == 0 and out.splitlines()[-1].startswith("chktest: clean: the two ends of all 3 fabric link(s) agree")


def test_clean_lab_says_what_it_could_not_read(root, lab_up, capsys):
    _, out, _ = run([SITE, "--root", str(root)], capsys)
    assert ("not readable here (no RDMA NIC): trust mode, PFC priorities, RoCE DSCP -> priority -> traffic class, "
            "CNP priority, ECN at node-1:fab0, node-2:fab0") in out.splitlines()


def test_drift_exits_1_and_lists_the_link_with_both_ends(root, lab_up, capsys):
    lab_up["devices"] = recorded(pfc_on_leaf="[4]")
    code, out, _ = run([SITE, "--root", str(root)], capsys)
    lines = out.splitlines()
    start = lines.index("node-1:fab0 - leaf-1:swp1")
    assert (code, lines[start + 1:start + 4]) == (1, [
        "  PFC priorities (live): leaf-1:swp1 runs [4], the design says [3]",
        "      design  node-1:fab0 [3] | leaf-1:swp1 [3]",
        "      live    node-1:fab0 not readable here (no RDMA NIC) | leaf-1:swp1 [4]",
    ])


def test_json_report(root, lab_up, capsys):
    lab_up["devices"] = recorded(pfc_on_leaf="[4]")
    code, out, _ = run([SITE, "--root", str(root), "--json"], capsys)
    report = json.loads(out)
    first = report["mismatches"][0]
    assert (code, report["ok"], report["live"], first["link"], first["setting"], first["live"]) == (
        1, False, "lab chktest", "node-1:fab0 - leaf-1:swp1", "pfc_priorities",
        {"node-1:fab0": {"not_readable": "no RDMA NIC"}, "leaf-1:swp1": [4]})


def test_json_report_values_are_plain_data(root, lab_up, capsys):
    lab_up["devices"] = recorded()
    lab_up["devices"]["leaf-1"].qos.dscp_to_priority[26] = 4
    _, out, _ = run([SITE, "--root", str(root), "--json"], capsys)
    path = next(m for m in json.loads(out)["mismatches"] if m["setting"] == "roce_path")
    assert path["live"]["leaf-1:swp1"] == {"dscp": 26, "priority": 4, "traffic_class": 4}


def test_design_only_reads_no_device(root, lab_up, monkeypatch, capsys):
    monkeypatch.setattr(live_report, "read_site", lambda site, reader: pytest.fail("no device may be read"))
    code, out, _ = run([SITE, "--root", str(root), "--design-only"], capsys)
    assert (code, out.splitlines()[0]) == (0, "fabric check chktest: design only")


def test_without_a_lab_or_live_it_checks_the_design_and_says_so(root, no_lab, capsys):
    code, _, err = run([SITE, "--root", str(root)], capsys)
    assert code == 0 and "no lab is up here and --live was not given: checking the design only" in err


def test_live_reads_the_devices_as_the_inventory_user(root, monkeypatch, capsys):
    made = []
    monkeypatch.setattr(live_report, "lab_transport", lambda site_name: None)
    monkeypatch.setattr(live_report, "SshTransport", lambda **options: made.append(options) or SimpleNamespace(**options))
    monkeypatch.setattr(live_report, "read_site", lambda site, reader: recorded())
    code, out, _ = run([SITE, "--root", str(root), "--live", "--private-key", "/keys/site"], capsys)
    known_hosts = root / "build" / SITE / "known_hosts"
    assert (code, made, out.splitlines()[0]) == (
        0, [{"user": "root", "key_file": Path("/keys/site"), "known_hosts": known_hosts}],
        "fabric check chktest: design and live (devices: 4 device(s) read)")
    assert known_hosts.is_file()  # the devices' keys are checked against the inventory's, not ~/.ssh


def test_an_unreadable_switch_password_file_exits_2_before_any_device_is_read(root, no_lab, monkeypatch, capsys):
    monkeypatch.delenv("RACKFORM_SWITCH_PASSWORD", raising=False)
    monkeypatch.setenv("RACKFORM_SWITCH_PASSWORD_FILE", str(root / "no-such-file"))
    code, _, err = run([SITE, "--root", str(root), "--live"], capsys)
    assert code == 2 and "RACKFORM_SWITCH_PASSWORD_FILE: cannot read" in err and "nothing was checked" in err
    assert "Traceback" not in err


def test_bad_design_exits_2_with_file_and_line(root, no_lab, capsys):
    site_file = root / "topologies" / "sites" / f"{SITE}.yaml"
    site_file.write_text(site_file.read_text().replace("cnp_priority: 6", "cnp_priority: nine"))
    code, _, err = run([SITE, "--root", str(root)], capsys)
    assert code == 2 and "topologies/sites/chktest.yaml:" in err and "cnp_priority" in err


def test_bad_design_with_json_prints_the_errors_as_json(root, no_lab, capsys):
    site_file = root / "topologies" / "sites" / f"{SITE}.yaml"
    site_file.write_text(site_file.read_text().replace("cnp_priority: 6", "cnp_priority: nine"))
    code, out, _ = run([SITE, "--root", str(root), "--json"], capsys)
    report = json.loads(out)
    assert (code, report["ok"], report["errors"][0]["file"]) == (2, False, "topologies/sites/chktest.yaml")


def test_unknown_site_exits_2(root, no_lab, capsys):
    code, _, err = run(["nosuchsite", "--root", str(root)], capsys)
    assert code == 2 and "nosuchsite" in err


def test_endpoint_reroutes_a_device(root, monkeypatch, capsys):
    devices, reached = recorded(), {}
    monkeypatch.setattr(live_report, "lab_transport", lambda site_name: None)

    def read_device(target, ssh, onyx):
        reached[target.name] = (target.address, target.port)
        return devices[target.name]
    monkeypatch.setattr(live_report, "read_device", read_device)
    code, _, _ = run([SITE, "--root", str(root), "--live", "--endpoint", "leaf-1=127.0.0.1:2201"], capsys)
    assert (code, reached["leaf-1"], reached["spine-1"]) == (0, ("127.0.0.1", 2201), ("10.66.0.202", 22))


@pytest.mark.parametrize("value", ["leaf-1", "leaf-1=", "=127.0.0.1", "leaf-1=127.0.0.1:ssh"])
def test_bad_endpoint_exits_2(root, no_lab, capsys, value):
    code, _, err = run([SITE, "--root", str(root), "--endpoint", value], capsys)
    assert code == 2 and "expected DEVICE=HOST[:PORT]" in err
