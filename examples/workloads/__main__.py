"""Your workloads on a rackform site's cluster: a StackReference to the site's stack for its
kubeconfig (a secret output), and pulumi-kubernetes for the objects.

    pulumi stack init lab-workloads
    pulumi config set siteStack organization/rackform/lab
    pulumi up

The site's stack writes the platform (operators, tenants' namespaces, quotas); this stack only
adds objects inside a tenant's namespace, so the two never write the same object.
"""

import pulumi
import pulumi_kubernetes as k8s

config = pulumi.Config()
site = pulumi.StackReference(config.get("siteStack") or "organization/rackform/lab")
namespace = config.get("namespace") or "inference"

# Secret in, secret kept: the provider's inputs are stored encrypted.
cluster = k8s.Provider("site-cluster", kubeconfig=site.require_output("kubeconfig"))

labels = {"app": "echo"}
echo = k8s.apps.v1.Deployment(
    "echo",
    metadata={"name": "echo", "namespace": namespace, "labels": labels},
    spec={
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{
                "name": "echo",
                "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                "args": ["netexec", "--http-port=8080"],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "64Mi"}},
            }]},
        },
    },
    opts=pulumi.ResourceOptions(provider=cluster),
)

pulumi.export("deployment", echo.metadata["name"])
