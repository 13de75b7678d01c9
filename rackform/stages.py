"""The deploy's stages, in order: defined once, here.

The emitted `site.yml`, the stage digests (rackform.render.digest), the CLI, the stage runner
and the Pulumi resource dependencies all read `STAGES`. It sits just above the model (it
needs only the site), so render and the pipeline can both import it; `rackform.pipeline`
offers the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackform.model.site import Site


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    playbook: str | None
    """The emitted playbook that runs it; None where Pulumi (not Ansible) acts."""
    summary: str


STAGES: tuple[Stage, ...] = (
    Stage("provision", "provision.yml", "BMCs reachable and hardened, hosts powered on from the right boot device"),
    Stage("fabric", "fabric.yml", "switch baseline and lossless RoCE on switches and hosts"),
    Stage("os", "os.yml", "the site mirror served and every server pointed at it; base OS: hostname, /etc/hosts, "
                          "time sync, sysctls, fabric MTU"),
    Stage("storage", "storage.yml", "data sets served over NFS from the storage blocks, their clients ready to read them"),
    Stage("kubernetes", "kubernetes.yml", "container runtime and Kubernetes bootstrap"),
    Stage("platform", None, "GPU platform on the cluster: build/<site>/platform/ (kubectl and helm, or pulumi-kubernetes)"),
    Stage("verify", "verify.yml", "post-deploy checks on every host"),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)

STORAGE_STAGE = "storage"
VERIFY_STAGE = "verify"

NOT_APPLICABLE = {STORAGE_STAGE: "the site serves no data sets (no data_sets in its design)"}
"""Stage -> why a site may have nothing for it to do: its playbook is then not rendered, the
stage has no digest, and a deploy reports it as not run with this reason."""


def stage_not_applicable(site: Site, stage: str) -> str | None:
    """Why `site` has nothing for `stage` to do, or None."""
    if stage == STORAGE_STAGE and not site.data_sets:
        return NOT_APPLICABLE[stage]
    return None
