"""etcd backup and restore on the lab's real control plane (mgmt-1..3, stacked etcd), proved by
losing etcd's data:

1. a marker ConfigMap is written, then `rackform backup lab` takes a snapshot; the snapshot and
   its .sha256 are on the backup host (stor-1, the lab's storage host) and agree there, with
   the size and sha256 the command printed;
2. a second marker is written after the snapshot;
3. etcd's data is destroyed on all three control-plane nodes: etcd stopped (its manifest moved
   out, the container gone), /var/lib/etcd/member removed, the manifest put back (etcd starts
   again on an empty data dir, as after a disk loss);
4. `rackform restore lab --from <snapshot>`; then the first marker is there and the second is
   not, etcd has three healthy, started members, and every node is Ready.

The times of the backup and the restore are printed (run with -s) and recorded as properties
(junit XML). This module destroys etcd: it runs LAST of the shipped lab's modules
(SHIPPED_LAB_MODULES in tests/lab/conftest.py) and takes the lab down at its end
(`shipped_lab_done`). Run alone, on one worker:
    pytest -p no:xdist -m lab tests/lab/test_etcd_recovery_lab.py -s
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import time

import pytest

from rackform import cli
from clusterlab import CONTROL_PLANE, REPO_ROOT, SITE, lab_kubectl, wait_all_ready, wait_for

pytestmark = pytest.mark.lab

NAMESPACE = "default"
BEFORE = "rackform-etcd-marker-before"
AFTER = "rackform-etcd-marker-after"
BACKUP_HOST = "stor-1"
BACKUP_DIR = "/var/backups/rackform/etcd"
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
STOPPED_MANIFEST = "/root/etcd.yaml.stopped-by-test"
ETCDCTL = ("/usr/local/sbin/rackform-etcd etcdctl --endpoints=https://127.0.0.1:2379 "
           "--cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt "
           "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key")
RUNNING = "/usr/local/sbin/rackform-cri-running"
"""The role's query of running Kubernetes containers by name (through ctr: the nodes have no crictl)."""
PRINTED = re.compile(r"^snapshot (etcd-snapshot-\S+\.db): (\d+) bytes, sha256 ([0-9a-f]{64})$", re.MULTILINE)
STOP_TIMEOUT_S = 120
READY_AFTER_RESTORE_S = 420


def ssh(state, node: str, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    address = state.node(node).address
    return subprocess.run(["ssh", "-i", str(state.ssh_key), "-o", "StrictHostKeyChecking=no", "-o",
                           "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5",
                           f"root@{address}", command], capture_output=True, text=True, timeout=timeout_s)


def rackform(*argv: str) -> tuple[int, str, float]:
    """`rackform ARGV` in this process: exit status, what it printed, seconds it took."""
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(argv))
    return code, out.getvalue(), time.monotonic() - started


@pytest.fixture(scope="module")
def lab(shipped_lab_done):
    return shipped_lab_done


@pytest.fixture(scope="module")
def kubectl(lab):
    kubectl = lab_kubectl()
    wait_all_ready(kubectl)
    return kubectl


def _marker(kubectl, name: str) -> None:
    kubectl("delete", "configmap", name, "-n", NAMESPACE, "--ignore-not-found")
    kubectl("create", "configmap", name, "-n", NAMESPACE, f"--from-literal=written={time.time()}")


def _etcd_stopped(state, node: str) -> bool:
    result = ssh(state, node, f"{RUNNING} etcd")
    return result.returncode == 0 and not result.stdout.strip()


@pytest.fixture(scope="module")
def backup(lab, kubectl):
    """The before-marker written, then a snapshot: its name, size, sha256 and the command's output."""
    _marker(kubectl, BEFORE)
    code, output, seconds = rackform("backup", SITE, "--root", str(REPO_ROOT))
    print(f"\nrackform backup {SITE}: exit {code} in {seconds:.1f} s\n{output}")
    assert code == 0, output
    printed = PRINTED.search(output)
    assert printed, f"no 'snapshot NAME: SIZE bytes, sha256 HEX' line in:\n{output}"
    name, size, sha256 = printed.group(1), int(printed.group(2)), printed.group(3)
    return {"name": name, "size_bytes": size, "sha256": sha256, "seconds": seconds, "output": output}


@pytest.fixture(scope="module")
def restored(lab, kubectl, backup):
    """After the snapshot: the after-marker, etcd's data destroyed on every control-plane node, the restore."""
    _marker(kubectl, AFTER)
    for node in CONTROL_PLANE:
        moved = ssh(lab, node, f"mv {MANIFEST} {STOPPED_MANIFEST}")
        assert moved.returncode == 0, f"{node}: {moved.stderr}"
    for node in CONTROL_PLANE:
        wait_for(f"{node}: etcd's container gone", lambda node=node: _etcd_stopped(lab, node), STOP_TIMEOUT_S)
    for node in CONTROL_PLANE:
        destroyed = ssh(lab, node, f"rm -rf /var/lib/etcd/member && test ! -e /var/lib/etcd/member "
                                   f"&& mv {STOPPED_MANIFEST} {MANIFEST}")
        assert destroyed.returncode == 0, f"{node}: {destroyed.stderr}"
    code, output, seconds = rackform("restore", SITE, "--root", str(REPO_ROOT), "--from", backup["name"])
    print(f"\nrackform restore {SITE} --from {backup['name']}: exit {code} in {seconds:.1f} s\n{output}")
    assert code == 0, output
    return {"seconds": seconds, "output": output}


def test_backup_prints_the_snapshot_and_where_it_is_kept(backup, record_property):
    record_property("etcd_backup_s", round(backup["seconds"], 1))
    record_property("etcd_snapshot_bytes", backup["size_bytes"])
    assert backup["size_bytes"] > 0
    assert f"kept in {BACKUP_HOST}:{BACKUP_DIR}/{backup['name']}" in backup["output"]


def test_the_snapshot_and_its_checksum_are_on_the_backup_host(lab, backup):
    name = backup["name"]
    result = ssh(lab, BACKUP_HOST, f"cd {BACKUP_DIR} && sha256sum --check --strict {name}.sha256 "
                                   f"&& cat {name}.sha256 && stat -c '%s %a' {name}")
    assert result.returncode == 0, f"{BACKUP_HOST}:{BACKUP_DIR}/{name}: {result.stdout}{result.stderr}"
    lines = result.stdout.splitlines()
    assert lines[-2].split() == [backup["sha256"], name]
    assert lines[-1].split() == [str(backup["size_bytes"]), "600"]


def test_the_control_plane_keeps_its_own_copy_and_the_timer(lab, backup):
    node = re.fullmatch(r"etcd-snapshot-\d{8}T\d{6}Z-(.+)\.db", backup["name"]).group(1)
    assert node in CONTROL_PLANE
    kept = ssh(lab, node, f"cd /var/lib/rackform/etcd-snapshots && sha256sum --check --strict {backup['name']}.sha256")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    for node in CONTROL_PLANE:
        timer = ssh(lab, node, "systemctl is-enabled rackform-etcd-snapshot.timer && "
                               "systemctl is-active rackform-etcd-snapshot.timer")
        assert timer.stdout.split() == ["enabled", "active"], f"{node}: {timer.stdout}{timer.stderr}"


def test_after_the_restore_what_was_written_before_the_snapshot_is_there(kubectl, restored, backup, record_property):
    record_property("etcd_restore_s", round(restored["seconds"], 1))
    print(f"\netcd snapshot {backup['name']} ({backup['size_bytes']} bytes): backup {backup['seconds']:.1f} s, "
          f"restore {restored['seconds']:.1f} s")
    wait_for(f"configmap {BEFORE} readable", lambda: kubectl("get", "configmap", BEFORE, "-n", NAMESPACE,
                                                             check=False).returncode == 0, 120)


def test_after_the_restore_what_was_written_after_the_snapshot_is_gone(kubectl, restored):
    result = kubectl("get", "configmap", AFTER, "-n", NAMESPACE, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr, result.stdout + result.stderr


def test_etcd_has_three_healthy_started_members(lab, restored):
    health = ssh(lab, CONTROL_PLANE[0], f"{ETCDCTL} endpoint health --cluster -w json")
    assert health.returncode == 0, health.stdout + health.stderr
    assert sorted(entry["health"] for entry in json.loads(health.stdout)) == [True] * len(CONTROL_PLANE)
    members = ssh(lab, CONTROL_PLANE[0], f"{ETCDCTL} member list -w json")
    assert members.returncode == 0, members.stderr
    names = sorted(member.get("name", "") for member in json.loads(members.stdout)["members"])
    assert names == sorted(CONTROL_PLANE), f"etcd members {names}: want one started member per control-plane node"


def test_every_node_is_ready_after_the_restore(kubectl, restored):
    wait_all_ready(kubectl, timeout_s=READY_AFTER_RESTORE_S)


def test_every_control_plane_node_runs_from_a_restored_member_and_its_manifests(lab, restored):
    for node in CONTROL_PLANE:
        state = ssh(lab, node, "test -d /var/lib/etcd/member/snap && test -d /var/lib/etcd/member/wal "
                               "&& test -f /etc/kubernetes/manifests/etcd.yaml "
                               "&& test -f /etc/kubernetes/manifests/kube-apiserver.yaml "
                               "&& ! ls /var/lib/rackform/etcd-restore/manifests/*.yaml 2>/dev/null")
        assert state.returncode == 0, f"{node}: {state.stdout}{state.stderr}"
