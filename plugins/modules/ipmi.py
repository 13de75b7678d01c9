#!/usr/bin/python
# -*- coding: utf-8 -*-
"""rackform's IPMI module: BMC hardening, power and boot device, safely (see DOCUMENTATION)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: ipmi
short_description: Harden a BMC, set its power state and boot device over IPMI 2.0 (RMCP+)
description:
  - Before any login, asks the BMC (without credentials) which IPMI versions and cipher suites
    it offers, and refuses a BMC that speaks only IPMI 1.5 or offers neither cipher suite 17 nor 3.
  - Logs in over RMCP+ (lanplus) with suite 17 or 3 only, with the site admin's password, else the
    previous site passwords, else (action harden only) the factory credentials.
  - C(harden) creates the site admin account with the site's password and administrator access,
    proves it with a fresh login, then disables the null user (id 1) and every factory account, sets
    the LAN channel's cipher suite privilege levels (LAN configuration parameter 24) so that only
    suites 17 and 3 are allowed, reads them back, and proves it with a cipher suite 0 login (a BMC
    that still lets it in fails, unless I(exceptions) accepts that for its model).
  - C(power) brings the chassis to on, off, soft (ACPI shutdown), cycle or reset and confirms it
    by reading the power state back, with a timeout. C(boot) sets the next boot device (one-time PXE
    or disk). C(probe) only reports what the BMC offers.
  - A BMC that does not answer is retried with exponential backoff a bounded number of times; a
    rejected login is retried fewer times (lockouts). One rackform process at a time talks to a BMC
    (a lock file per BMC on the controller).
  - Passwords travel only in module arguments (declared no_log) and never appear in results.
  - In check mode the BMC is probed and logged in to (read-only) and the result lists what would change.
version_added: "0.1.0"
author: rackform
requirements: []
notes:
  - Runs on rackform's own RMCP+ session and commands, shipped in the collection's module_utils (standard
    library only; AES from the cryptography package where installed, else pure Python), so neither
    rackform nor pyghmi needs to be installed where it runs.
options:
  action: {description: What to do., type: str, required: true, choices: [probe, harden, power, boot]}
  address: {description: The BMC's address., type: str, required: true}
  port: {description: UDP port of RMCP., type: int, default: 623}
  user: {description: The site admin's user name (at most 16 bytes)., type: str}
  password: {description: The site admin's password from the site vault., type: str}
  previous_passwords:
    description: Earlier site admin passwords, tried after I(password) (rotation).
    type: list
    elements: str
    default: []
  factory_credentials:
    description: Factory accounts to log in with on first contact (harden only), and to disable.
    type: list
    elements: dict
    default: []
    suboptions:
      user: {description: User name., type: str, required: true}
      password: {description: Password., type: str, required: true}
  admin_user_id: {description: User id the site admin gets when it is free., type: int, default: 3}
  min_password_bytes:
    description: Fail when the BMC keeps fewer bytes of the password (some keep 16 of 20).
    type: int
    default: 16
  cipher_suites:
    description: Cipher suites to accept; only 17 and 3 are allowed.
    type: list
    elements: int
    default: [17, 3]
  power: {description: Wanted power state (action power)., type: str, choices: [on, off, soft, cycle, reset]}
  power_timeout_s: {description: Seconds to wait until the power state reads back., type: float, default: 120}
  boot_device:
    description: Next boot device (action boot; with action power it is set before the power state).
    type: str
    choices: [pxe, disk]
  boot_persistent: {description: Keep the boot device beyond the next boot., type: bool, default: false}
  boot_uefi: {description: Ask for a UEFI boot., type: bool, default: false}
  answer_timeout_s: {description: Seconds to wait for each pre-login answer., type: float, default: 1.0}
  answer_attempts: {description: Pre-login requests sent before the BMC counts as silent., type: int, default: 3}
  retries: {description: Retries of a BMC that does not answer., type: int, default: 3}
  auth_retries: {description: Retries of a BMC that rejects every credential., type: int, default: 1}
  backoff_s: {description: First wait between tries; doubled each time., type: float, default: 1.0}
  max_backoff_s: {description: Longest wait between tries., type: float, default: 8.0}
  kg:
    description: The BMC key (K_g) for BMCs that have one set; it keys the session instead of the password.
    type: str
  exceptions:
    description:
      - BMC models (Get Device ID manufacturer id, optional product id) whose firmware is known to keep
        an opening (C(cipher_suite_0), C(ipmi_1.5)) whatever is set, with the site's reason
        (the site file's C(provisioning.bmc_exceptions)). Such a BMC is reported, not failed.
    type: list
    elements: dict
    default: []
  lock_dir: {description: Where the per-BMC lock files live (default under the temp dir)., type: path}
  lock_timeout_s: {description: Seconds to wait for another process to let go of the BMC., type: float, default: 600}
"""

EXAMPLES = r"""
- name: Harden the BMC
  rackform.site.ipmi:
    action: harden
    address: "{{ bmc_address }}"
    user: rackform
    password: "{{ rackform_bmc_credentials[inventory_hostname].password }}"
    factory_credentials: "{{ rackform_bmc_credentials[inventory_hostname].factory }}"
  delegate_to: localhost
  no_log: true
"""

RETURN = r"""
msg: {description: What happened, or why it failed., returned: always, type: str}
changes: {description: What was changed on the BMC., returned: harden, type: list, elements: str}
cipher_suite: {description: Cipher suite the session used (17 or 3)., returned: after a login, type: int}
offered_cipher_suites: {description: Suites the BMC lists (null if it does not)., returned: always, type: list}
admin_user_id: {description: User id of the site admin., returned: harden, type: int}
password_bytes: {description: Bytes of the password the BMC uses (20, or 16 on BMCs that truncate)., returned: after a login, type: int}
power: {description: Power state read back., returned: power, type: str}
suite0_open: {description: A cipher suite 0 login with a password nobody holds still got in after hardening., returned: harden, type: bool}
rackform_ok: {description: True when the action succeeded (a registered result of a no_log task keeps it)., returned: success, type: bool}
rackform_error: {description: The failure message again (a registered result of a no_log task keeps it)., returned: failure, type: str}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_ciphers import CipherSettingError, allow_only, device_model, exception_for
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_commands import CommandError
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_chassis import POWER_STATES, ChassisError, set_boot_device, set_power
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_lan import Timeouts
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_policy import default_lock_dir
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_session import (
    BmcAuthRejected, Credential, bmc_lock, first_login, login, logout, with_retries)
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_users import HardenError, harden
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_wire import (
    ACCEPTED_CIPHER_SUITES, BmcInsecure, BmcSilent, probe, refusal, suite0_gets_in)

MAX_USER_NAME_BYTES = 16
ACTIONS_NEEDING_LOGIN = ("harden", "power", "boot")

ARGUMENT_SPEC = dict(
    action=dict(type="str", required=True, choices=["probe", "harden", "power", "boot"]),
    address=dict(type="str", required=True),
    port=dict(type="int", default=623),
    user=dict(type="str"),
    password=dict(type="str", no_log=True),
    previous_passwords=dict(type="list", elements="str", default=[], no_log=True),
    factory_credentials=dict(type="list", elements="dict", default=[], no_log=False, options=dict(
        user=dict(type="str", required=True),
        password=dict(type="str", required=True, no_log=True),
    )),
    admin_user_id=dict(type="int", default=3),
    min_password_bytes=dict(type="int", default=16),
    cipher_suites=dict(type="list", elements="int", default=list(ACCEPTED_CIPHER_SUITES)),
    power=dict(type="str", choices=list(POWER_STATES)),
    power_timeout_s=dict(type="float", default=120.0),
    boot_device=dict(type="str", choices=["pxe", "disk"]),
    boot_persistent=dict(type="bool", default=False),
    boot_uefi=dict(type="bool", default=False),
    answer_timeout_s=dict(type="float", default=1.0),
    answer_attempts=dict(type="int", default=3),
    retries=dict(type="int", default=3),
    auth_retries=dict(type="int", default=1),
    backoff_s=dict(type="float", default=1.0),
    max_backoff_s=dict(type="float", default=8.0),
    kg=dict(type="str", no_log=True),
    exceptions=dict(type="list", elements="dict", default=[]),
    lock_dir=dict(type="path"),
    lock_timeout_s=dict(type="float", default=600.0),
)


def parameter_problem(params):
    """Why these arguments cannot be used, or None."""
    refused = [suite for suite in params["cipher_suites"] if suite not in ACCEPTED_CIPHER_SUITES]
    if refused:
        return ("cipher suite %s refused: rackform uses only suites 17 and 3 (suite 0 has no authentication, "
                "so any password logs in; suites 1 and 2 do not encrypt)" % ", ".join(str(s) for s in refused))
    if not params["cipher_suites"]:
        return "cipher_suites is empty: give 17, 3 or both"
    action = params["action"]
    if action in ACTIONS_NEEDING_LOGIN and not (params["user"] and params["password"]):
        return "action %s needs user and password (the site admin's, from the site vault)" % action
    if params["user"] and len(params["user"].encode("utf-8")) > MAX_USER_NAME_BYTES:
        return "user %r is longer than IPMI's 16 bytes" % params["user"]
    if params["user"] in [entry["user"] for entry in params["factory_credentials"]]:
        return "the site admin %r must not be a factory account: those get disabled" % params["user"]
    if action == "power" and not params["power"]:
        return "action power needs power (one of %s)" % ", ".join(POWER_STATES)
    if action == "boot" and not params["boot_device"]:
        return "action boot needs boot_device (pxe or disk)"
    if not 16 <= params["min_password_bytes"] <= 20:
        return "min_password_bytes must be between 16 and 20 (IPMI passwords have 16 or 20 bytes)"
    return None


def credentials(params, action):
    """Who to log in as, in order: the site admin now, then earlier, then (harden only) factory."""
    found = [Credential(params["user"], params["password"], "site")]
    found += [Credential(params["user"], password, "previous site password %d" % number)
              for number, password in enumerate(params["previous_passwords"], 1)]
    if action == "harden":
        found += [Credential(entry["user"], entry["password"], "factory account %r" % entry["user"])
                  for entry in params["factory_credentials"]]
    return found


class Run:
    """One action against one BMC: probe, log in, act; sessions are logged out at the end."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.address = self.params["address"]
        self.sessions = []
        self.changed = False  # sticky over retries: a command sent before a lost answer still counts
        self.facts = {"address": self.address}
        self.result = {}
        self.check_mode = bool(getattr(module, "check_mode", False))
        """Ansible's check mode: probe and log in (read-only), then report what would change."""

    def attempt(self):
        params = self.params
        capabilities = probe(self.address, params["port"], params["answer_timeout_s"], params["answer_attempts"])
        self.facts.update(capabilities.as_dict())
        reason = refusal(capabilities, params["cipher_suites"])
        if reason:
            raise BmcInsecure("%s: %s" % (self.address, reason))
        if params["action"] == "probe":
            return
        ipmi, suite, credential, password_bytes = first_login(
            self.address, params["port"], credentials(params, params["action"]), self._login)
        if suite not in params["cipher_suites"]:
            raise BmcInsecure("%s: the session came up with cipher suite %d, not one of %s"
                              % (self.address, suite, params["cipher_suites"]))
        self.facts.update(cipher_suite=suite, password_bytes=password_bytes)
        if params["action"] == "harden":
            self._harden(ipmi, credential, password_bytes)
        elif credential.label != "site":
            raise BmcAuthRejected("%s: the site admin's current password is not set on this BMC yet (it logged "
                                  "in with the %s): run the harden step first" % (self.address, credential.label))
        elif params["action"] == "power":
            if params["boot_device"]:  # first, so that a power on or reset boots from it
                self._record(set_boot_device(ipmi, params["boot_device"], params["boot_persistent"],
                                             params["boot_uefi"], dry_run=self.check_mode))
            self._record(set_power(ipmi, params["power"], params["power_timeout_s"], dry_run=self.check_mode))
        else:
            self._record(set_boot_device(ipmi, params["boot_device"], params["boot_persistent"],
                                         params["boot_uefi"], dry_run=self.check_mode))

    def _login(self, address, port, credential):
        params = self.params
        timeouts = Timeouts(reply_s=params["answer_timeout_s"], resends=max(params["answer_attempts"] - 1, 0))
        ipmi, suite = login(address, port, credential, timeouts, (params.get("kg") or "").encode("utf-8") or None)
        self.sessions.append(ipmi)
        return ipmi, suite

    def _relogin(self, site):
        ipmi, suite, _, password_bytes = first_login(self.address, self.params["port"], [
            Credential(site.user, site.password, "site")], self._login)
        return ipmi, password_bytes

    def _harden(self, ipmi, credential, password_bytes):
        factory_names = set(entry["user"] for entry in self.params["factory_credentials"])
        site = Credential(self.params["user"], self.params["password"], "site")
        ipmi, outcome = harden(ipmi, credential.label, site, factory_names, self.params["admin_user_id"],
                               self._relogin, self.params["min_password_bytes"], password_bytes,
                               dry_run=self.check_mode)
        self.facts.update(admin_user=outcome["admin_user"], admin_user_id=outcome["admin_user_id"],
                          password_bytes=outcome["password_bytes"])
        self._record(outcome)
        ciphers = allow_only(ipmi, ipmi.get_network_channel(), self.params["cipher_suites"], dry_run=self.check_mode)
        self.result["changes"] = self.result.get("changes", []) + ciphers.pop("changes")
        self.facts["cipher_suite_privileges"] = ciphers["cipher_suite_privileges"]
        would_change = ciphers["changed"]
        self._record(ciphers)
        if not (self.check_mode and would_change):  # in check mode an unset BMC is open as expected
            self._prove_suite0_closed(ipmi, site)

    def _prove_suite0_closed(self, ipmi, site):
        """Log in with cipher suite 0 as the site admin with a password nobody holds: it must fail."""
        params = self.params
        is_open = suite0_gets_in(self.address, site.user, params["port"], params["answer_timeout_s"],
                                 params["answer_attempts"])
        self.facts["suite0_open"] = self.result["suite0_open"] = is_open
        if not is_open:
            return
        manufacturer_id, product_id = device_model(ipmi)
        reason = exception_for(params["exceptions"], manufacturer_id, product_id, "cipher_suite_0")
        if reason is None:
            raise HardenError("cipher suite 0 still lets anyone in (any password) after its privilege levels were "
                              "set to allow only suites %s and read back: this firmware (manufacturer id %d, product "
                              "id %d) stores the setting without honouring it; update the firmware, or record an "
                              "exception for this model with a reason in the site file (provisioning.bmc_exceptions)"
                              % (" and ".join(str(s) for s in params["cipher_suites"]), manufacturer_id, product_id))
        self.facts["suite0_exception"] = self.result["suite0_exception"] = reason

    def _record(self, outcome):
        changed = outcome.pop("changed")
        self.changed = self.changed or changed
        self.result.update(outcome)

    def close(self):
        for ipmi in reversed(self.sessions):
            logout(ipmi)
        self.sessions = []


def _summary(action, run):
    if action == "probe":
        return "%s offers IPMI %s, cipher suites %s" % (
            run.address, "/".join(run.facts.get("ipmi_versions", [])), run.facts.get("offered_cipher_suites"))
    if action == "harden":
        done = "; ".join(run.result.get("changes", [])) or "already hardened"
        return "%s: %s (cipher suite %s, site admin user id %s)" % (
            run.address, done, run.facts.get("cipher_suite"), run.facts.get("admin_user_id"))
    if action == "power":
        boot = "next boot from %s, " % run.result["boot_device"] if "boot_device" in run.result else ""
        return "%s: %spower %s (was %s)" % (run.address, boot, run.result.get("power"),
                                           run.result.get("power_before"))
    return "%s: next boot from %s" % (run.address, run.result.get("boot_device"))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    problem = parameter_problem(params)
    if problem:
        module.fail_json(msg=problem, rackform_error=problem)

    run = Run(module)
    started = time.monotonic()

    def note_retry(tries, delay_s, error):
        run.result.setdefault("retried", []).append("try %d: %s; waited %.1f s" % (tries, error, delay_s))
        run.close()

    try:
        with bmc_lock(params["lock_dir"] or default_lock_dir(), run.address, params["lock_timeout_s"], params["port"]):
            with_retries(run.attempt, params["retries"], params["backoff_s"], params["max_backoff_s"],
                         params["auth_retries"], on_retry=note_retry)
    except (BmcSilent, BmcAuthRejected, BmcInsecure, HardenError, ChassisError, CipherSettingError,
            CommandError) as error:
        message = str(error) if str(error).startswith(run.address) else "%s: %s" % (run.address, error)
        run.close()
        module.fail_json(msg=message, rackform_error=message, changed=run.changed, **run.result)
    except Exception as error:  # a bug or a BMC answer nobody expected: still say what, on which BMC
        message = "%s: %s: %s (unexpected; please report it)" % (run.address, type(error).__name__, error)
        run.close()
        module.fail_json(msg=message, rackform_error=message, changed=run.changed)
    finally:
        run.close()
    if run.facts.get("suite0_open"):
        module.warn("%s still lets cipher suite 0 in (no authentication: any password logs in) although its "
                    "cipher suite privilege levels allow only 17 and 3; accepted by the site for this BMC model: %s. "
                    "Keep the out-of-band network isolated" % (run.address, run.facts.get("suite0_exception")))
    # Facts (cached by Ansible) only from the actions that learn about the BMC's security; no secrets.
    facts = {"rackform_bmc": run.facts} if params["action"] in ("probe", "harden") else {}
    module.exit_json(changed=run.changed, rackform_ok=True, msg=_summary(params["action"], run),
                     duration_s=round(time.monotonic() - started, 3), ansible_facts=facts, **run.result)


if __name__ == "__main__":
    main()
