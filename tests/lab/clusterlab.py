"""What the lab modules that work on the shipped lab's Kubernetes cluster share: its names,
kubectl of the pinned release with the kubeconfig the kubernetes stage fetched, and waits."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from rackform.mirror import gobuild
from rackform.mirror.bundle import release_pins
from rackform.mirror.source import go_builds

REPO_ROOT = Path(__file__).resolve().parents[2]
SITE = "lab"
PROJECT = REPO_ROOT / "build" / SITE
KUBECONFIG = PROJECT / "artifacts" / "kubeconfig"
CONTROL_PLANE = ("mgmt-1", "mgmt-2", "mgmt-3")
WORKERS = ("gpu-1", "gpu-2")
VIP = "10.10.0.5"
MIRROR_REGISTRY = "10.10.0.11:5000"
READY_TIMEOUT_S = 240
SHIPPED_LAB_IMAGED_AT: float | None = None
"""When this session imaged the shipped lab afresh (tests/lab/conftest.py), else None (a lab reused)."""


def pinned_kubectl() -> Path:
    """kubectl of the site's pinned release, built here (from the cache)."""
    built = gobuild.build(go_builds(release_pins(REPO_ROOT, SITE))["kubernetes"], progress=lambda _line: None)
    return Path(built.binaries["kubectl"])


class Kubectl:
    """`kubectl(*args)`: run it against the lab cluster; by default assert it succeeded."""

    def __init__(self, argv: list[str]):
        self.argv = argv

    def __call__(self, *args: str, check: bool = True, timeout_s: float = 60, stdin: str | None = None,
                 user: str | None = None) -> subprocess.CompletedProcess[str]:
        impersonate = ["--as", user] if user else []
        result = subprocess.run([*self.argv, *impersonate, *args], capture_output=True, text=True,
                                timeout=timeout_s, input=stdin)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr.strip()}"
        return result

    def json(self, *args: str) -> dict:
        return json.loads(self(*args, "-o", "json").stdout)


def lab_kubectl() -> Kubectl:
    return Kubectl([str(pinned_kubectl()), "--kubeconfig", str(KUBECONFIG)])


def ready_nodes(kubectl) -> dict[str, str]:
    items = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {item["metadata"]["name"]: next(c["status"] for c in item["status"]["conditions"] if c["type"] == "Ready")
            for item in items}


def wait_all_ready(kubectl, timeout_s: float = READY_TIMEOUT_S) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            nodes = ready_nodes(kubectl)
        except AssertionError:
            nodes = {}
        if set(nodes) == {*CONTROL_PLANE, *WORKERS} and set(nodes.values()) == {"True"}:
            return nodes
        assert time.monotonic() < deadline, f"not every node Ready within {timeout_s} s: {nodes}"
        time.sleep(3)


def wait_for(what: str, condition, timeout_s: float, interval_s: float = 2) -> float:
    """Seconds until `condition()` held; fails naming `what` after `timeout_s`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, f"{what}: not within {timeout_s} s"
        time.sleep(interval_s)
    return time.monotonic() - started


def deployed_this_session() -> bool:
    """Whether every stage of the shipped lab is applied, as the design now renders it, since this
    session imaged its nodes (a lab reused with RACKFORM_LAB_REUSE=1: applied as rendered). Then
    a module that needs the deployed cluster need not converge it again: test_deploy_lab's second
    deploy already showed nothing left to change."""
    from datetime import datetime

    from rackform.run import applied
    from rackform.run.plan import plan_site

    if plan_site(SITE, REPO_ROOT).to_run:
        return False
    if SHIPPED_LAB_IMAGED_AT is None:
        return True
    recorded = applied.load(REPO_ROOT, SITE)
    return bool(recorded) and all(
        datetime.fromisoformat(stage.applied_at.replace("Z", "+00:00")).timestamp() >= SHIPPED_LAB_IMAGED_AT
        for stage in recorded.values())
