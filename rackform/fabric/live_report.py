"""The fabric checked against the live devices: `rackform fabric check` and the rollout's
`fabric-check` gate (rackform.fleet.gates) read them the same way, through `live_fabric_report`.

Live values come from the site's lab when it is up on this machine (its SSH key and
known_hosts), else, when asked, from the devices at their management addresses: SSH with the
host keys of the site's own known_hosts, Onyx over netmiko with $RACKFORM_SWITCH_PASSWORD.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from rackform.fabric.check import FabricReport, check_fabric
from rackform.fabric.live import OnyxLogin, SshTransport, Target, lab_transport, read_device, read_site
from rackform.model.site import Site


def site_known_hosts(site: Site) -> Path:
    """The site's known_hosts (rendered from the inventory's ssh_host_keys), written next to the
    rendered project so the devices' keys are checked against the design, not ~/.ssh/known_hosts."""
    from rackform.pipeline import build_dir
    from rackform.render.known_hosts import KNOWN_HOSTS_FILE, known_hosts_file

    path = build_dir(site.site_path.parent.parent.parent, site.name) / KNOWN_HOSTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = known_hosts_file(site)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def live_fabric_report(site: Site, *, user: str | None = None, private_key: Path | None = None, live: bool = True,
                       endpoints: dict[str, tuple[str, int]] | None = None) -> FabricReport:
    """The fabric checked against the live devices: the site's lab when it is up here, else
    (with `live`) the devices at their management addresses; else the design only, saying so.
    Also the rollout's `fabric-check` gate."""
    endpoints = endpoints or {}
    user = user or site.group_vars.ansible_user
    ssh = lab_transport(site.name)
    source = f"lab {site.name}"
    if ssh is None:
        if not live:
            print(f"{site.name}: no lab is up here and --live was not given: checking the design only",
                  file=sys.stderr)
            return check_fabric(site)
        key = private_key or (Path(os.environ["ANSIBLE_PRIVATE_KEY_FILE"])
                              if os.environ.get("ANSIBLE_PRIVATE_KEY_FILE") else None)
        ssh, source = SshTransport(user=user, key_file=key, known_hosts=site_known_hosts(site)), "devices"
    onyx = OnyxLogin.from_environment(user, private_key or ssh.key_file, ssh.known_hosts)

    def reader(target: Target):
        if target.name in endpoints:
            host, port = endpoints[target.name]
            target = dataclasses.replace(target, address=host, port=port)
        return read_device(target, ssh, onyx)

    live_devices = read_site(site, reader)
    return check_fabric(site, live_devices, source)
