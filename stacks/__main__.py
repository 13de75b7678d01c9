"""rackform's Pulumi program: one stack per site (`pulumi up -s lab`); see docs/pulumi.md.

The stack's site is the `rackform:site` config key, else the stack name. The design
is loaded and checked by the same pipeline as the CLI; a design with errors stops
here, before any resource is registered.
"""

from pathlib import Path

import pulumi
from components.site import SiteCluster, SiteClusterArgs
from components.stages import stage_digests

from rackform.pipeline import BadInput, DesignRejected, load_and_check

ROOT = Path(__file__).resolve().parent.parent


def checked_site(site_name: str):
    try:
        site, warnings = load_and_check(site_name, ROOT)
    except BadInput as error:
        raise pulumi.RunError(f"site '{site_name}' cannot be loaded:\n{error}") from None
    except DesignRejected as rejected:
        raise pulumi.RunError(f"{rejected}:\n" + "\n".join(map(str, rejected.findings))) from None
    for warning in warnings:
        pulumi.log.warn(str(warning))
    return site


config = pulumi.Config("rackform")
site = checked_site(config.get("site") or pulumi.get_stack())
nodes = config.get_bool("bareMetalNodes")
cluster = SiteCluster(site.name, SiteClusterArgs(site=site, root=str(ROOT), stage_digests=stage_digests(site),
                                                 bare_metal_nodes=True if nodes is None else nodes))

pulumi.export("site", cluster.site)
pulumi.export("hosts", cluster.hosts)
pulumi.export("power_w", cluster.power_w)
pulumi.export("stages", cluster.stages)
