"""The environment a site's stages run in: how Ansible logs in, and the BMC vault.

One place for both front doors. Nothing here is written into the rendered project:
a project carries no secrets and no machine-local paths.

- SSH key: the caller's `private_key`, else ANSIBLE_PRIVATE_KEY_FILE as already set
  (in the given environment or this process's), else the key of the site's lab when
  `rackform lab up SITE` is up on this machine, else SSH's own default.
- Site vault (only when the provision or the kubernetes stage runs: the BMC passwords,
  the API servers' encryption keys): $RACKFORM_BMC_VAULT as given, else the site's vault
  (`rackform.secrets`), made on first use outside the repo. Its password file is
  $RACKFORM_VAULT_PASSWORD_FILE where set (the Pulumi provider sets it from the stack's
  secret config), else the vault's own.

What is computed here is added to the run; of this process's own environment a run gets
only the names `rackform.run.ansible.PASSED_ENVIRONMENT` lists (ANSIBLE_PRIVATE_KEY_FILE,
RACKFORM_BMC_VAULT and ANSIBLE_VAULT_PASSWORD_FILE among them: paths, never secrets).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rackform import external_collections
from rackform.model.site import Site
from rackform.secrets import ENV_BMC_VAULT

KEY_ENV = "ANSIBLE_PRIVATE_KEY_FILE"
VAULT_STAGES = frozenset({"provision", "kubernetes"})
"""The stages whose playbooks read the site vault (vars_files): BMC passwords, encryption keys."""


class StageEnvironmentError(Exception):
    """The stages cannot be given what they need (a vault that cannot be kept safely)."""


def require_collections() -> None:
    """StageEnvironmentError unless the Ansible collections the roles call besides their own
    (ansible.posix, community.general) are installed at their pinned versions: without them every
    stage would run up to its first task of theirs and fail there, hosts half changed."""
    problems = external_collections.unfindable()
    if problems:
        raise StageEnvironmentError(
            "the Ansible collections the roles use are not installed in this environment:\n  "
            + "\n  ".join(problems)
            + "\ninstall them with `python -m rackform.external_collections --install` (`make install` does it); "
              "nothing was run")


@dataclass(slots=True)
class StageEnvironment:
    envvars: dict[str, str]
    """For ansible-runner: only what rackform adds; `rackform.run.ansible` adds the allowed part of
    this process's environment (PASSED_ENVIRONMENT), never the rest."""
    notes: list[str] = field(default_factory=list)
    """What a person should know about where credentials came from."""


def stage_environment(site: Site, stages: set[str], *, private_key: Path | None = None,
                      given: Mapping[str, str] | None = None, say: Callable[[str], None] | None = None
                      ) -> StageEnvironment:
    """What `stages` of `site` need, on top of `given` (which wins where it sets a variable)."""
    given = dict(given or {})
    environ = {**os.environ, **given}
    env = StageEnvironment(envvars=given)
    _connection(site.name, private_key, environ, env)
    if stages & VAULT_STAGES and not environ.get(ENV_BMC_VAULT):
        _vault(site, environ, env)
    for note in env.notes if say else ():
        say(note)
    return env


def _connection(site_name: str, private_key: Path | None, environ: Mapping[str, str], env: StageEnvironment) -> None:
    if private_key is not None:
        env.envvars[KEY_ENV] = str(Path(private_key).resolve())
        return
    if environ.get(KEY_ENV):
        return  # given, or this process's: the run inherits it (rackform.run.ansible.PASSED_ENVIRONMENT)
    from rackform.lab import state

    lab_state = state.load(site_name)
    if lab_state is not None and lab_state.ssh_key.exists():
        env.notes.append(f"{site_name}: the lab is up on this machine: connecting with its key {lab_state.ssh_key}")
        env.envvars[KEY_ENV] = str(lab_state.ssh_key)


def open_vault(site: Site, environ: Mapping[str, str]):
    """The site's vault (`rackform.secrets.SiteVault`), made on first use."""
    from rackform.secrets import SecretsError, ensure_site_vault  # only runs that provision or bootstrap need it

    try:
        return ensure_site_vault(site, environ=dict(environ))
    except SecretsError as error:
        raise StageEnvironmentError(str(error)) from None


def _vault(site: Site, environ: Mapping[str, str], env: StageEnvironment) -> None:
    vault = open_vault(site, environ)
    env.notes.append(f"{site.name}: BMC credentials and encryption keys from the site vault {vault.vault_file}")
    env.envvars.update(vault.runner_envvars())
