#!/usr/bin/python
# -*- coding: utf-8 -*-
"""rackform's read-only Onyx module: run show commands on a switch (see DOCUMENTATION)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: onyx_command
short_description: Run read-only commands on an Onyx switch and return what it prints
description:
  - Runs on the controller (the inventory's Onyx connection is local) and logs in to the switch over SSH
    with netmiko (C(mellanox_mlnxos)), as C(rackform.site.onyx_config) does. This is the way to run an
    ad-hoc command against an Onyx switch; no Ansible connection plugin talks to one.
  - "Only C(show ...) commands: configuration goes through the fabric stage (onyx_config), which
    diffs, rolls back and saves."
  - Never changes anything (changed=false), so it runs in check mode too.
version_added: "0.2.0"
author: rackform
requirements: [netmiko >= 4]
options:
  host: {description: The switch's management address., type: str, required: true}
  port: {description: SSH port., type: int, default: 22}
  username: {description: Login name (default $RACKFORM_SWITCH_USER)., type: str, required: true}
  password: {description: Login password (default $RACKFORM_SWITCH_PASSWORD)., type: str}
  key_file: {description: SSH private key, offered only when there is no password., type: path}
  known_hosts:
    description: OpenSSH known_hosts to check the switch's host key against (by default the user's ~/.ssh/known_hosts).
    type: path
  timeout_s: {description: Seconds to wait for the login., type: float, default: 30}
  commands: {description: The show commands to run, in order., type: list, elements: str, required: true}
"""

EXAMPLES = r"""
# ansible leaf-1 -m rackform.site.onyx_command -a 'host={{ ansible_host }} commands="show version"'
- name: Read the running config
  rackform.site.onyx_command:
    host: "{{ ansible_host }}"
    username: admin
    commands: [show running-config]
"""

RETURN = r"""
stdout: {description: What the switch printed, one entry per command., type: list, returned: success}
stdout_lines: {description: The same, split into lines., type: list, returned: success}
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib
from ansible_collections.rackform.site.plugins.module_utils.rackform_onyx_session import (
    HAS_NETMIKO,
    Login,
    OnyxError,
    OnyxSession,
)

ARGUMENT_SPEC = dict(
    host=dict(type="str", required=True),
    port=dict(type="int", default=22),
    username=dict(type="str", required=True, fallback=(env_fallback, ["RACKFORM_SWITCH_USER"])),
    password=dict(type="str", no_log=True, fallback=(env_fallback, ["RACKFORM_SWITCH_PASSWORD"])),
    key_file=dict(type="path", no_log=False),
    known_hosts=dict(type="path"),
    timeout_s=dict(type="float", default=30.0),
    commands=dict(type="list", elements="str", required=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_NETMIKO:
        module.fail_json(msg=missing_required_lib("netmiko"))
    params = module.params
    refused = [command for command in params["commands"] if command.split()[:1] != ["show"]]
    if refused:
        module.fail_json(msg="only show commands run here (configuration goes through the fabric stage): %s"
                         % ", ".join(refused))
    login = Login(host=params["host"], port=params["port"], username=params["username"],
                  password=params["password"] or None, key_file=params["key_file"] or None,
                  known_hosts=params["known_hosts"] or None, timeout_s=params["timeout_s"])
    session = OnyxSession(login, params["host"])
    try:
        outputs = [session.show(command) for command in params["commands"]]
    except OnyxError as error:
        module.fail_json(msg=str(error))
    finally:
        session.close()
    module.exit_json(changed=False, stdout=outputs, stdout_lines=[output.splitlines() for output in outputs])


if __name__ == "__main__":
    main()
