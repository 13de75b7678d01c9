"""Lab only: GPU nodes without GPUs advertise the GPUs their block has.

The lab's GPU servers are containers on a machine without GPUs: no driver, no NVIDIA
device plugin, so their Nodes advertise no `nvidia.com/gpu`. To exercise what GPUs
drive in Kubernetes (quotas, queues, scheduling onto GPU nodes only), this patches each
GPU node's status with the capacity its block's design gives it, the way Kubernetes
documents advertising an extended resource by hand, and labels it
`nvidia.com/gpu.present=true` as NVIDIA's GPU feature discovery would. Nothing runs on
those GPUs: a pod that asks for one gets a node, not a device.

Never part of a real site's deploy: on real GPU nodes the device plugin advertises the
real devices and would fight this patch.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence

from rackform.lab import LabError
from rackform.k8s.gpu_sharing import GPU_RESOURCE
from rackform.model.site import Site
from rackform.process_environment import tool_environment

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"


def design_gpus(site: Site) -> dict[str, int]:
    """Node name -> GPUs its block gives it, for every server with GPUs."""
    return {name: host.block.node.gpus.count for name, host in sorted(site.hosts.items())
            if host.block.node is not None and host.block.node.gpus is not None and host.block.node.gpus.count}


ALLOCATABLE_TIMEOUT_S = 90.0
"""The kubelet copies capacity to allocatable at its next node status update (every 10 s by default)."""


def advertise(kubectl: Sequence[str], gpus: dict[str, int], timeout_s: float = 60) -> None:
    """Give each node the GPU capacity and label of `gpus` (kubectl argv with its kubeconfig), and
    wait until the scheduler can count on them (allocatable); LabError when it cannot."""
    for node, count in gpus.items():
        patch = {"status": {"capacity": {GPU_RESOURCE: str(count)}}}
        for argv in ([*kubectl, "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch)],
                     [*kubectl, "label", "node", node, f"{GPU_PRESENT_LABEL}=true", "--overwrite"]):
            result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False,
                                    env=tool_environment("kubectl"))
            if result.returncode != 0:
                raise LabError(f"advertising {count} GPU(s) on {node}: {result.stderr.strip()}")
    deadline = time.monotonic() + ALLOCATABLE_TIMEOUT_S
    while True:
        now = advertised(kubectl, timeout_s)
        missing = {node: count for node, count in gpus.items() if now.get(node) != count}
        if not missing:
            return
        if time.monotonic() > deadline:
            raise LabError(f"nodes do not report their GPUs as allocatable after {ALLOCATABLE_TIMEOUT_S:g} s: "
                           + ", ".join(f"{node} {now.get(node, 0)} of {count}" for node, count in missing.items()))
        time.sleep(2)


def advertised(kubectl: Sequence[str], timeout_s: float = 60) -> dict[str, int]:
    """Node name -> allocatable `nvidia.com/gpu` as the API server reports it (0 where none)."""
    result = subprocess.run([*kubectl, "get", "nodes", "-o", "json"], capture_output=True, text=True,
                            env=tool_environment("kubectl"), timeout=timeout_s, check=False)
    if result.returncode != 0:
        raise LabError(f"listing nodes: {result.stderr.strip()}")
    return {item["metadata"]["name"]: int(item["status"].get("allocatable", {}).get(GPU_RESOURCE, "0"))
            for item in json.loads(result.stdout)["items"]}
