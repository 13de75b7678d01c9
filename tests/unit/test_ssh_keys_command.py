"""`rackform ssh-keys SITE`: host keys collected from real sshd processes, recorded in host_vars,
rendered into known_hosts, and accepted (or refused) by a real `ssh` with strict checking.

The site is `new-site loop --from edge` on loopback prefixes, so every machine's management
address is a 127.0.0.x address and a bare `--collect` scans nothing but this machine. Each
machine gets its own sshd (its own ed25519 and ECDSA host keys) on its own address. They listen
on a free high port, named by `ansible_port` in group_vars/all.yml (mgmt-1 overrides it in its
host_vars): port 22 may be taken here (a system sshd on 0.0.0.0:22 blocks every 127.0.0.x:22),
a free port never is, and `ansible_port` is how a real site says the same thing.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rackform.cli import main
from rackform.model.loader import load_site
from rackform.render.ssh_address import ssh_ports
from rackform.run.hostkeys import changed, fingerprint

SSHD = Path("/usr/sbin/sshd")
pytestmark = [
    pytest.mark.skipif(not SSHD.exists(), reason="needs OpenSSH's sshd (apt: openssh-server)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="sshd as root needs /run/sshd and reads host keys as root"),
]
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
SITE = "loop"
OVERRIDDEN = "mgmt-1"
"""The host whose own ansible_port (host_vars) beats the site-wide one."""
MARK = "# hand-written: racked by Ana, keep this line"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


class Sshd:
    """One machine: an sshd on ADDRESS:PORT with host keys of its own (new ones on `rekey`)."""

    def __init__(self, folder: Path, address: str, port: int):
        self.folder, self.address, self.port = folder, address, port
        self.folder.mkdir(parents=True)
        self.process: subprocess.Popen | None = None
        self.generation = 0
        self.rekey()

    def rekey(self) -> None:
        self.generation += 1
        self.keys = []
        for kind in ("ed25519", "ecdsa"):
            path = self.folder / f"host_{kind}_{self.generation}"
            subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(path)], check=True)
            self.keys.append(path)
        config = self.folder / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {self.address}", *(f"HostKey {path}" for path in self.keys), "PidFile none",
            "UsePAM no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "AuthorizedKeysFile none", "StrictModes no", "",
        ]))
        checked = subprocess.run([str(SSHD), "-t", "-f", str(config), "-p", str(self.port)],
                                 capture_output=True, text=True)
        assert checked.returncode == 0, f"sshd -t: {checked.stderr}"

    def public_keys(self) -> list[str]:
        return [" ".join(Path(f"{path}.pub").read_text().split()[:2]) for path in self.keys]

    def start(self) -> None:
        self.process = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.folder / "sshd_config"),
                                         "-p", str(self.port)], stderr=open(self.folder / "log", "ab"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.address, self.port), timeout=1).close()
                return
            except OSError:
                assert self.process.poll() is None, (self.folder / "log").read_text()
                time.sleep(0.05)
        raise AssertionError(f"sshd on {self.address}:{self.port} did not come up")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


class Loop:
    """The loopback site, its files and one running sshd per managed machine."""

    def __init__(self, root: Path, machines: dict[str, Sshd]):
        self.root, self.machines = root, machines

    def host_vars(self, name: str) -> Path:
        return self.root / "inventories" / SITE / "host_vars" / f"{name}.yml"

    def recorded(self, name: str) -> list[str]:
        return (yaml.safe_load(self.host_vars(name).read_text()) or {}).get("ssh_host_keys", [])

    def snapshot(self) -> dict[str, bytes]:
        inventory = self.root / "inventories" / SITE
        return {str(path.relative_to(inventory)): path.read_bytes() for path in sorted(inventory.rglob("*")) if path.is_file()}

    def run(self, capsys, *options: str) -> tuple[int, str]:
        code = main(["ssh-keys", SITE, "--root", str(self.root), "--timeout", "3", *options])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    def known_hosts(self, capsys) -> Path:
        out = self.root / "build" / SITE
        assert main(["render", SITE, "--root", str(self.root), "--out", str(out)]) == EXIT_OK
        capsys.readouterr()
        return out / "known_hosts"

    def ssh(self, name: str, known_hosts: Path) -> str:
        """What a strict `ssh` says logging in to the machine (no login key: auth always fails)."""
        sshd = self.machines[name]
        done = subprocess.run(
            ["ssh", "-v", "-F", "/dev/null", "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
             "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
             "-p", str(sshd.port), f"root@{sshd.address}", "true"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        assert done.returncode == 255, done.stderr
        return done.stderr


@pytest.fixture()
def loop(site_root: Path, tmp_path: Path):
    assert main(["new-site", SITE, "--from", "edge", "--root", str(site_root),
                 "--management-prefix", "127.0.0.0/24", "--oob-prefix", "127.0.1.0/24"]) == EXIT_OK
    port, own_port = free_port(), free_port()
    inventory = site_root / "inventories" / SITE
    all_vars = inventory / "group_vars" / "all.yml"
    text = re.sub(r"(?m)^ansible_host_key_checking:.*\n", "", all_vars.read_text())  # a real site: checking on
    all_vars.write_text(text + f"ansible_port: {port}\n")
    mgmt_1 = inventory / "host_vars" / f"{OVERRIDDEN}.yml"
    mgmt_1.write_text(mgmt_1.read_text() + f"{MARK}\nansible_port: {own_port}  # its own sshd port\n")
    site = load_site(SITE, site_root)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    machines = {}
    try:
        for node in (*site.hosts.values(), *site.switches.values()):
            if node.management_address is None or getattr(node, "os", "") == "unmanaged":
                continue
            machines[node.name] = Sshd(tmp_path / "sshd" / node.name, str(node.management_address),
                                       own_port if node.name == OVERRIDDEN else port)
            machines[node.name].start()
        yield Loop(site_root, machines)
    finally:
        for sshd in machines.values():
            sshd.stop()


# ---------------------------------------------------------------- report


def test_report_lists_every_machine_and_whether_it_has_keys(loop, capsys):
    code, out = loop.run(capsys)
    assert code == EXIT_OK
    for name, sshd in loop.machines.items():
        assert re.search(rf"(?m)^  {name}\s+{sshd.address}:{sshd.port}\s+no keys recorded$", out), out
    assert re.search(r"(?m)^  oob-1\s+-\s+unmanaged switch", out)
    assert f"0 of {len(loop.machines)} machine(s) have host keys recorded" in out
    assert "host key checking ON" in out


# ---------------------------------------------------------------- collect


def test_collect_records_keys_known_hosts_has_them_and_ssh_accepts_them(loop, capsys):
    before = loop.host_vars(OVERRIDDEN).read_text()
    code, out = loop.run(capsys, "--collect")
    assert code == EXIT_OK, out
    for name, sshd in loop.machines.items():
        assert loop.recorded(name) == sshd.public_keys()  # each machine's own keys, in its own file
        for key in sshd.keys:  # the fingerprints ssh-keygen shows on the machine's console
            console = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True, check=True)
            size, digest, *_rest, kind = console.stdout.split()
            assert f"{size} {digest} {kind}" in out
    # mgmt-1's file: every line it had is still there, in order, the keys added after them.
    after = loop.host_vars(OVERRIDDEN).read_text()
    assert after.startswith(before) and MARK in after and "# its own sshd port" in after
    # A machine without a host_vars file gets one: none here, edge's scaffold writes every one.

    known_hosts = loop.known_hosts(capsys)
    lines = known_hosts.read_text().splitlines()
    for name, sshd in loop.machines.items():
        for key in sshd.public_keys():
            assert any(line.startswith(f"[{sshd.address}]:{sshd.port},[{name}]:{sshd.port},") and line.endswith(key)
                       for line in lines), (name, key)
        said = loop.ssh(name, known_hosts)
        assert f"Host '[{sshd.address}]:{sshd.port}' is known and matches" in said
        assert "Permission denied" in said and "Host key verification failed" not in said

    snapshot = loop.snapshot()
    code, out = loop.run(capsys, "--collect")
    assert code == EXIT_OK and "every machine has host keys recorded; nothing to collect" in out
    code, out = loop.run(capsys, "--collect", *loop.machines)
    assert code == EXIT_OK
    assert out.count(": unchanged (2 key(s) recorded)") == len(loop.machines), out
    assert loop.snapshot() == snapshot

    code, out = loop.run(capsys)
    assert code == EXIT_OK and f"{len(loop.machines)} of {len(loop.machines)} machine(s) have host keys recorded" in out


def test_a_changed_key_is_refused_until_replace_names_the_host(loop, capsys):
    assert loop.run(capsys, "--collect")[0] == EXIT_OK
    stale = loop.known_hosts(capsys)
    shutil.copy(stale, loop.root / "stale_known_hosts")
    stale = loop.root / "stale_known_hosts"
    sshd = loop.machines["mgmt-2"]
    old_keys = sshd.public_keys()
    sshd.stop()
    sshd.rekey()  # the machine was reinstalled (or someone is in the middle)
    sshd.start()
    assert "Host key verification failed" in loop.ssh("mgmt-2", stale)

    snapshot = loop.snapshot()
    code, out = loop.run(capsys, "--collect", "mgmt-2", "mgmt-3")
    assert code == EXIT_FAILED
    assert f"mgmt-2 {sshd.address}:{sshd.port}: CHANGED" in out and "mgmt-3" in out and ": unchanged" in out
    for key in old_keys:
        assert f"recorded  {fingerprint(key)}" in out
    for key in sshd.public_keys():
        assert f"presented {fingerprint(key)}" in out
    assert "--collect --replace mgmt-2" in out
    assert loop.snapshot() == snapshot
    code, out = loop.run(capsys, "--collect")  # a bare collect leaves recorded machines alone
    assert code == EXIT_OK and loop.snapshot() == snapshot

    code, out = loop.run(capsys, "--collect", "--replace", "mgmt-2", "--dry-run")
    assert code == EXIT_OK and "dry run" in out and f"+  - {sshd.public_keys()[0]}" in out
    assert loop.snapshot() == snapshot

    code, out = loop.run(capsys, "--collect", "--replace", "mgmt-2")
    assert code == EXIT_OK and f"mgmt-2 {sshd.address}:{sshd.port}: replaced 2 key(s)" in out
    assert loop.recorded("mgmt-2") == sshd.public_keys()
    changed = {path for path, text in loop.snapshot().items() if snapshot[path] != text}
    assert changed == {"host_vars/mgmt-2.yml"}
    said = loop.ssh("mgmt-2", loop.known_hosts(capsys))
    assert "is known and matches" in said and "Host key verification failed" not in said


def test_a_machine_that_does_not_answer_is_reported_and_left_alone(loop, capsys):
    loop.machines["leaf-1"].stop()
    untouched = loop.host_vars("leaf-1").read_bytes()
    code, out = loop.run(capsys, "--collect")
    assert code == EXIT_FAILED
    leaf = loop.machines["leaf-1"]
    assert f"leaf-1 {leaf.address}:{leaf.port}: no answer, left alone: connection refused" in out
    assert loop.host_vars("leaf-1").read_bytes() == untouched
    assert all(loop.recorded(name) for name in loop.machines if name != "leaf-1")
    assert "1 no answer: exit 1" in out


def test_dry_run_shows_the_edit_and_writes_nothing(loop, capsys):
    snapshot = loop.snapshot()
    code, out = loop.run(capsys, "--collect", "--dry-run")
    assert code == EXIT_OK
    for name, sshd in loop.machines.items():
        assert f"+++ b/inventories/{SITE}/host_vars/{name}.yml" in out
        assert f"+  - {sshd.public_keys()[0]}" in out
    assert f"dry run: {len(loop.machines)} file(s) would change; nothing written" in out
    assert loop.snapshot() == snapshot


def test_a_host_without_host_vars_gets_a_new_file(loop, capsys):
    path = loop.host_vars("spine-1")
    values = path.read_text()
    path.unlink()
    hosts = loop.root / "inventories" / SITE / "hosts.yml"  # its variables move inline
    inline = "".join(f"      {line}\n" for line in values.splitlines() if line and not line.startswith("#"))
    hosts.write_text(hosts.read_text().replace("    spine-1:\n", "    spine-1:\n" + inline))
    assert load_site(SITE, loop.root).switches["spine-1"].management_address is not None
    code, out = loop.run(capsys, "--collect", "spine-1")
    assert code == EXIT_OK, out
    assert path.read_text().startswith("# spine-1: host variables") and loop.recorded("spine-1") == loop.machines["spine-1"].public_keys()
    assert main(["validate", SITE, "--root", str(loop.root)]) == EXIT_OK


# ---------------------------------------------------------------- bad input: exit 2, nothing scanned


@pytest.mark.parametrize(("options", "said"), [
    (["--collect", "gpu-9"], "unknown host 'gpu-9'"),
    (["--collect", "oob-1"], "oob-1: an unmanaged switch"),
    (["--replace", "mgmt-2"], "--replace: replaces collected keys: use --collect --replace HOST"),
    (["--collect", "--timeout", "0"], "--timeout: must be 1 or more"),
])
def test_bad_input_exits_2(loop, capsys, options, said):
    snapshot = loop.snapshot()
    code, out = loop.run(capsys, *options)
    assert code == EXIT_BAD_INPUT and said in out and "Traceback" not in out
    assert loop.snapshot() == snapshot


def test_unknown_site_exits_2(site_root, capsys):
    assert main(["ssh-keys", "nosuch", "--root", str(site_root)]) == EXIT_BAD_INPUT
    assert "no such site 'nosuch'" in capsys.readouterr().err


def test_a_port_that_is_not_one_is_an_error_at_its_line(loop, capsys):
    path = loop.host_vars(OVERRIDDEN)
    path.write_text(re.sub(r"ansible_port: \d+", "ansible_port: ssh", path.read_text()))
    code, out = loop.run(capsys, "--collect")
    line = next(number for number, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("ansible_port"))
    assert code == EXIT_BAD_INPUT
    assert f"host_vars/{OVERRIDDEN}.yml:{line}: ansible_port: expected a TCP port 1-65535, found 'ssh'" in out


# ---------------------------------------------------------------- which port: Ansible's precedence


def test_ssh_port_follows_ansible_precedence(lab_files):
    lab_files.write("inventories/lab/group_vars/leaf.yml", "ansible_port: 2201\n")
    lab_files.write("inventories/lab/group_vars/all.yml",
                    lab_files.read("inventories/lab/group_vars/all.yml") + "ansible_port: 2200\n")
    lab_files.write("inventories/lab/host_vars/gpu-1.yml",
                    lab_files.read("inventories/lab/host_vars/gpu-1.yml") + "ansible_port: '2202'\n")
    site = lab_files.load()
    ports = ssh_ports(site)
    assert ports["gpu-1"] == 2202  # the host's own
    assert ports["leaf-1"] == ports["leaf-2"] == 2201  # a deeper group beats all
    assert ports["gpu-2"] == ports["spine-1"] == 2200
    site.hosts["gpu-2"].user_vars["ssh_host_keys"] = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrMd8RC/RM5UbQgSeE8u5RCagg0JLP/zvhNTOm+5ZI6"]
    from rackform.render.known_hosts import known_hosts_file

    assert "[10.10.0.16]:2200,[gpu-2]:2200,[gpu-2.lab.rackform.test]:2200 ssh-ed25519 AAAA" in known_hosts_file(site)


def test_keys_written_inline_in_hosts_yml_are_not_edited(loop, capsys):
    other = Sshd(loop.root / "other-machine", "127.0.0.1", free_port())  # keys only, never started
    hosts = loop.root / "inventories" / SITE / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("    spine-1:\n", f"    spine-1:\n      ssh_host_keys: [{other.public_keys()[0]}]\n"))
    snapshot = loop.snapshot()
    code, out = loop.run(capsys, "--collect", "--replace", "spine-1")
    line = hosts.read_text().splitlines().index(f"      ssh_host_keys: [{other.public_keys()[0]}]") + 1
    assert code == EXIT_BAD_INPUT
    assert f"{SITE}/hosts.yml:{line}: ssh_host_keys: spine-1's keys are recorded here" in out
    assert loop.snapshot() == snapshot


def test_what_counts_as_changed():
    ed_old, ed_new = "ssh-ed25519 AAAAold", "ssh-ed25519 AAAAnew"
    ecdsa, rsa = "ecdsa-sha2-nistp256 AAAAecdsa", "ssh-rsa AAAArsa"
    assert not changed([ed_old], (ed_old, ecdsa))  # a type added: ssh still finds the recorded key
    assert not changed([ed_old, rsa], (ed_old, rsa))
    assert changed([ed_old], (ed_new, ecdsa))  # the recorded type, another key
    assert changed([ed_old, ecdsa], (ed_new, ecdsa))  # one of them replaced is still a change
    assert changed([rsa], (ed_new, ecdsa))  # nothing recorded is presented any more
