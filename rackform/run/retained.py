"""Tenants removed from a site's design whose namespaces the platform keeps until told otherwise.

Applying the platform never deletes a tenant: its namespace holds the tenant's jobs and
data. A tenant taken out of topologies/platform/<site>.yaml is *retained*: `rackform plan`
lists it, every platform run records it (AppliedStage.retained_tenants) until `rackform
deploy SITE --stage platform --prune-tenant NAME` deletes its namespace and queue.

Which tenants the platform applied is read from the files the last platform run recorded
(platform/manifests/tenant-<name>.yaml, rackform.render.platform_files).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from rackform.run.applied import AppliedStage

TENANT_FILE = re.compile(r"^platform/manifests/tenant-(?P<name>[a-z0-9-]+)\.yaml$")


def tenants_in(paths: Iterable[str]) -> set[str]:
    """The tenants whose manifests are among `paths` (rendered or recorded file names)."""
    return {match["name"] for path in paths if (match := TENANT_FILE.match(path))}


def retained_tenants(last: AppliedStage | None, rendered: Collection[str], pruned: Collection[str] = ()) -> list[str]:
    """Tenants the platform applied before (or kept) that the design no longer has, less `pruned`."""
    if last is None:
        return []
    before = tenants_in(last.files) | set(last.retained_tenants)
    return sorted(before - tenants_in(rendered) - set(pruned))


class PruneRefused(ValueError):
    """A --prune-tenant name that is not a retained tenant; the message says which are."""


def check_prune(names: Collection[str], retained: Collection[str], site: str) -> None:
    unknown = sorted(set(names) - set(retained))
    if unknown:
        kept = ", ".join(sorted(retained)) or "none"
        raise PruneRefused(f"--prune-tenant {', '.join(unknown)}: not a tenant removed from topologies/platform/"
                           f"{site}.yaml and still on the cluster (those are: {kept}); nothing was run")
