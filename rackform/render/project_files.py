"""The project's own files: playbooks, ansible.cfg, README and lint settings.

Playbooks come from `templates/playbooks/`: one template per Ansible stage of
`rackform.stages.STAGES` (named after its playbook), `validate.yml` and
`site.yml`, which imports them all in stage order, and the maintenance playbooks
(`upgrade-cluster.yml`, `scale.yml`, `etcd-backup.yml`, `etcd-restore.yml`,
`certs-renew.yml`), run by hand.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from rackform.model.loader import site_paths
from rackform.model.site import Site
from rackform.stages import STAGES, stage_not_applicable
from rackform.render.assets import project_templates
from rackform.render.groups import SERVER_GROUPS
from rackform.render.known_hosts import KNOWN_HOSTS_FILE, host_key_checking

VALIDATE_PLAYBOOK = "validate.yml"
SITE_PLAYBOOK = "site.yml"
# Day-2 playbooks outside the stage order, run by hand: a Kubernetes upgrade, new nodes, an etcd
# snapshot and its restore (rackform backup, rackform restore), the control plane's certificates
# renewed (rackform certs renew).
MAINTENANCE_PLAYBOOKS = ("upgrade-cluster.yml", "scale.yml", "etcd-backup.yml", "etcd-restore.yml",
                         "certs-renew.yml")
# Project files rendered from templates/project/<template>.
_PROJECT_FILES = {
    "ansible.cfg": "ansible.cfg.j2",
    "README.md": "README.md.j2",
    "requirements.yml": "requirements.yml.j2",
    ".ansible-lint": "ansible-lint.j2",
    ".gitignore": "gitignore.j2",
}
FORKS_MIN, FORKS_MAX = 5, 50


def forks_for(machine_count: int) -> int:
    """Enough forks to reach every machine at once on small sites, capped for the controller."""
    return min(max(machine_count, FORKS_MIN), FORKS_MAX)


def _template(name: str) -> jinja2.Template:
    try:
        return project_templates().get_template(name)
    except jinja2.TemplateNotFound:
        raise RuntimeError(f"missing template templates/{name} (every Ansible stage in STAGES needs one)") from None


def playbook_files(site: Site) -> dict[str, str]:
    files = {VALIDATE_PLAYBOOK: _template(f"playbooks/{VALIDATE_PLAYBOOK}.j2").render(site_name=site.name)}
    for stage in STAGES:
        if stage.playbook is not None and stage_not_applicable(site, stage.name) is None:
            files[stage.playbook] = _template(f"playbooks/{stage.playbook}.j2").render(
                site_name=site.name, stage=stage, provisioning=site.provisioning)
    left_out = {stage.name: stage_not_applicable(site, stage.name) for stage in STAGES}
    files[SITE_PLAYBOOK] = _template(f"playbooks/{SITE_PLAYBOOK}.j2").render(site_name=site.name, stages=STAGES,
                                                                            left_out=left_out)
    for playbook in MAINTENANCE_PLAYBOOKS:
        files[playbook] = _template(f"playbooks/{playbook}.j2").render(site_name=site.name)
    return files


def project_files(site: Site, managed_switch_count: int) -> dict[str, str]:
    # Paths relative to the repo root: the same on every machine.
    _, design_path, inventory_path = site_paths(Path(), site.name)
    context = {
        "site_name": site.name,
        "site_description": site.description,
        "design_path": design_path.as_posix(),
        "inventory_path": inventory_path.as_posix() + "/",
        "stages": STAGES,
        "server_count": len(site.hosts),
        "switch_count": managed_switch_count,
        "server_groups": SERVER_GROUPS,
        "machine_count": len(site.hosts) + managed_switch_count,
        "forks": forks_for(len(site.hosts) + managed_switch_count),
        "host_key_checking": host_key_checking(site),
        "known_hosts_file": KNOWN_HOSTS_FILE,
    }
    return {path: _template(f"project/{template}").render(context) for path, template in _PROJECT_FILES.items()}
