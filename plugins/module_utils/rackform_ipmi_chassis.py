# -*- coding: utf-8 -*-
"""Power and boot device through a logged-in session, every change read back.

Power states (IPMI Chassis Control, App netfn 0x00 cmd 0x02):
  on, off      - idempotent: nothing is sent when the chassis already reads so
  soft         - ask the OS to shut down (ACPI); done when the chassis reads off
  cycle, reset - always act: off-then-on, or a hard reset; a host that is off is
                 simply powered on (IPMI leaves an off chassis off for both)
Each change is confirmed by reading Get Chassis Status until it shows the
expected state, or fails after `timeout_s`.

Boot device (Set System Boot Options, parameter 5): `pxe` (one-time by default:
the next boot uses it up) is sent unless the BMC already reports it pending;
`disk` is sent only when the BMC reports an override to something else, since
"no override" (pyghmi reads it as `default`) boots the installed disk.
"""

from __future__ import absolute_import, division, print_function

import time

from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_policy import CHASSIS_CONTROL_CODES as CHASSIS_CONTROL
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_policy import POWER_ACTIONS as POWER_STATES
from ansible_collections.rackform.site.plugins.module_utils.rackform_ipmi_policy import await_power, power_plan

NETFN_CHASSIS = 0x00
CMD_GET_CHASSIS_STATUS = 0x01
CMD_CHASSIS_CONTROL = 0x02
BOOT_DEVICES = {"pxe": "network", "disk": "hd"}
NO_OVERRIDE = ("default", "hd")
"""Boot devices read back that already mean "boot from disk"."""


class ChassisError(Exception):
    """A chassis command failed or its effect never showed."""


def read_power(ipmi):
    """"on" or "off", from Get Chassis Status."""
    response = ipmi.raw_command(netfn=NETFN_CHASSIS, command=CMD_GET_CHASSIS_STATUS)
    if "error" in response:
        raise ChassisError("reading the power state failed: %s" % response["error"])
    return "on" if response["data"][0] & 0x01 else "off"


def _control(ipmi, action):
    response = ipmi.raw_command(netfn=NETFN_CHASSIS, command=CMD_CHASSIS_CONTROL, data=[CHASSIS_CONTROL[action]])
    if "error" in response:
        raise ChassisError("chassis control %s failed: %s" % (action, response["error"]))


def set_power(ipmi, wanted, timeout_s, poll_s=0.5, clock=time.monotonic, sleep=time.sleep, dry_run=False):
    """Bring the chassis to `wanted` (one of POWER_STATES); returns a result dict.
    With `dry_run` only the power state is read: the result says what would be sent."""
    if wanted not in CHASSIS_CONTROL:
        raise ChassisError("unknown power state %r (one of %s)" % (wanted, ", ".join(POWER_STATES)))
    before = read_power(ipmi)
    action, expected = power_plan(wanted, before)  # the fleet's rule too (rackform_ipmi_policy)
    if action is None:
        return {"changed": False, "power_before": before, "power": before, "power_action": None}
    if dry_run:
        return {"changed": True, "power_before": before, "power": expected, "power_action": action}
    _control(ipmi, action)
    after, _, confirmed = await_power(lambda: read_power(ipmi), expected, timeout_s, poll_s, sleep=sleep, clock=clock)
    if not confirmed:
        raise ChassisError("after power %s the chassis still reads %s, not %s, %.0f s later"
                           % (action, after, expected, timeout_s))
    return {"changed": True, "power_before": before, "power": after, "power_action": action}


def set_boot_device(ipmi, device, persistent=False, uefi=False, dry_run=False):
    """Set the next boot device (`pxe` or `disk`); returns a result dict (nothing is sent with `dry_run`)."""
    if device not in BOOT_DEVICES:
        raise ChassisError("unknown boot device %r (pxe or disk)" % device)
    current = ipmi.get_bootdev()
    before = current.get("bootdev")
    pending_pxe = before == "network" and bool(current.get("persistent")) == persistent
    if (device == "disk" and before in NO_OVERRIDE) or (device == "pxe" and pending_pxe):
        return {"changed": False, "boot_device_before": before, "boot_device": device}
    if dry_run:
        return {"changed": True, "boot_device_before": before, "boot_device": device}
    answer = ipmi.set_bootdev(BOOT_DEVICES[device], persist=persistent, uefiboot=uefi)
    if isinstance(answer, dict) and "error" in answer:
        raise ChassisError("setting the boot device to %s failed: %s" % (device, answer["error"]))
    return {"changed": True, "boot_device_before": before, "boot_device": device}
