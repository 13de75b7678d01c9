#!/usr/bin/python
# -*- coding: utf-8 -*-
"""rackform's Onyx module: bring a switch to its rendered configuration (see DOCUMENTATION)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: onyx_config
short_description: Push the difference between an Onyx switch's running config and its rendered config
description:
  - Runs on the controller and logs in to the switch over SSH with netmiko (C(mellanox_mlnxos)).
  - Reads C(show running-config), keeps the lines rackform manages (hostname, lldp, PFC, and for
    each cabled port its description, MTU, PFC mode, trust, ECN, PFC watchdog), and computes the commands
    that make it hold I(config). Lines rackform does not manage, and ports the config does not
    name, are never touched.
  - Pushes only those commands, then C(configuration write). A push that fails part-way (a refused
    line, a dropped session) is undone from a fresh session and nothing is saved.
  - In check mode it only reads; with C(--diff) the difference is shown as C(-)/C(+) lines.
  - A switch that already runs its configuration gets nothing: no command, no save (changed=false).
  - The password is declared no_log and never appears in results.
version_added: "0.1.0"
author: rackform
requirements: [netmiko >= 4]
options:
  name: {description: The switch's name, for messages., type: str, required: true}
  host: {description: The switch's management address., type: str, required: true}
  port: {description: SSH port., type: int, default: 22}
  username: {description: Login name., type: str, required: true}
  password: {description: Login password (Onyx logins are password logins)., type: str}
  key_file: {description: SSH private key, offered only when there is no password., type: path}
  known_hosts:
    description: OpenSSH known_hosts to check the switch's host key against (by default the user's ~/.ssh/known_hosts); an unknown or changed key refuses the login.
    type: path
  timeout_s: {description: Seconds to wait for the login., type: float, default: 30}
  config: {description: The rendered configuration (Onyx CLI lines; C(#) comments are ignored)., type: str, required: true}
  dscp_to_priority:
    description: The design's DSCP -> switch priority map; refused unless it is Onyx's default (DSCP / 8).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Configure the switch
  rackform.site.onyx_config:
    name: "{{ inventory_hostname }}"
    host: "{{ ansible_host }}"
    username: admin
    password: "{{ onyx_switch_password }}"
    config: "{{ lookup('ansible.builtin.template', 'onyx.conf.j2') }}"
"""

RETURN = r"""
commands: {description: The commands sent (or that would be sent, in check mode)., type: list, returned: always}
saved: {description: Whether C(configuration write) ran., type: bool, returned: always}
rolled_back: {description: After a failed push, whether the previous configuration is back., type: bool, returned: failure}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.rackform.site.plugins.module_utils.rackform_onyx_lines import dscp_map_refusal
from ansible_collections.rackform.site.plugins.module_utils.rackform_onyx_session import (
    HAS_NETMIKO,
    Login,
    OnyxError,
    OnyxSession,
    apply,
    plan,
)

ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    host=dict(type="str", required=True),
    port=dict(type="int", default=22),
    username=dict(type="str", required=True),
    password=dict(type="str", no_log=True),
    key_file=dict(type="path", no_log=False),
    known_hosts=dict(type="path"),
    timeout_s=dict(type="float", default=30.0),
    config=dict(type="str", required=True),
    dscp_to_priority=dict(type="dict", default={}),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_NETMIKO:
        module.fail_json(msg=missing_required_lib("netmiko"))
    params = module.params
    refusal = dscp_map_refusal(params["name"], params["dscp_to_priority"])
    if refusal:
        module.fail_json(msg=refusal)
    login = Login(host=params["host"], port=params["port"], username=params["username"],
                  password=params["password"] or None, key_file=params["key_file"] or None,
                  known_hosts=params["known_hosts"] or None, timeout_s=params["timeout_s"])
    session = OnyxSession(login, params["name"])
    try:
        change = plan(params["config"], session.running())
        result = dict(changed=bool(change.commands), commands=change.commands, saved=False)
        if change.commands and module._diff:
            result["diff"] = dict(prepared=change.diff + "\n")
        if not module.check_mode:
            apply(session, change)
            result["saved"] = bool(change.commands)
    except OnyxError as error:
        failure = dict(msg=str(error))
        if error.rolled_back is not None:
            failure["rolled_back"] = error.rolled_back
        module.fail_json(**failure)
    finally:
        session.close()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
