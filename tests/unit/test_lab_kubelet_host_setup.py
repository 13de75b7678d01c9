"""The lab node setup for a kubelet (rackform.lab.kubelet_host), without a lab: the shell
script's syntax, the containerd configuration it derives from the role's, and the cgroup
hierarchies and nspawn options rackform.lab.nodes gives a node. The live proof is
tests/lab/test_lab_kubelet_host.py."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from rackform.lab import base, kubelet_host, nodes
from rackform.lab.state import NodeSpec

CRI = "io.containerd.grpc.v1.cri"

# Debian's own /etc/containerd/config.toml (indented tables), and the two shapes the
# containerd role writes: with a sandbox image (the CRI table present) and without.
DEBIAN_DEFAULT = """\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""
ROLE_WITH_SANDBOX = """\
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "10.10.0.11:5000/pause:3.10.2"
  restrict_oom_score_adj = false

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
ROLE_WITHOUT_SANDBOX = """\
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def test_script_is_valid_sh():
    subprocess.run(["sh", "-n", "-c", kubelet_host.SCRIPT], check=True)


def derived_config(tmp_path: Path, source: str | None) -> dict:
    """Run the script's containerd-config step with its two paths moved into tmp_path."""
    role_file = tmp_path / "config.toml"
    if source is not None:
        role_file.write_text(source)
    script = (kubelet_host.SCRIPT.replace("/etc/containerd/config.toml", str(role_file))
              .replace(kubelet_host.RUN_DIR, str(tmp_path / "run")))
    subprocess.run(["sh", "-c", script, "kubelet-host", "containerd-config"], check=True)
    return tomllib.loads((tmp_path / "run" / Path(kubelet_host.CONTAINERD_CONFIG).name).read_text())


@pytest.mark.parametrize("source", [DEBIAN_DEFAULT, ROLE_WITH_SANDBOX, ROLE_WITHOUT_SANDBOX, None],
                         ids=["debian-default", "role-with-sandbox", "role-without-sandbox", "no-file"])
def test_containerd_config_adds_restrict_oom_score_adj_and_keeps_the_rest(tmp_path, source):
    derived = derived_config(tmp_path, source)
    original = tomllib.loads(source or "version = 2\n")
    expected = dict(original)
    expected.setdefault("plugins", {}).setdefault(CRI, {})["restrict_oom_score_adj"] = True
    assert derived == expected


def test_image_recipe_carries_the_lab_node_setup():
    """A change to the setup's files makes a new base image (its name is a hash of the recipe)."""
    before = base.image_name()
    original = kubelet_host.UNIT
    try:
        kubelet_host.UNIT = original + "# changed\n"
        assert base.image_name() != before
    finally:
        kubelet_host.UNIT = original


def test_controller_hierarchies_are_read_from_the_mounts(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    assert nodes.controller_hierarchies(mounts) == [Path("/sys/fs/cgroup/cpu,cpuacct"), Path("/sys/fs/cgroup/memory")]


def test_nspawn_gives_the_node_keyrings_and_a_real_containerd_folder():
    spec = NodeSpec(name="n1", kind="host", os="debian", role="hci", machine="s-n1", netns="rf.s.n1",
                    node_dir="/var/lib/rackform/labs/s/n1", mgmt_ifname="mgmt0", mgmt_root_ifname="s.n1",
                    mgmt_mac="02:00:00:00:00:01", mgmt_address="10.0.0.2/24", gateway="10.0.0.1")
    command = nodes.nspawn_command(spec)
    assert "--system-call-filter=@keyring" in command
    assert "--bind=/var/lib/rackform/labs/s/n1/containerd:/var/lib/containerd" in command
