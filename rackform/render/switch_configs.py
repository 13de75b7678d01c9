"""`switch_configs/<switch>.<os>.conf`: the configuration of every managed switch.

Rendered from each switch's merged inventory variables (group_vars by group
depth, then host_vars, as Ansible merges them), so the file shows exactly the
values the stages use. Cumulus files are the switch_baseline role's own
templates, rendered here for review; Onyx files are the CLI lines rackform
pushes with netmiko.
"""

from __future__ import annotations

from rackform.render.assets import project_templates, role_templates
from rackform.render.group_vars import ConcernFiles

# (title, template under roles/) of each part of a Cumulus switch's configuration.
_CUMULUS_PARTS = (
    ("/etc/network/interfaces fragment", "switch_baseline/templates/interfaces.j2"),
    ("/etc/frr/frr.conf", "switch_baseline/templates/frr.conf.j2"),
)


def merged_vars(name: str, groups: dict[str, int], group_vars: ConcernFiles, own: dict) -> dict:
    """A machine's variables as Ansible sees them: shallow groups first, then its host_vars."""
    merged: dict = {}
    for group in sorted(groups, key=lambda group: (groups[group], group)):
        for values in group_vars.get(group, {}).values():
            merged.update(values)
    merged.update(own)
    merged["inventory_hostname"] = name
    return merged


def _cumulus(name: str, context: dict) -> str:
    templates = role_templates()
    parts = [
        {"title": title, "template": path.rsplit("/", 1)[1], "text": templates.get_template(path).render(context)}
        for title, path in _CUMULUS_PARTS
    ]
    return (
        project_templates()
        .get_template("switch_configs/cumulus.conf.j2")
        .render(switch=name, site_name=context["site_name"], parts=parts)
    )


def _onyx(name: str, context: dict) -> str:
    return project_templates().get_template("switch_configs/onyx.conf.j2").render(context)


RENDERERS = {"cumulus": _cumulus, "onyx": _onyx}


def switch_config_files(
    switch_vars: dict[str, dict], host_groups: dict[str, dict[str, int]], group_vars: ConcernFiles
) -> dict[str, str]:
    """switch_configs/<name>.<os>.conf for every managed switch."""
    files = {}
    for name, own in switch_vars.items():
        os_name = own["switch_os"]
        context = merged_vars(name, host_groups.get(name, {"all": 0}), group_vars, own)
        files[f"switch_configs/{name}.{os_name}.conf"] = RENDERERS[os_name](name, context)
    return files
