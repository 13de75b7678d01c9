"""Data sets served over NFS in the lab (issue 20): stor-1 serves them with NFS-Ganesha, the GPU
nodes read them with libnfs's user-space client over the fabric (no kernel NFS client here).

The shipped `lab` site (tests/lab/conftest.py `shipped_lab`), with the data sets of its design:
`imagenet-mini` (ro) and `research-scratch` (rw), both for gpu-1 and gpu-2. After
test_deploy_lab the stages it needs are already applied and run again without changes; run
alone, this module applies provision, fabric, os (the site mirror, /etc/hosts, the fabric MTU)
and storage first. What is checked, on the nodes over SSH and with `rackform verify`:
- a 4 MiB file of random bytes written on stor-1 into imagenet-mini is read back from gpu-1 and
  gpu-2 over stor-1's fabric address with the same sha256; mgmt-1, not a client, is refused;
- research-scratch takes a file written from gpu-1 (as the squashed root: nobody owns it on
  stor-1); imagenet-mini refuses a write;
- a second run of the storage stage changes nothing;
- an address added by hand to an export on stor-1 (mgmt-1's, and the server restarted, so
  mgmt-1 really reads) is named by `rackform verify`; deploying the storage stage again puts
  the export back, verify passes and mgmt-1 is refused again.

Run alone, on one worker: pytest -p no:xdist -m lab tests/lab/test_storage_lab.py -s
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import time

import pytest
import yaml

from rackform import cli
from clusterlab import PROJECT, REPO_ROOT, SITE, WORKERS, deployed_this_session

pytestmark = pytest.mark.lab

SERVER = "stor-1"
OUTSIDER = "mgmt-1"
"""A host on the fabric that is no client of any data set."""
OUTSIDER_ADDRESS = "10.20.1.11"
"""mgmt-1's fab0 address (inventories/lab/host_vars/mgmt-1.yml): what the hand edit admits."""
RO_SET, RW_SET = "imagenet-mini", "research-scratch"
PUSHED = "pushed-4MiB.bin"
PUSHED_BYTES = 4 * 1024 * 1024
SCRATCH_BYTES = 2000
GANESHA_CONF = "/etc/ganesha/ganesha.conf"
SERVED_TIMEOUT_S = 30


def ssh(state, node: str, command: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    address = state.node(node).address
    return subprocess.run(["ssh", "-i", str(state.ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                           f"root@{address}", command], capture_output=True, text=True, timeout=timeout_s)


def run(*args: str) -> tuple[int, str]:
    """`rackform ARGS` in this process: exit status and what it printed; timed (printed with -s)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*args[:1], SITE, "--root", str(REPO_ROOT), *args[1:]])
    said = out.getvalue() + err.getvalue()
    print(f"\nrackform {' '.join(args)}: exit {code} in {time.monotonic() - started:.1f} s\n{said[-2500:]}")
    return code, said


def url(address: str, data_set: str, file: str) -> str:
    return f"nfs://{address}/{data_set}/{file}?version=4"


def nfs_sha256(state, node: str, nfs_url: str) -> subprocess.CompletedProcess[str]:
    """sha256sum of what nfs-cat reads on `node` (fails when nfs-cat does)."""
    return ssh(state, node, f"set -o pipefail; timeout 30 nfs-cat {shlex.quote(nfs_url)} | sha256sum")


@pytest.fixture(scope="module")
def served(shipped_lab):
    """The lab with its data sets served: the stages the storage stage stands on, then storage
    (nothing to do when test_pulumi_lab and test_deploy_lab deployed it all in this session)."""
    if deployed_this_session():
        return shipped_lab
    code, said = run("deploy", "--stage", "provision", "fabric", "os", "storage")
    assert code == 0, said[-3000:]
    return shipped_lab


@pytest.fixture(scope="module")
def address(served) -> str:
    """stor-1's serving address, as rendered (its first fabric address)."""
    return yaml.safe_load((PROJECT / "inventory" / "host_vars" / f"{SERVER}.yml").read_text())["storage_address"]


@pytest.fixture(scope="module")
def pushed(served) -> str:
    """A file of random bytes written on stor-1 into the ro data set; its sha256."""
    result = ssh(served, SERVER, f"head -c {PUSHED_BYTES} /dev/urandom > /srv/data-sets/{RO_SET}/{PUSHED} && "
                                 f"chmod 0644 /srv/data-sets/{RO_SET}/{PUSHED} && "
                                 f"sha256sum /srv/data-sets/{RO_SET}/{PUSHED}")
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[0]


# ---------------------------------------------------------------- reads


@pytest.mark.parametrize("client", WORKERS)
def test_a_file_pushed_to_stor1_is_read_back_from_each_gpu_node(served, address, pushed, client):
    started = time.monotonic()
    result = nfs_sha256(served, client, url(address, RO_SET, PUSHED))
    print(f"\n{client}: nfs-cat of {PUSHED_BYTES} bytes in {time.monotonic() - started:.2f} s (ssh included)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == pushed


def test_a_host_that_is_no_client_is_refused(served, address, pushed):
    result = nfs_sha256(served, OUTSIDER, url(address, RO_SET, PUSHED))
    print(f"\n{OUTSIDER}: exit {result.returncode}: {result.stderr.strip()}")
    assert result.returncode != 0
    assert pushed not in result.stdout
    assert "NFS4ERR" in result.stderr, "the server must answer, and refuse"


def test_scratch_takes_a_write_from_a_client_as_the_squashed_root(served, address):
    written = f"from-gpu-1-{int(time.time())}.bin"
    # Small: libnfs 4.0's nfs-cp fails to write a file of 4,000 bytes or more to Ganesha 4.3 over
    # NFSv4 ("Failed to write to dest file"), root squashed or not; 2,000 bytes are copied whole.
    local = ssh(served, "gpu-1", f"head -c {SCRATCH_BYTES} /dev/urandom > /tmp/{written} && sha256sum /tmp/{written}")
    assert local.returncode == 0, local.stderr
    copy = ssh(served, "gpu-1", f"nfs-cp /tmp/{written} {shlex.quote(url(address, RW_SET, written))}")
    print(f"\ngpu-1: nfs-cp exit {copy.returncode}: {(copy.stdout + copy.stderr).strip()}")
    assert copy.returncode == 0, copy.stdout + copy.stderr
    on_server = ssh(served, SERVER, f"stat -c %U /srv/data-sets/{RW_SET}/{written} && "
                                    f"sha256sum /srv/data-sets/{RW_SET}/{written}")
    assert on_server.returncode == 0, on_server.stderr
    owner, digest = on_server.stdout.split()[:2]
    assert (owner, digest) == ("nobody", local.stdout.split()[0])


def test_the_read_only_data_set_refuses_a_write(served, address):
    result = ssh(served, "gpu-1", f"echo refused > /tmp/ro-probe && "
                                  f"nfs-cp /tmp/ro-probe {shlex.quote(url(address, RO_SET, 'ro-probe'))}")
    print(f"\ngpu-1: nfs-cp into {RO_SET}: exit {result.returncode}: {(result.stdout + result.stderr).strip()}")
    assert result.returncode != 0, result.stdout
    assert ssh(served, SERVER, f"test -e /srv/data-sets/{RO_SET}/ro-probe").returncode == 1


# ---------------------------------------------------------------- converged, then broken and repaired


def test_a_second_storage_run_changes_nothing(served, pushed):
    code, said = run("deploy", "--stage", "storage")
    assert code == 0
    assert "no changes were made: every host already matched the design" in said


def test_verify_passes_its_storage_checks(served, pushed):
    code, said = run("verify", "--stage", "storage")
    assert code == 0, said
    assert re.search(r"verify lab: \d+ machines, \d+ passed, 0 failed", said)


@pytest.fixture(scope="module")
def hand_edited(served, address, pushed):
    """mgmt-1's address added by hand to imagenet-mini's clients on stor-1, Ganesha restarted."""
    edit = (f"sed -i '0,/Clients = /s//Clients = {OUTSIDER_ADDRESS}\\/32, /' {GANESHA_CONF} && "
            f"grep -c '{OUTSIDER_ADDRESS}/32' {GANESHA_CONF} && systemctl restart nfs-ganesha")
    result = ssh(served, SERVER, edit)
    assert result.returncode == 0 and result.stdout.split()[0] == "1", result.stdout + result.stderr
    deadline = time.monotonic() + SERVED_TIMEOUT_S
    while nfs_sha256(served, OUTSIDER, url(address, RO_SET, PUSHED)).returncode != 0:
        assert time.monotonic() < deadline, f"{OUTSIDER} does not read after the hand edit"
        time.sleep(1)
    return served


def test_the_hand_edit_really_lets_the_outsider_read(hand_edited, address, pushed):
    assert nfs_sha256(hand_edited, OUTSIDER, url(address, RO_SET, PUSHED)).stdout.split()[0] == pushed


def test_verify_names_the_address_added_by_hand(hand_edited):
    code, said = run("verify", "--stage", "storage")
    assert code == 1
    failures = [line for line in said.splitlines() if line.strip().startswith("FAIL")]
    assert any(f"/{RO_SET}: admits {OUTSIDER_ADDRESS}/32, not a client" in line for line in failures), said
    assert any("read although not a client" in line and RO_SET in line for line in failures), said


@pytest.fixture(scope="module")
def repaired(hand_edited) -> tuple[int, str]:
    return run("deploy", "--stage", "storage")


def test_deploying_the_storage_stage_repairs_the_export(repaired):
    code, said = repaired
    assert code == 0
    assert "no changes were made" not in said


def test_after_the_repair_verify_passes_and_the_outsider_is_refused(served, repaired, address, pushed):
    code, said = run("verify", "--stage", "storage")
    assert code == 0, said
    assert nfs_sha256(served, OUTSIDER, url(address, RO_SET, PUSHED)).returncode != 0
