#!/usr/bin/python
"""Ansible module: one iPXE script per machine, named after its MAC address, in one task.

A template task per machine costs a round trip each (minutes at 10,000 machines);
this module writes them all in one call, touches only the files whose content
differs and removes the scripts of machines that left the inventory.
"""

from __future__ import annotations

import os
import re
import tempfile

DOCUMENTATION = r"""
module: ipxe_scripts
short_description: Write one iPXE script per machine, named after its MAC address
description:
  - Writes C(<dest>/<mac with hyphens>.ipxe) for every host, as iPXE's C(${mac:hexhyp}) names it.
  - Each script sets the machine's name, address and role, then chains the site-wide script.
  - Scripts in C(dest) of machines no longer listed are removed.
options:
  dest:
    description: Folder of the scripts (created if missing).
    type: path
    required: true
  hosts:
    description: Machines, each with C(name), C(mac), C(address) and an optional C(role).
    type: list
    elements: dict
    required: true
  chain:
    description: Script each machine's script chains to, relative to its own (a TFTP path).
    type: str
    required: true
  site:
    description: Site name, written into each script's header.
    type: str
    required: true
  mode:
    description: Permissions of the scripts (the TFTP server reads them as another user).
    type: str
    default: "0644"
"""

RETURN = r"""
written:
  description: Names of the machines whose script was created or rewritten (the first 20).
  type: list
  returned: always
written_count:
  description: How many scripts were created or rewritten.
  type: int
  returned: always
removed:
  description: Script files removed because their machine left the inventory (the first 20).
  type: list
  returned: always
removed_count:
  description: How many script files were removed.
  type: int
  returned: always
"""

SUFFIX = ".ipxe"
MAC_PATTERN = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
# Names and addresses go into `set` lines unquoted: allow nothing iPXE would split or expand.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9._-]*$")


def script_name(mac: str) -> str:
    """`02:64:00:00:00:0C` -> `02-64-00-00-00-0c.ipxe` (iPXE's ${mac:hexhyp})."""
    return mac.lower().replace(":", "-") + SUFFIX


def script_text(host: dict, chain: str, site: str) -> str:
    return (
        "#!ipxe\n"
        f"# {host['name']} of site {site}: written by rackform (role pxe_server); local edits are overwritten.\n"
        f"set rackform_host {host['name']}\n"
        f"set rackform_address {host['address']}\n"
        f"set rackform_role {host.get('role') or 'none'}\n"
        f"chain --autofree {chain}\n"
    )


def host_problem(host: dict) -> str | None:
    """Why a host entry cannot become a script, or None."""
    missing = [key for key in ("name", "mac", "address") if not host.get(key)]
    if missing:
        return f"host entry {host!r} lacks {', '.join(missing)}"
    if not MAC_PATTERN.match(str(host["mac"]).lower()):
        return f"{host['name']}: MAC {host['mac']!r} is not six colon-separated hex bytes"
    unsafe = [key for key in ("name", "address", "role") if not SAFE_VALUE.match(str(host.get(key) or ""))]
    if unsafe:
        return f"{host['name']}: {', '.join(unsafe)} may hold only letters, digits, '.', '_' and '-'"
    return None


def wanted_scripts(hosts: list[dict], chain: str, site: str) -> dict[str, tuple[str, str]]:
    """File name -> (host name, content); raises ValueError on a bad or duplicate entry."""
    scripts: dict[str, tuple[str, str]] = {}
    for host in hosts:
        problem = host_problem(host)
        if problem:
            raise ValueError(problem)
        name = script_name(str(host["mac"]))
        if name in scripts:
            raise ValueError(f"{host['name']} and {scripts[name][0]} share MAC {host['mac']}")
        scripts[name] = (str(host["name"]), script_text(host, chain, site))
    return scripts


def _current(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def _write_atomically(path: str, text: str, mode: int) -> None:
    """Write to a temporary file beside the target and rename: a TFTP client never reads half a file."""
    folder = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".rackform-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def sync_scripts(dest: str, hosts: list[dict], chain: str, site: str, mode: int = 0o644,
                 check: bool = False) -> tuple[list[str], list[str]]:
    """Make `dest` hold exactly the wanted scripts; returns (hosts written, files removed)."""
    scripts = wanted_scripts(hosts, chain, site)
    existing = set(os.listdir(dest)) if os.path.isdir(dest) else set()
    if not check:
        os.makedirs(dest, mode=0o755, exist_ok=True)
    written = []
    for file_name, (host_name, text) in scripts.items():
        path = os.path.join(dest, file_name)
        stale_mode = file_name in existing and (os.stat(path).st_mode & 0o7777) != mode
        if file_name not in existing or stale_mode or _current(path) != text:
            written.append(host_name)
            if not check:
                _write_atomically(path, text, mode)
    removed = sorted(name for name in existing if name.endswith(SUFFIX) and name not in scripts)
    if not check:
        for name in removed:
            os.unlink(os.path.join(dest, name))
    return written, removed


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "hosts": {"type": "list", "elements": "dict", "required": True},
            "chain": {"type": "str", "required": True},
            "site": {"type": "str", "required": True},
            "mode": {"type": "str", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        mode = int(params["mode"], 8)
        written, removed = sync_scripts(params["dest"], params["hosts"], params["chain"], params["site"],
                                        mode, module.check_mode)
    except ValueError as error:
        module.fail_json(msg=str(error))
    except OSError as error:
        module.fail_json(msg=f"{params['dest']}: {error}")
    # Thousands of names would flood the output: report counts, and names up to a few.
    module.exit_json(changed=bool(written or removed), written=written[:20], removed=removed[:20],
                     written_count=len(written), removed_count=len(removed))


if __name__ == "__main__":
    main()
