"""A lab node can host a kubelet and its containers (rackform.lab.kubelet_host, docs/lab.md).

One booted node of its own small site (`khtest`: one HCI host, 10.73.x only) shows what the
lab node setup gives it: cgroup v1 controller hierarchies it can write, rooted at its own
cgroup on the machine; /dev/kmsg; the kernel settings the kubelet wants, seen by the node
while the machine keeps its own values; iptables, ipset and nft in its network namespace;
runc running a container under a memory limit that the kernel enforces; and containerd
(`ctr`) running an image imported from an OCI archive, on /var/lib/containerd that is not
overlayfs, with both the cgroupfs and the systemd cgroup driver. Nothing here needs a
package beyond the lab's own: the container's root filesystem is made of the node's own
binaries, and the OCI archive is written in Python.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from rackform.lab import lab, nodes, state
from rackform.lab.kubelet_host import CONTAINERD_CONFIG, KERNEL_TUNABLES, UNIT_NAME
from labenv import skip_reason
from sitebuilder import ROCE_FABRIC, build_site, group_vars, networks, one_rack_site

pytestmark = pytest.mark.lab

SITE, NODE = "khtest", "kh-1"
SITE_YAML = one_rack_site(SITE, "Kubelet host tests - one HCI host",
                          "- {name: hci-1, block: hci, position_u: 1, hosts: [kh-1]}\n",
                          networks("10.73.0.0/24", "10.73.1.0/24", "10.73.128.0/17") + ROCE_FABRIC
                          + "cabling: []\n")
HOST_VARS = """\
management_address: 10.73.0.11
management_mac: "02:73:00:00:00:0b"
bmc_address: 10.73.1.11
bmc_mac: "02:73:01:00:00:0b"
serial: KHTEST-1
"""
# The controllers the kubelet's cgroup manager and runc write on a cgroup v1 machine.
CONTROLLERS = ("memory", "cpu", "cpuacct", "cpuset", "pids", "devices", "freezer", "blkio")
LIMIT = 32 * 1024 * 1024
IMAGE = "rackform.lab/probe:1"
BUNDLE = "/root/probe"  # in the node: runc's bundle (config.json, rootfs/)


def read_machine_tunables() -> dict[str, str]:
    return {path: Path("/proc/sys", path).read_text().strip() for path in KERNEL_TUNABLES}


@pytest.fixture(scope="module")
def machine_tunables() -> dict[str, str]:
    """The machine's own values of the kernel settings the kubelet wants, before the lab is up."""
    return read_machine_tunables()


@pytest.fixture(scope="module")
def khtest(tmp_path_factory, pytestconfig, machine_tunables):
    """`khtest` up (one node); down afterwards, always."""
    reason = skip_reason(pytestconfig)
    if reason:
        pytest.skip(reason)
    root = build_site(tmp_path_factory.mktemp("khtest-root"), SITE, SITE_YAML, {NODE: HOST_VARS},
                      group_vars(SITE, "10.73.0.1"))
    lab.down(SITE, progress=lambda line: None)  # a run that died earlier may have left some
    try:
        status = lab.up(SITE, root, progress=print)
        assert status.up, "\n".join(status.lines())
        yield state.require(SITE)
    finally:
        lab.down(SITE, progress=print)


def on(lab_state: state.LabState, command: str, check: bool = True, timeout_s: float = 60) -> str:
    return lab.ssh(lab_state, lab_state.node(NODE), command, timeout_s=timeout_s, check=check).stdout.strip()


def test_node_setup_ran_at_boot(khtest):
    assert on(khtest, f"systemctl is-active {UNIT_NAME}") == "active"
    assert on(khtest, "systemctl --failed --no-legend --plain", check=False) == ""


# --- cgroups ----------------------------------------------------------------------------

@pytest.mark.parametrize("controller", CONTROLLERS)
def test_controller_hierarchy_is_writable_and_rooted_at_the_node(khtest, controller):
    """mkdir a child cgroup, move a process into it; on the machine it is under the node's cgroup."""
    folder = f"/sys/fs/cgroup/{controller}/rackform-test"
    seed = (f"cat /sys/fs/cgroup/cpuset/cpuset.cpus > {folder}/cpuset.cpus && "
            f"cat /sys/fs/cgroup/cpuset/cpuset.mems > {folder}/cpuset.mems && " if controller == "cpuset" else "")
    joined = on(khtest, f"mkdir {folder} && {seed}sh -c 'echo $$ > {folder}/cgroup.procs && cat /proc/self/cgroup'; "
                        f"rmdir {folder}")
    on_machine = Path("/sys/fs/cgroup", controller, "rackform", SITE, NODE)
    assert f":{controller}:/rackform-test" in joined and on_machine.is_dir()


def test_node_cgroups_are_its_own_on_the_machine(khtest):
    """nspawn runs in rackform/<site>/<node> in every hierarchy, the controllers' too."""
    nspawn = next(pid for pid in nodes.cgroup_pids(khtest, khtest.node(NODE))
                  if nodes.process_name(pid) == "systemd-nspawn")
    lines = Path(f"/proc/{nspawn}/cgroup").read_text().splitlines()
    paths = {line.split(":")[1]: line.split(":")[2] for line in lines}
    assert {controller: paths.get(controller) for controller in CONTROLLERS} == \
        {controller: f"/rackform/{SITE}/{NODE}" for controller in CONTROLLERS}


# --- /dev/kmsg, kernel settings, network tools ---------------------------------------------

def test_dev_kmsg_exists(khtest):
    assert on(khtest, "test -e /dev/kmsg && readlink /dev/kmsg") == "/dev/console"


@pytest.mark.parametrize("path", KERNEL_TUNABLES)
def test_node_sees_the_kernel_setting_the_kubelet_wants(khtest, path):
    assert on(khtest, f"cat /proc/sys/{path}") == str(KERNEL_TUNABLES[path])


def test_machine_keeps_its_own_kernel_settings(khtest, machine_tunables):
    assert read_machine_tunables() == machine_tunables


def test_kernel_settings_stay_read_only_in_the_node(khtest):
    """The node cannot write them (the masks are read-only bind mounts; the rest is nspawn's)."""
    out = on(khtest, "for p in vm/overcommit_memory kernel/panic; do "
                     "(cat /proc/sys/$p > /proc/sys/$p) 2>/dev/null && echo written || echo refused; done")
    assert out.split() == ["refused", "refused"]


def test_netfilter_tools_work_in_the_node(khtest):
    """What kube-proxy (iptables or nftables mode) and kube-router (iptables, ipset) call."""
    out = on(khtest, "iptables -t nat -N RF-TEST && iptables -t nat -X RF-TEST && "
                     "ip6tables -t nat -N RF-TEST && ip6tables -t nat -X RF-TEST && "
                     "ipset create rf-test hash:ip && ipset destroy rf-test && "
                     "nft add table inet rf_test && nft delete table inet rf_test && "
                     "conntrack -C >/dev/null && ebtables -L >/dev/null && echo ok")
    assert out == "ok"


def test_bridge_netfilter_is_per_node(khtest):
    assert on(khtest, "cat /proc/sys/net/bridge/bridge-nf-call-iptables") in ("0", "1")


# --- runc --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundle(khtest) -> Path:
    """A runc bundle in the node: a root filesystem of the node's own dash, cat, sleep and dd
    with their libraries, and `runc spec`'s config. Returns its folder as the machine sees it."""
    on(khtest, f"""set -e; rm -rf {BUNDLE}; mkdir -p {BUNDLE}/rootfs/bin; cd {BUNDLE}
        for b in /bin/dash /bin/cat /bin/sleep /bin/dd; do
          cp $b rootfs/bin/
          for lib in $(ldd $b | grep -o '/[^ ]*'); do mkdir -p rootfs$(dirname $lib); cp -L $lib rootfs$lib; done
        done
        ln -s dash rootfs/bin/sh; runc spec""")
    return khtest.node(NODE).merged_dir / BUNDLE.lstrip("/")


def run_in_runc(lab_state: state.LabState, bundle: Path, name: str, args: list[str]) -> tuple[int, str]:
    config = json.loads((bundle / "config.json").read_text())
    config["process"].update(terminal=False, args=args)
    config["linux"]["resources"]["memory"] = {"limit": LIMIT}
    (bundle / "config.json").write_text(json.dumps(config))
    result = lab.ssh(lab_state, lab_state.node(NODE), f"cd {BUNDLE} && runc run {name}", check=False)
    return result.returncode, result.stdout.strip()


def test_runc_runs_a_container_under_a_memory_limit(khtest, bundle):
    rc, out = run_in_runc(khtest, bundle, "probe-limit",
                          ["/bin/sh", "-c", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /proc/self/cgroup"])
    assert rc == 0 and out.splitlines()[0] == str(LIMIT) and ":memory:/probe-limit" in out


def test_the_kernel_enforces_the_containers_memory_limit(khtest, bundle):
    """dd's 64 MiB buffer does not fit in 32 MiB: the kernel's OOM killer ends it (128 + 9)."""
    rc, _ = run_in_runc(khtest, bundle, "probe-oom", ["/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"])
    assert rc == 137


# --- containerd --------------------------------------------------------------------------

def oci_archive(rootfs: Path, name: str) -> bytes:
    """An OCI image archive (what `ctr images import` reads) of one layer holding `rootfs`."""
    layer_tar = io.BytesIO()
    with tarfile.open(fileobj=layer_tar, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(rootfs)), recursive=False)
    blobs: dict[str, bytes] = {}

    def blob(media_type: str, data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}

    config = {"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer_tar.getvalue()).hexdigest()}"]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": blob("application/vnd.oci.image.config.v1+json", json.dumps(config).encode()),
                "layers": [blob("application/vnd.oci.image.layer.v1.tar+gzip",
                                gzip.compress(layer_tar.getvalue(), mtime=0))]}
    entry = blob("application/vnd.oci.image.manifest.v1+json", json.dumps(manifest).encode())
    entry["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.split(":")[-1]}
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
             "index.json": json.dumps({"schemaVersion": 2, "manifests": [entry]}).encode(),
             **{f"blobs/sha256/{digest}": data for digest, data in blobs.items()}}
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for arcname, data in files.items():
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()


@pytest.fixture(scope="module")
def imported(khtest, bundle) -> str:
    """containerd started in the node, the probe image imported into it; returns `ctr images ls`."""
    (bundle.parent / "probe.tar").write_bytes(oci_archive(bundle / "rootfs", IMAGE))
    on(khtest, "systemctl start containerd && ctr version >/dev/null")
    on(khtest, "ctr images import /root/probe.tar")
    return on(khtest, "ctr images ls -q")


def test_containerd_keeps_its_data_off_overlayfs(khtest, imported):
    """overlayfs cannot stack its layers on the node's overlayfs root: /var/lib/containerd is on
    the machine's filesystem (the node's DATA_DIRS), and containerd uses its overlayfs snapshotter."""
    assert on(khtest, "findmnt -no FSTYPE /var/lib/containerd") != "overlay"
    assert on(khtest, "ctr snapshots --snapshotter overlayfs ls | tail -n +2 | wc -l") != "0"


def test_containerd_runs_with_restricted_oom_score_adj(khtest, imported):
    dump = on(khtest, f"containerd --config {CONTAINERD_CONFIG} config dump")
    assert "restrict_oom_score_adj = true" in dump


@pytest.mark.parametrize(("driver", "flags", "memory_cgroup"), [
    ("cgroupfs", "--cgroup /rackform-ctr-fs", "/rackform-ctr-fs"),
    ("systemd", "--runc-systemd-cgroup --cgroup system.slice:rackform:ctr-sd", "/system.slice/rackform-ctr-sd.scope"),
])
def test_ctr_runs_the_imported_image_under_a_memory_limit(khtest, imported, driver, flags, memory_cgroup):
    name = f"probe-{driver}"
    assert IMAGE in imported
    try:
        on(khtest, f"ctr run -d {flags} --memory-limit {LIMIT} {IMAGE} {name} /bin/sleep 60")
        seen = on(khtest, f"cat /sys/fs/cgroup/memory{memory_cgroup}/memory.limit_in_bytes; "
                          f"grep :memory: /proc/$(ctr tasks ls | awk '$1 == \"{name}\" {{print $2}}')/cgroup")
    finally:
        on(khtest, f"ctr tasks kill -s KILL {name}; sleep 0.5; ctr tasks rm -f {name}; ctr containers rm {name}",
           check=False)
    limit, cgroup = seen.splitlines()
    assert (limit, cgroup.split(":", 1)[1]) == (str(LIMIT), f"memory:{memory_cgroup}")


def test_machine_still_keeps_its_own_kernel_settings(khtest, imported, machine_tunables):
    """After runc and containerd ran in the node, the machine's values are the ones from before."""
    assert read_machine_tunables() == machine_tunables


def test_setup_runs_again_after_a_power_cycle_and_images_stay(khtest, imported):
    nodes.power_off(SITE, NODE, soft=True)
    nodes.power_on(SITE, NODE)
    lab.wait_until_ready(khtest, khtest.node(NODE), timeout_s=60)
    assert on(khtest, "findmnt -no OPTIONS /sys/fs/cgroup/memory").startswith("rw")
    assert IMAGE in on(khtest, "systemctl start containerd && ctr images ls -q")
