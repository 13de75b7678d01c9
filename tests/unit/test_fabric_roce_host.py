"""The roce_host role's script (roles/roce_host/files/rackform-roce-host): a server's fabric
ports (MTU, address, routes) and NIC RoCE settings, applied at boot and by the role.

`ip` is replaced by an in-memory network (`FakeNet`) and /sys by a folder, so both a
server without NVIDIA NIC tools (the lab: every NIC step skipped and named) and one with
an mlx5 NIC (a fake sysfs tree, a fake mlnx_qos) are covered. The lab test runs the
real script on real (namespaced) ports.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "roce_host" / "files" / "rackform-roce-host"
CONFIG = {
    "ports": {"fab0": {"address": "10.20.1.15/24"}, "fab1": {"address": "10.20.2.15/24"}},
    "mtu": 9000,
    "fabric_prefixes": ["10.20.0.0/16", "10.30.0.0/16"],
    "route_metric_base": 100,
    "qos": {"trust": "dscp", "pfc_priorities": [3], "roce_tos": 106, "ecn": True,
            "roce_priority": 3, "cnp_priority": 6, "cnp_dscp": 48},
}
MLNX_QOS_OUTPUT = """\
DCBX mode: OS controlled
Priority trust state: {trust}
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     {mask}
\tbuffer      0   0   0   1   0   0   0   0
"""


def load_script():
    loader = importlib.machinery.SourceFileLoader("rackform_roce_host_script", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


class FakeNet:
    """Links, addresses and routes, answering the `ip` calls the script makes."""

    def __init__(self, ports: list[str]):
        self.links = {port: {"mtu": 1500, "flags": ["BROADCAST"]} for port in ports}
        self.addresses: dict[str, set[str]] = {port: set() for port in ports}
        self.routes: list[dict] = []
        self.commands: list[tuple[str, ...]] = []
        self.trust, self.mask = "pcp", "0,0,0,0,0,0,0,0"

    def ip_json(self, *args: str) -> list:
        if args[:2] == ("link", "show"):
            return [{"ifname": args[-1], **self.links[args[-1]]}]
        if args[:3] == ("-4", "addr", "show"):
            infos = [{"local": a.split("/")[0], "prefixlen": int(a.split("/")[1]), "scope": "global"}
                     for a in sorted(self.addresses[args[-1]])]
            return [{"addr_info": infos}]
        if args[:3] == ("-4", "route", "show"):
            prefix, port = args[3], args[-1]
            return [r for r in self.routes if r["dst"] == prefix and r["dev"] == port]
        raise AssertionError(f"unexpected ip -j {args}")

    def run(self, *argv: str) -> str:
        self.commands.append(argv)
        if argv[0] == "mlnx_qos":
            return self._mlnx_qos(argv[1:])
        args = list(argv[1:])
        if args[:3] == ["link", "set", "dev"]:
            port, what = args[3], args[4]
            if what == "mtu":
                self.links[port]["mtu"] = int(args[5])
            else:
                self.links[port]["flags"].append("UP")
        elif args[:2] == ["addr", "add"]:
            self.addresses[args[-1]].add(args[2])
        elif args[:2] == ["addr", "del"]:
            self.addresses[args[-1]].discard(args[2])
        elif args[:2] == ["route", "add"]:
            self.routes.append({"dst": args[2], "gateway": args[4], "dev": args[6], "metric": int(args[8])})
        elif args[:2] == ["route", "del"]:
            self.routes = [r for r in self.routes if not (r["dst"] == args[2] and r["dev"] == args[4])]
        return ""

    def _mlnx_qos(self, args: tuple[str, ...]) -> str:
        if "--trust" in args:
            self.trust = args[-1]
        elif "--pfc" in args:
            self.mask = args[-1]
        return MLNX_QOS_OUTPUT.format(trust=self.trust, mask="   ".join(self.mask.split(",")))


@pytest.fixture
def script():
    return load_script()


@pytest.fixture
def sysfs(tmp_path, script, monkeypatch) -> Path:
    """An empty /sys with the two fabric ports (no RDMA device behind them)."""
    for port in ("fab0", "fab1"):
        (tmp_path / "net" / port).mkdir(parents=True)
    monkeypatch.setattr(script, "SYS_NET", tmp_path / "net")
    monkeypatch.setattr(script, "SYS_INFINIBAND", tmp_path / "infiniband")
    monkeypatch.setattr(script, "RDMA_CM_CONFIGFS", tmp_path / "rdma_cm")
    return tmp_path


@pytest.fixture
def net(script, sysfs, monkeypatch) -> FakeNet:
    fake = FakeNet(["fab0", "fab1"])
    monkeypatch.setattr(script, "run", fake.run)
    monkeypatch.setattr(script, "ip_json", fake.ip_json)
    monkeypatch.setattr(script.shutil, "which", lambda name: None)
    return fake


def mlx5_nic(sysfs: Path, port: str, device: str) -> None:
    """The sysfs files of an mlx5 port: its RDMA device, tc/1/traffic_class, DCQCN and rdma_cm."""
    (sysfs / "net" / port / "device" / "infiniband" / device).mkdir(parents=True)
    tc = sysfs / "infiniband" / device / "tc" / "1"
    tc.mkdir(parents=True)
    (tc / "traffic_class").write_text("Global tclass=0\n")
    for point in ("roce_np", "roce_rp"):
        (sysfs / "net" / port / "ecn" / point / "enable").mkdir(parents=True)
        (sysfs / "net" / port / "ecn" / point / "enable" / "3").write_text("0\n")
    for name, value in (("cnp_dscp", "0"), ("cnp_802p_prio", "0")):
        (sysfs / "net" / port / "ecn" / "roce_np" / name).write_text(value + "\n")
    cma = sysfs / "rdma_cm" / device / "ports" / "1"
    cma.mkdir(parents=True)
    (cma / "default_roce_tos").write_text("0\n")


# ---------------------------------------------------------------- ports, addresses, routes


def test_first_run_sets_mtu_link_address_and_routes(script, net):
    report = script.apply(CONFIG)
    assert report.errors == []
    assert (net.links["fab0"]["mtu"], "UP" in net.links["fab1"]["flags"]) == (9000, True)
    assert net.addresses == {"fab0": {"10.20.1.15/24"}, "fab1": {"10.20.2.15/24"}}


def test_each_port_routes_the_fabric_via_its_leaf_first_port_preferred(script, net):
    script.apply(CONFIG)
    assert net.routes == [
        {"dst": "10.20.0.0/16", "gateway": "10.20.1.1", "dev": "fab0", "metric": 100},
        {"dst": "10.20.0.0/16", "gateway": "10.20.2.1", "dev": "fab1", "metric": 101},
    ]


def test_second_run_changes_nothing(script, net):
    script.apply(CONFIG)
    assert script.apply(CONFIG).changed == []


def test_stale_address_is_replaced(script, net):
    net.addresses["fab0"].add("10.20.9.9/24")
    report = script.apply(CONFIG)
    assert net.addresses["fab0"] == {"10.20.1.15/24"} and "fab0 address 10.20.9.9/24 removed" in report.changed


def test_route_with_another_gateway_is_replaced(script, net):
    net.routes.append({"dst": "10.20.0.0/16", "gateway": "10.20.1.254", "dev": "fab0", "metric": 100})
    script.apply(CONFIG)
    assert [r["gateway"] for r in net.routes if r["dev"] == "fab0"] == ["10.20.1.1"]


def test_address_that_is_the_leafs_gateway_is_an_error(script, net):
    config = {**CONFIG, "ports": {"fab0": {"address": "10.20.1.1/24"}}}
    assert script.apply(config).errors == ["fab0: address 10.20.1.1/24 is its subnet's first address, "
                                           "which the leaf holds"]


def test_missing_cabled_port_is_an_error(script, net):
    config = {**CONFIG, "ports": {"fab7": {"address": "10.20.7.15/24"}}}
    assert script.apply(config).errors == ["fab7: missing, but the cabling plan says it is cabled"]


# ---------------------------------------------------------------- NIC steps


def test_without_nic_tools_every_nic_step_is_skipped_and_named(script, net):
    steps = [(s["port"], s["step"]) for s in script.apply(CONFIG).skipped]
    assert steps == [
        (port, step)
        for port in ("fab0", "fab1")
        for step in ("trust dscp", "PFC mask 0,0,0,1,0,0,0,0", "RoCE ToS 106 (cma_roce_tos)",
                     "RoCE ToS 106 (traffic_class)", "DCQCN ECN on for priority 3, CNP DSCP 48 priority 6")
    ]


def test_skipped_steps_say_why(script, net):
    lines = script.apply(CONFIG).as_dict()["skipped_lines"]
    assert lines[0] == "fab0: trust dscp: mlnx_qos is not installed (no NVIDIA/Mellanox NIC tools)"


@pytest.fixture
def mlx5(script, net, sysfs, monkeypatch) -> Path:
    mlx5_nic(sysfs, "fab0", "mlx5_0")
    mlx5_nic(sysfs, "fab1", "mlx5_1")
    monkeypatch.setattr(script.shutil, "which", lambda name: name if name == "mlnx_qos" else None)
    return sysfs


def test_mlx5_nic_gets_trust_and_pfc_mask(script, net, mlx5):
    script.apply(CONFIG)
    assert (net.trust, net.mask) == ("dscp", "0,0,0,1,0,0,0,0")


@pytest.mark.parametrize(
    "path, value",
    [
        ("rdma_cm/mlx5_0/ports/1/default_roce_tos", "106"),
        ("infiniband/mlx5_0/tc/1/traffic_class", "106"),
        ("net/fab0/ecn/roce_np/enable/3", "1"),
        ("net/fab0/ecn/roce_rp/enable/3", "1"),
        ("net/fab0/ecn/roce_np/cnp_dscp", "48"),
        ("net/fab0/ecn/roce_np/cnp_802p_prio", "6"),
    ],
)
def test_mlx5_nic_gets_roce_tos_dcqcn_and_cnp(script, net, mlx5, path, value):
    script.apply(CONFIG)
    assert (mlx5 / path).read_text().strip() == value


def test_mlx5_nic_skips_nothing(script, net, mlx5):
    assert script.apply(CONFIG).skipped == []


def test_mlx5_nic_second_run_changes_nothing(script, net, mlx5):
    script.apply(CONFIG)
    (mlx5 / "infiniband/mlx5_0/tc/1/traffic_class").write_text("Global tclass=106\n")
    (mlx5 / "infiniband/mlx5_1/tc/1/traffic_class").write_text("Global tclass=106\n")
    assert script.apply(CONFIG).changed == []


@pytest.mark.parametrize(
    "trust, mask, expected",
    [("dscp", "0   0   0   1   0   0   0   0", ("dscp", "0,0,0,1,0,0,0,0")),
     ("pcp", "0   0   0   0   0   0   0   0", ("pcp", "0,0,0,0,0,0,0,0"))],
)
def test_mlnx_qos_output_is_read(script, trust, mask, expected):
    assert script.mlnx_qos_state(MLNX_QOS_OUTPUT.format(trust=trust, mask=mask)) == expected


# ---------------------------------------------------------------- the command


def test_command_prints_a_json_report_and_fails_on_errors(script, net, tmp_path, monkeypatch):
    config = tmp_path / "roce-host.json"
    config.write_text(json.dumps({**CONFIG, "ports": {"fab7": {}}}))
    out = io.StringIO()
    monkeypatch.setattr(script.sys, "stdout", out)
    code = script.main(["--config", str(config)])
    assert (code, json.loads(out.getvalue())["errors"]) == (1, ["fab7: missing, but the cabling plan says it is cabled"])
