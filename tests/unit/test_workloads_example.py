"""examples/workloads/: a user's own stack of workloads on a site's cluster, under Pulumi's mocks.

What the engine would be sent: the kubeconfig read from the site's stack through a
StackReference, still a secret, given to a pulumi-kubernetes provider, and the Deployment
created through that provider in the tenant's namespace. Not run: the engine with
pulumi-kubernetes' plugin against the lab's cluster (the plugin cannot be had here;
docs/pulumi.md).
"""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path

import pulumi
from google.protobuf import json_format
from pulumi.runtime.mocks import MockMonitor

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "__main__.py"
KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: [{name: lab, cluster: {server: 'https://10.10.0.5:6443'}}]\n"
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")
"""How the SDK marks a secret value in a RegisterResource request (rpc._special_secret_sig)."""


class SiteStack(pulumi.runtime.Mocks):
    def __init__(self):
        self.references: list[str] = []

    def new_resource(self, args):
        if args.typ == "pulumi:pulumi:StackReference":
            self.references.append(args.inputs["name"])
            return args.name, {"name": args.inputs["name"], "outputs": {"kubeconfig": KUBECONFIG},
                               "secretOutputNames": ["kubeconfig"]}
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args):
        return {}, None


class Recorder(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.sent: dict[str, dict] = {}

    def RegisterResource(self, request):
        self.sent[request.name] = {"type": request.type, "object": json_format.MessageToDict(request.object),
                                   "provider": request.provider}
        return super().RegisterResource(request)


def run_example() -> tuple[SiteStack, Recorder]:
    mocks = SiteStack()
    monitor = Recorder(mocks)
    asyncio.set_event_loop(asyncio.new_event_loop())
    pulumi.runtime.set_all_config({"site-workloads:siteStack": "organization/rackform/lab"})
    pulumi.runtime.set_mocks(mocks, project="site-workloads", stack="lab-workloads", preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program():
        runpy.run_path(str(EXAMPLE))

    program()
    return mocks, monitor


def test_the_kubeconfig_comes_from_the_sites_stack_and_stays_secret():
    mocks, monitor = run_example()
    assert mocks.references == ["organization/rackform/lab"]
    sent = monitor.sent["site-cluster"]
    assert sent["type"] == "pulumi:providers:kubernetes"
    kubeconfig = sent["object"]["kubeconfig"]
    assert kubeconfig.get(SECRET_SIG[0]) == SECRET_SIG[1] and kubeconfig["value"] == KUBECONFIG


def test_the_workload_goes_through_that_provider_into_the_tenants_namespace():
    _mocks, monitor = run_example()
    deployment = monitor.sent["echo"]
    assert deployment["type"] == "kubernetes:apps/v1:Deployment"
    assert "::site-cluster::" in deployment["provider"]
    assert deployment["object"]["metadata"]["namespace"] == "inference"
