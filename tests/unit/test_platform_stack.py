"""The platform stage under Pulumi's mocks, built the way the program builds it (SiteCluster
with the real stage digests): one Playbook applies build/<site>/platform/ as `rackform deploy`
does, and no resource needs a plugin a site cannot have (no pulumi-kubernetes).

What the engine receives is read from the mock monitor's RegisterResource requests: the
inputs, the dependencies, and the `protect` / `retainOnDelete` flags the engine enforces on
`pulumi destroy`. The engine's enforcement runs in tests/lab/test_pulumi_engine_lab.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pulumi
import pytest
from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.site import SiteCluster, SiteClusterArgs  # noqa: E402
from components.stages import stage_digests  # noqa: E402

from rackform.pipeline import load_and_check  # noqa: E402
from rackform.render.project import render_files  # noqa: E402

KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""How the Pulumi SDK sends an unknown value (rpc.UNKNOWN)."""
PLAYBOOK = "pulumi-python:dynamic/rackform:Playbook"


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[dict] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        state = self.resources[response.urn].state if response.urn in self.resources else {}
        self.registered.append({
            "type": request.type, "name": request.name, "parent": request.parent.rsplit("::", 1)[-1],
            "inputs": state, "sent": json_format.MessageToDict(request.object),
            "dependencies": [urn.rsplit("::", 1)[-1] for urn in request.dependencies],
            "provider": request.provider.rsplit("::", 1)[0].rsplit("::", 1)[-1],  # "<urn>::<id>"
            "protect": request.HasField("protect") and request.protect,
            "retain_on_delete": request.HasField("retainOnDelete") and request.retainOnDelete,
        })
        return response

    def named(self, name: str) -> dict:
        return next(r for r in self.registered if r["name"] == name)

    def by_type(self, type_: str) -> list[dict]:
        return [r for r in self.registered if r["type"] == type_]


class StageMocks(pulumi.runtime.Mocks):
    """Echo the inputs; the kubernetes stage reports `kubeconfig` (None: unknown in a preview)."""

    def __init__(self, kubeconfig: str | None):
        self.kubeconfig = kubeconfig

    def new_resource(self, args):
        outputs = dict(args.inputs)
        if args.typ == PLAYBOOK:
            outputs["failed_hosts"] = []
            outputs.pop("kubeconfig", None)
            if self.kubeconfig is not None and args.inputs.get("stage") == "kubernetes":
                outputs["kubeconfig"] = self.kubeconfig
        return f"{args.name}-id", outputs

    def call(self, args):
        return {}, None


def build(*, preview: bool, kubeconfig: str | None) -> Recorder:
    monitor = Recorder(StageMocks(kubeconfig))
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.settings.ROOT.set(None)
    pulumi.runtime.set_all_config({})
    pulumi.runtime.set_mocks(monitor.mocks, project="rackform", stack="lab", preview=preview, monitor=monitor)
    site, _ = load_and_check("lab", REPO)

    @pulumi.runtime.test
    def program():
        SiteCluster(site.name, SiteClusterArgs(site=site, root=str(REPO), stage_digests=stage_digests(site),
                                               bare_metal_nodes=False))

    program()
    return monitor


@pytest.fixture(scope="module")
def up() -> Recorder:
    """`pulumi up` after the kubernetes stage fetched a kubeconfig."""
    return build(preview=False, kubeconfig=KUBECONFIG)


@pytest.fixture(scope="module")
def preview() -> Recorder:
    """`pulumi preview` of a new site: the kubernetes stage pending, its kubeconfig unknown."""
    return build(preview=True, kubeconfig=None)


def platform_children(monitor: Recorder) -> list[dict]:
    return [r for r in monitor.registered if r["parent"] == "lab-platform"]


# ---------------------------------------------------------------- one apply, the CLI's


def test_the_platform_stage_is_a_playbook_of_the_platform_stage_with_the_clis_digest(up):
    """The digest `rackform deploy` records for the platform (rackform.pipeline.stage_digests)."""
    site, _ = load_and_check("lab", REPO)
    from rackform.pipeline import stage_digests as recorded_digests

    apply = up.named("lab-platform-apply")
    assert (apply["type"], apply["parent"]) == (PLAYBOOK, "lab-platform")
    assert {key: apply["inputs"][key] for key in ("site", "stage", "root", "digest")} == {
        "site": "lab", "stage": "platform", "root": str(REPO),
        "digest": recorded_digests(render_files(site))["platform"]}


def test_the_platform_is_its_playbook_alone(up):
    assert [(r["type"], r["name"]) for r in platform_children(up)] == [(PLAYBOOK, "lab-platform-apply")]


def test_no_resource_needs_a_plugin_a_site_cannot_have(up):
    """Every resource is a component or a dynamic resource (served by the Python SDK itself): no
    provider plugin (pulumi-resource-kubernetes cannot be had offline) and no Kubernetes object,
    whose one writer is the platform stage's kubectl and helm."""
    types = {r["type"] for r in up.registered} - {"pulumi:pulumi:Stack"}
    assert types and [t for t in types if not t.startswith(("rackform:index:", "pulumi-python:dynamic/"))] == []


def test_the_platform_playbook_waits_for_the_bootstrap(up):
    assert up.named("lab-platform-apply")["dependencies"] == ["lab-kubernetes"]


def test_verify_waits_for_the_platform_playbook(up):
    assert up.named("lab-verify")["dependencies"] == ["lab-platform-apply"]


def test_the_platform_playbook_takes_the_hosts_lost_before_it(up):
    """Its left_out is the kubernetes stage's failed_hosts, as `rackform deploy` carries them."""
    assert up.named("lab-platform-apply")["inputs"]["left_out"] == []
    assert up.named("lab-platform-apply")["inputs"]["last"] is False


# ---------------------------------------------------------------- pulumi destroy


def test_destroy_stops_at_the_platform_playbook(up):
    """`protect` reaches the engine for the platform Playbook alone: `pulumi destroy` refuses to
    delete it (the tenants' namespaces, the operators and the cluster stay) and names
    `pulumi state unprotect`, the opt-in."""
    assert {r["name"] for r in up.registered if r["protect"]} == {"lab-platform-apply"}


def test_every_stage_is_retained_on_delete(up):
    """`retainOnDelete`: deleting a stage only forgets it; the hosts and the cluster keep what it did."""
    stages = up.by_type(PLAYBOOK)
    assert stages and all(r["retain_on_delete"] for r in stages)


def _has_unknown(value: object) -> bool:
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown(v) for v in value)
    return value == UNKNOWN


def test_in_a_preview_with_the_kubeconfig_unknown_the_platform_is_fully_known(preview):
    """Nothing the platform sends reads the kubeconfig: the engine has no reason to replace it."""
    assert [r["name"] for r in platform_children(preview) if _has_unknown(r["sent"])] == []
