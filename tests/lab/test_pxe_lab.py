"""The PXE service for real: role pxe_server puts dnsmasq on one lab host, and another
lab host's DHCP client gets its reserved address and its iPXE boot file from it.

The site `pxetest` (two HCI hosts, addresses in 10.64.0.0/16 only) keeps apart from
every other lab. node-1 is the `provisioning` host: the test runs the PXE play of
the rendered provision.yml there with `rackform.run.ansible.run_playbook`, twice (the
second run must change nothing). The play runs from a playbook of its own, copied
verbatim from provision.yml: the stage's other plays need the BMC vault and the lab's
BMCs, which are another test's business. node-2 then runs `dhclient` on its
management port as BIOS, UEFI and iPXE firmware would, and fetches boot files over
TFTP. The lab has no Internet: a small Debian mirror (the role's packages, fetched
once by this machine's apt) is served from the management bridge for the run.
Needs root and the lab's tools (docs/lab.md); run: pytest -p no:xdist -m lab tests/lab/test_pxe_lab.py
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import http.server
import json
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from rackform.lab import lab, state
from rackform.lab.state import LabState
from rackform.model.loader import load_site
from rackform.render.project import render_project
from rackform.run.ansible import RunResult, run_playbook
from rackform.collection import short_name
from labenv import skip_reason
from sitebuilder import ROCE_FABRIC, build_site, group_vars, networks, one_rack_site

pytestmark = pytest.mark.lab

SITE = "pxetest"
LOCK_FILE = Path(tempfile.gettempdir()) / f"rackform-test-{SITE}.lock"
PXE_HOST, CLIENT = "node-1", "node-2"
PXE_PLAYBOOK = "pxe.yml"
CLIENT_ADDRESS = "10.64.0.12"
CLIENT_MAC = "02:64:00:00:00:0c"
UNKNOWN_MAC = "02:64:00:00:00:99"
BRIDGE_ADDRESS = "10.64.0.1"
EXTRA_TOOLS = ("apt-get", "dpkg-deb")  # to build the package mirror the role installs from
# What the role installs, and what the lab's base image lacks of their dependencies.
MIRROR_PACKAGES = ("dnsmasq-base", "ipxe", "libnetfilter-conntrack3", "libnfnetlink0", "libnftables1",
                   "libnftnl11", "libjansson4")

SITE_YAML = one_rack_site(SITE, "PXE lab test - one HCI host serves DHCP and TFTP to the other", """\
- {name: hci-1, block: hci, position_u: 1, hosts: [node-1, node-2]}
""", networks("10.64.0.0/24", "10.64.1.0/24", "10.64.16.0/20") + ROCE_FABRIC + "cabling: []\n")

HOST_VARS = """\
management_address: 10.64.0.{n}
management_mac: "02:64:00:00:00:{n:02x}"
bmc_address: 10.64.1.{n}
bmc_mac: "02:64:01:00:00:{n:02x}"
serial: PXETEST-{n}
"""

# dhclient configurations that make node-2 look like each kind of network boot firmware.
FIRMWARE_CONF = {
    "bios": 'send vendor-class-identifier "PXEClient:Arch:00000:UNDI:002001";\n',
    "uefi": ('option pxe-client-arch code 93 = unsigned integer 16;\nsend pxe-client-arch 7;\n'
             'send vendor-class-identifier "PXEClient:Arch:00007:UNDI:003016";\n'),
    "ipxe": 'send user-class "iPXE";\n',
}
DHCLIENT_CONF = "timeout {timeout_s};\nretry 1;\nrequest subnet-mask, routers, domain-name, domain-name-servers, host-name;\n"

# A TFTP client (RFC 1350, octet mode) for node-2: the base image has python3 but no tftp.
TFTP_CLIENT = r"""
import hashlib, json, socket, struct, sys
server, path = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(10)
sock.sendto(b"\0\1" + path.encode() + b"\0octet\0", (server, 69))
data, block = b"", 1
while True:
    packet, peer = sock.recvfrom(65536)
    opcode, number = struct.unpack("!HH", packet[:4])
    if opcode == 5:
        sys.exit("TFTP error %d: %s" % (number, packet[4:].rstrip(b"\0").decode()))
    if opcode == 3:
        if number == block % 65536:
            data += packet[4:]
            block += 1
        sock.sendto(struct.pack("!HH", 4, number), peer)
        if number == (block - 1) % 65536 and len(packet) - 4 < 512:
            break
text = data.decode() if path.endswith(".ipxe") else None
print(json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "text": text}))
"""


# --- the site, the lab, the mirror ---------------------------------------------------------

@pytest.fixture(scope="module")
def pxe_root(tmp_path_factory) -> Path:
    """A repo root holding the real catalog and the `pxetest` site with its inventory."""
    host_vars = {f"node-{n}": HOST_VARS.format(n=10 + n) for n in (1, 2)}
    return build_site(tmp_path_factory.mktemp("pxetest-root"), SITE, SITE_YAML, host_vars,
                      group_vars(SITE, BRIDGE_ADDRESS))


@pytest.fixture(scope="module")
def debs(tmp_path_factory) -> Path:
    """The role's packages as a flat apt repository (Packages index beside the .debs)."""
    reason = skip_reason(extra_tools=EXTRA_TOOLS)
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("pxetest-mirror")
    fetched = subprocess.run(["apt-get", "download", "-o", "APT::Sandbox::User=root", *MIRROR_PACKAGES],
                             cwd=folder, capture_output=True, text=True, timeout=300)
    if fetched.returncode != 0:
        pytest.skip(f"this machine's apt cannot fetch {', '.join(MIRROR_PACKAGES)}: {fetched.stderr.strip()}")
    (folder / "Packages").write_text(packages_index(folder))
    return folder


def packages_index(folder: Path) -> str:
    """apt's Packages file for the .debs of a folder: each control paragraph, where and how big."""
    paragraphs = []
    for deb in sorted(folder.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True,
                                 check=True, timeout=60).stdout.rstrip("\n")
        digest = hashlib.sha256(deb.read_bytes()).hexdigest()
        paragraphs.append(f"{control}\nFilename: ./{deb.name}\nSize: {deb.stat().st_size}\nSHA256: {digest}\n")
    return "\n".join(paragraphs)


@pytest.fixture(scope="module")
def lab_up(pxe_root: Path, debs: Path):
    """The `pxetest` lab, up for the module and down afterwards, whatever happens."""
    reason = skip_reason(extra_tools=EXTRA_TOOLS)
    if reason:
        pytest.skip(reason)
    quiet = lambda line: None  # noqa: E731
    with open(LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run of this module (another checkout) takes turns
        lab.down(SITE, progress=quiet)  # sweeps what a run that died earlier left
        try:
            started = time.monotonic()
            status = lab.up(SITE, pxe_root, progress=quiet)
            assert status.up, "\n".join(status.lines())
            print(f"\nlab {SITE} up in {time.monotonic() - started:.1f} s")
            yield state.load(SITE)
        finally:
            lab.down(SITE, progress=quiet)


@pytest.fixture(scope="module")
def mirror(lab_up: LabState, debs: Path) -> str:
    """The flat repository served over HTTP from the lab's management bridge."""
    handler = functools.partial(_QuietHandler, directory=str(debs))
    server = http.server.ThreadingHTTPServer((BRIDGE_ADDRESS, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{BRIDGE_ADDRESS}:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def node_ssh(lab_state: LabState, node: str, command: str, timeout_s: float = 60.0,
             check: bool = True) -> subprocess.CompletedProcess:
    return lab.ssh(lab_state, lab_state.node(node), command, timeout_s=timeout_s, check=check)


@pytest.fixture(scope="module")
def project(lab_up: LabState, mirror: str, pxe_root: Path, tmp_path_factory) -> Path:
    """The rendered project with PXE_PLAYBOOK beside provision.yml, and the PXE host's apt
    pointed at the mirror (the lab's only one)."""
    out = tmp_path_factory.mktemp("pxetest-project") / SITE
    render_project(load_site(SITE, pxe_root), out)
    plays = yaml.safe_load((out / "provision.yml").read_text())
    pxe_plays = [play for play in plays if play.get("hosts") == "provisioning"]
    assert [short_name(play["roles"][0]["role"]) for play in pxe_plays] == ["pxe_server"], "provision.yml has no PXE play"
    (out / PXE_PLAYBOOK).write_text(yaml.safe_dump(pxe_plays, sort_keys=False))
    node_ssh(lab_up, PXE_HOST, "rm -f /etc/apt/sources.list.d/* && "
             f"echo {shlex.quote(f'deb [trusted=yes] {mirror} ./')} > /etc/apt/sources.list")
    return out


def run_pxe_play(lab_state: LabState, project: Path) -> RunResult:
    """The PXE play of provision.yml, as rendered, on its host."""
    result = run_playbook(project, PXE_PLAYBOOK, limit="provisioning",
                          envvars={"ANSIBLE_PRIVATE_KEY_FILE": str(lab_state.ssh_key)})
    print(f"\n{result.summary()}")
    return result


@pytest.fixture(scope="module")
def first_run(lab_up: LabState, project: Path) -> RunResult:
    return run_pxe_play(lab_up, project)


@pytest.fixture(scope="module")
def second_run(lab_up: LabState, project: Path, first_run: RunResult) -> RunResult:
    return run_pxe_play(lab_up, project)


# --- the client side -------------------------------------------------------------------------

def dhclient(lab_state: LabState, interface: str, firmware: str = "bios", timeout_s: int = 20) -> dict:
    """One DHCP exchange from node-2 that leaves the interface as it is (-sf /bin/true).

    Returns the lease's fields (fixed-address, filename, option host-name ...); {} without one.
    """
    work = f"/run/pxetest-{firmware}-{interface}"
    conf = DHCLIENT_CONF.format(timeout_s=timeout_s) + FIRMWARE_CONF[firmware]
    script = (f"rm -rf {work} && mkdir -p {work} && printf %s {shlex.quote(conf)} > {work}/dhclient.conf && "
              f"dhclient -v -1 -sf /bin/true -cf {work}/dhclient.conf -lf {work}/leases -pf {work}/pid {interface}; "
              f"dhclient -x -sf /bin/true -pf {work}/pid >/dev/null 2>&1; cat {work}/leases 2>/dev/null; true")
    started = time.monotonic()
    result = node_ssh(lab_state, CLIENT, script, timeout_s=timeout_s + 30)
    print(f"\ndhclient ({firmware}, {interface}) on {CLIENT}: {time.monotonic() - started:.1f} s")
    return parse_lease(result.stdout)


def parse_lease(text: str) -> dict:
    """The fields of the last `lease { ... }` block of a dhclient lease file."""
    if "lease {" not in text:
        return {}
    fields: dict[str, str] = {}
    for line in text.rsplit("lease {", 1)[1].splitlines():
        line = line.strip().rstrip(";")
        if line.startswith("option "):
            key, _, value = line[len("option "):].partition(" ")
            fields[f"option {key}"] = value.strip('"')
        elif line and line != "}":
            key, _, value = line.partition(" ")
            fields[key] = value.strip('"')
    return fields


def tftp_get(lab_state: LabState, path: str) -> dict:
    """Fetch a file from the PXE host over TFTP, from node-2: {size, sha256, text}."""
    server = str(lab_state.node(PXE_HOST).address)
    command = f"python3 -c {shlex.quote(TFTP_CLIENT)} {server} {shlex.quote(path)}"
    return json.loads(node_ssh(lab_state, CLIENT, command).stdout)


@pytest.fixture(scope="module")
def served(lab_up: LabState, second_run: RunResult) -> LabState:
    """The lab once the PXE play has run twice: what the client tests talk to."""
    if not second_run.ok:
        pytest.fail(f"the PXE play failed, nothing to ask: {second_run.summary()}")
    return lab_up


# --- the play ----------------------------------------------------------------------------------

def test_pxe_play_runs_on_the_provisioning_host(first_run: RunResult):
    assert (first_run.ok, list(first_run.hosts)) == (True, [PXE_HOST]), first_run.summary()


def test_pxe_play_changes_something_the_first_time(first_run: RunResult):
    assert first_run.changed > 0


def test_second_pxe_run_changes_nothing(second_run: RunResult):
    assert (second_run.ok, second_run.changed) == (True, 0), second_run.summary()


def test_check_mode_after_a_run_finds_nothing_to_change(lab_up: LabState, project: Path, second_run: RunResult):
    """What a preview (run_playbook(check=True)) reports once the service is in place."""
    result = run_playbook(project, PXE_PLAYBOOK, limit="provisioning", check=True,
                          envvars={"ANSIBLE_PRIVATE_KEY_FILE": str(lab_up.ssh_key)})
    assert (result.ok, result.changed) == (True, 0), result.summary()


def test_pxe_service_is_running_on_the_pxe_host(served: LabState):
    result = node_ssh(served, PXE_HOST, "systemctl is-active rackform-pxe", check=False)
    assert result.stdout.strip() == "active", result.stdout + result.stderr


def test_dnsmasq_runs_unprivileged(served: LabState):
    users = node_ssh(served, PXE_HOST, "ps -o user= -C dnsmasq").stdout.split()
    assert users == ["dnsmasq"]


def test_dnsmasq_serves_no_dns(served: LabState):
    """port=0: the site's DNS servers answer names, not the PXE host."""
    listening = node_ssh(served, PXE_HOST, "cat /proc/net/udp /proc/net/tcp").stdout
    dns_port = ":0035 "
    assert dns_port not in listening


# --- DHCP ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bios_lease(served: LabState) -> dict:
    return dhclient(served, "mgmt0", "bios")


def test_client_gets_its_reserved_address(bios_lease: dict):
    assert bios_lease.get("fixed-address") == CLIENT_ADDRESS, bios_lease


def test_client_gets_its_inventory_name(bios_lease: dict):
    assert bios_lease.get("option host-name") == CLIENT, bios_lease


@pytest.mark.parametrize(("option", "value"), [
    ("option routers", "10.64.0.1"),
    ("option subnet-mask", "255.255.255.0"),
    ("option domain-name", "pxetest.rackform.test"),
    ("option dhcp-server-identifier", "10.64.0.11"),
])
def test_client_gets_the_management_network_settings(bios_lease: dict, option: str, value: str):
    assert bios_lease.get(option) == value, bios_lease


@pytest.mark.parametrize(("firmware", "boot_file"), [
    ("bios", "undionly.kpxe"),
    ("uefi", "ipxe.efi"),
    ("ipxe", "rackform.ipxe"),
])
def test_each_firmware_gets_its_boot_file(served: LabState, bios_lease: dict, firmware: str, boot_file: str):
    lease = bios_lease if firmware == "bios" else dhclient(served, "mgmt0", firmware)
    assert (lease.get("fixed-address"), lease.get("filename")) == (CLIENT_ADDRESS, boot_file), lease


def test_unknown_machine_gets_no_address(served: LabState):
    """No dynamic pool: a MAC that is not in the inventory is not answered."""
    probe = "pxeprobe"
    node_ssh(served, CLIENT, f"ip link del {probe} 2>/dev/null; ip link add {probe} link mgmt0 address "
                             f"{UNKNOWN_MAC} type macvlan mode bridge && ip link set {probe} up")
    try:
        lease = dhclient(served, probe, "bios", timeout_s=6)
    finally:
        node_ssh(served, CLIENT, f"ip link del {probe}", check=False)
    # The request did reach dnsmasq, which turned it down (not a client that never asked).
    journal = node_ssh(served, PXE_HOST, "journalctl -u rackform-pxe --no-pager -o cat").stdout
    refusals = [line for line in journal.splitlines() if UNKNOWN_MAC in line and "no address available" in line]
    assert (lease, bool(refusals)) == ({}, True), journal[-2000:]


# --- TFTP ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("boot_file", ["undionly.kpxe", "ipxe.efi"])
def test_tftp_serves_the_ipxe_binaries_from_the_ipxe_package(served: LabState, boot_file: str):
    packaged = node_ssh(served, PXE_HOST, f"sha256sum /usr/lib/ipxe/{boot_file}").stdout.split()[0]
    fetched = tftp_get(served, boot_file)
    assert (fetched["sha256"], fetched["size"] > 0) == (packaged, True)


def test_tftp_serves_the_entry_script_that_chains_by_mac(served: LabState):
    text = tftp_get(served, "rackform.ipxe")["text"]
    assert "chain --autofree hosts/${mac:hexhyp}.ipxe || goto unknown" in text.splitlines()


def test_tftp_serves_the_clients_own_script(served: LabState):
    text = tftp_get(served, f"hosts/{CLIENT_MAC.replace(':', '-')}.ipxe")["text"]
    assert [line for line in text.splitlines() if line.startswith("set ")] == [
        f"set rackform_host {CLIENT}", f"set rackform_address {CLIENT_ADDRESS}", "set rackform_role management_plane"]


def test_tftp_serves_the_install_script_the_host_scripts_chain_to(served: LabState):
    text = tftp_get(served, "install.ipxe")["text"]
    assert text.startswith("#!ipxe\n") and "exit" in text.splitlines()


def test_tftp_refuses_a_file_outside_the_root(served: LabState):
    server = str(served.node(PXE_HOST).address)
    result = node_ssh(served, CLIENT, f"python3 -c {shlex.quote(TFTP_CLIENT)} {server} ../../etc/shadow",
                      check=False)
    assert result.returncode != 0 and "TFTP error" in result.stderr


def test_scripts_in_the_tftp_root_are_world_readable_only(served: LabState):
    modes = node_ssh(served, PXE_HOST, "stat -c '%a %U' /srv/tftp/rackform.ipxe /srv/tftp/hosts/*.ipxe").stdout
    assert set(modes.splitlines()) == {"644 root"}
