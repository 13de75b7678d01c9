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


def bare_metal_nodes(config: pulumi.Config) -> bool:
    """Stack config `rackform:bareMetalNodes` (default true): one BareMetalNode per server."""
    try:
        wanted = config.get_bool("bareMetalNodes")
    except pulumi.ConfigTypeError:
        raise pulumi.RunError(f"stack config rackform:bareMetalNodes is {config.get('bareMetalNodes')!r}; "
                              f"expected true or false") from None
    return True if wanted is None else wanted


config = pulumi.Config("rackform")
site = checked_site(config.get("site") or pulumi.get_stack())
cluster = SiteCluster(site.name, SiteClusterArgs(site=site, root=str(ROOT), stage_digests=stage_digests(site),
                                                 bare_metal_nodes=bare_metal_nodes(config)))

pulumi.export("site", cluster.site)
pulumi.export("hosts", cluster.hosts)
pulumi.export("power_w", cluster.power_w)
pulumi.export("stages", cluster.stages)
