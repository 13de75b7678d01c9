"""rackform's Pulumi program: one stack per site (`pulumi up -s lab`); see docs/pulumi.md.

The stack's site is the `rackform:site` config key, else the stack name. One site has
one stack: a second stack of a site (another Pulumi.<stack>.yaml naming it) is refused,
since both would render into build/<site>/ and drive the same hardware. The design
is loaded and checked by the same pipeline as the CLI; a design with errors stops
here, before any resource is registered.
"""

import contextlib
import os
from pathlib import Path

import pulumi
import yaml
from components.site import SiteCluster, SiteClusterArgs
from components.stages import stage_digests

from rackform.pipeline import BadInput, DesignRejected, load_and_check
from rackform.run.sitelock import SiteLocked, engine_pid, site_lock

def project_root() -> Path:
    """The repo holding topologies/, inventories/ and the Pulumi.<stack>.yaml files: $RACKFORM_ROOT
    when set; else the Pulumi project's folder, where its Pulumi.yaml is (a site repo made by
    `rackform init` runs this program, installed with rackform, from its own stacks/: this file's
    folder is then inside the package, never the site repo); else this checkout (no engine: mocks)."""
    given = os.environ.get("RACKFORM_ROOT")
    if given:
        return Path(given)
    project = pulumi.get_root_directory()  # under mocks a placeholder, not a folder
    if project and (Path(project) / "Pulumi.yaml").is_file():
        return Path(project)
    return Path(__file__).resolve().parent.parent


ROOT = project_root()


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


def other_stacks_of(site_name: str, stack: str, project_dir: Path = ROOT) -> list[str]:
    """The other stacks of this project (Pulumi.<stack>.yaml beside Pulumi.yaml) that deploy `site_name`."""
    others = []
    for path in sorted(project_dir.glob("Pulumi.*.yaml")):
        name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        if name == stack:
            continue
        try:
            settings = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("config") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue  # not ours to judge; the engine reports a broken stack file itself
        if (settings.get("rackform:site") or name) == site_name:
            others.append(name)
    return others


def one_stack_per_site(site_name: str, stack: str, project_dir: Path = ROOT) -> None:
    others = other_stacks_of(site_name, stack, project_dir)
    if others:
        raise pulumi.RunError(
            f"site '{site_name}' already has the stack {others[0]} (Pulumi.{others[0]}.yaml); a second stack "
            f"'{stack}' would render into the same build/{site_name}/ and drive the same hardware. Use "
            f"`pulumi up -s {others[0]}`, or give this stack another site with rackform:site")


SECRET_KEYS = ("vaultPassword", "switchPassword")
"""Not declared in Pulumi.yaml (the engine allows no default for a secret key), so checked here."""


def secrets_set_with_secret(config: pulumi.Config) -> None:
    """Refuse a password set in plaintext (it would sit readable in Pulumi.<stack>.yaml)."""
    plain = [key for key in SECRET_KEYS
             if config.get(key) is not None and not pulumi.runtime.is_config_secret(config.full_key(key))]
    if plain:
        keys = ", ".join(f"rackform:{key}" for key in plain)
        raise pulumi.RunError(
            f"stack config {keys} is set in plaintext in Pulumi.{pulumi.get_stack()}.yaml; set it with "
            f"`pulumi config set --secret rackform:{plain[0]} -s {pulumi.get_stack()}` (it prompts) and commit the "
            f"encrypted value")


def bundle_ready(checked) -> None:
    """The site mirror's bundle, where a stage serves it: refused before any resource is registered
    when missing, as `rackform deploy` refuses it (otherwise provision and fabric would change every
    host before the os stage failed on every node); a preview only warns."""
    from rackform.render.project import render_files
    from rackform.run.bundle_preflight import check_bundle
    from rackform.stages import STAGES

    try:
        check_bundle(checked, ROOT, render_files(checked), [stage.playbook for stage in STAGES if stage.playbook])
    except BadInput as error:
        if pulumi.runtime.is_dry_run():
            pulumi.log.warn(f"`pulumi up` will refuse this site:\n{error}")
            return
        raise pulumi.RunError(f"site '{checked.name}' cannot be deployed yet:\n{error}") from None


def hold_site_lock(name: str) -> contextlib.ExitStack:
    """The site's lock for the whole `pulumi up` (the program lives until the engine has finished
    every resource, and the kernel drops the lock when it ends, Ctrl-C included). The stage runs of
    the engine's provider process share it (rackform.run.sitelock); a `rackform deploy`, `maintain`,
    `node ...` or a second `pulumi up` of the site is refused while it is held. A preview changes
    nothing and takes no lock."""
    held = contextlib.ExitStack()
    if pulumi.runtime.is_dry_run() or engine_pid() is None:  # a preview; or no engine: the program under mocks
        return held
    try:
        held.enter_context(site_lock(ROOT, name))
    except SiteLocked as locked:
        raise pulumi.RunError(str(locked)) from None
    return held


def bare_metal_nodes(config: pulumi.Config) -> bool:
    """Stack config `rackform:bareMetalNodes` (default true): one BareMetalNode per server."""
    try:
        wanted = config.get_bool("bareMetalNodes")
    except pulumi.ConfigTypeError:
        raise pulumi.RunError(f"stack config rackform:bareMetalNodes is {config.get('bareMetalNodes')!r}; "
                              f"expected true or false") from None
    return True if wanted is None else wanted


config = pulumi.Config("rackform")
secrets_set_with_secret(config)
site_name = config.get("site") or pulumi.get_stack()
one_stack_per_site(site_name, pulumi.get_stack())
site = checked_site(site_name)
bundle_ready(site)
RUN_LOCK = hold_site_lock(site.name)
cluster = SiteCluster(site.name, SiteClusterArgs(site=site, root=str(ROOT), stage_digests=stage_digests(site),
                                                 bare_metal_nodes=bare_metal_nodes(config)))

pulumi.export("site", cluster.site)
pulumi.export("hosts", cluster.hosts)
pulumi.export("power_w", cluster.power_w)
pulumi.export("stages", cluster.stages)
if cluster.kubeconfig is not None:
    # For a user's own stack of workloads (pulumi-kubernetes through a StackReference:
    # examples/workloads/); stored encrypted, shown as [secret].
    pulumi.export("kubeconfig", cluster.kubeconfig)
