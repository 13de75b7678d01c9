"""Cordon, drain, uncordon and forget a node where the site has a Kubernetes cluster.

The cluster is the one the platform stage applies to (`platform_kubeconfig`: the kubeconfig
the kubernetes stage fetched, else $KUBECONFIG), driven with kubectl. Where there is none
(the lab: no kubeadm there) every call says so and does nothing: `Cluster.absent` holds why.

In the run layer, beside the platform stage whose kubeconfig it uses: the stage runner asks
it whether a day-2 playbook has a cluster to act on (rackform.run.stages), and the day-2
commands cordon and drain through it.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from rackform.installed_tools import find_tool, not_found
from rackform.process_environment import tool_environment

DRAIN_TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class Cluster:
    kubeconfig: Path | None
    absent: str | None
    """Why there is no cluster to talk to (None: there is one)."""

    def _kubectl(self, *argv: str, timeout_s: float = 60) -> tuple[bool, str]:
        kubectl = find_tool("kubectl") or "kubectl"  # `find` found it; were it gone since, the error says so
        result = subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig), *argv], capture_output=True,
                                text=True, timeout=timeout_s, check=False, env=tool_environment("kubectl"))
        return result.returncode == 0, (result.stdout + result.stderr).strip()

    def cordon(self, host: str) -> tuple[bool, str]:
        return self._skip() or self._kubectl("cordon", host)

    def drain(self, host: str) -> tuple[bool, str]:
        return self._skip() or self._kubectl("drain", host, "--ignore-daemonsets", "--delete-emptydir-data",
                                             f"--timeout={DRAIN_TIMEOUT_S}s", timeout_s=DRAIN_TIMEOUT_S + 30)

    def uncordon(self, host: str) -> tuple[bool, str]:
        return self._skip() or self._kubectl("uncordon", host)

    def forget(self, host: str) -> tuple[bool, str]:
        """Delete the node object (a retired or replaced node re-joins as a new one)."""
        return self._skip() or self._kubectl("delete", "node", host, "--ignore-not-found")

    def _skip(self) -> tuple[bool, str] | None:
        return (True, f"no cluster: {self.absent}") if self.absent else None


def find(project_dir: Path) -> Cluster:
    from rackform.run.platform_apply import platform_kubeconfig

    kubeconfig = platform_kubeconfig(project_dir)
    if kubeconfig is None:
        return Cluster(None, f"no kubeconfig for this site (the kubernetes stage fetched none to {project_dir}/"
                             f"artifacts/ and $KUBECONFIG names no file): nothing to cordon or drain")
    if find_tool("kubectl") is None:
        return Cluster(kubeconfig, f"{not_found(['kubectl'])}: nothing was cordoned or drained")
    return Cluster(kubeconfig, None)
