# -*- coding: utf-8 -*-
"""BMC hardening: the site's admin account in, the null and factory users out.

`harden` works on a logged-in pyghmi session (or anything with the same
methods) and changes only what differs from the wanted state, so that a second
run reads the accounts, finds them right and changes nothing:

- the site admin (e.g. `rackform`) has a user slot of its own, administrator
  privilege on the LAN channel, IPMI messaging on, and the site's password;
- the null user (id 1, the anonymous login) and every factory account (e.g.
  ADMIN) are disabled, have no access on the LAN channel, and a factory account's
  password is replaced by a random one nobody keeps.

The order guards against locking ourselves out: the new account is proven by a
fresh login with the new password before any factory account is touched.
"""

from __future__ import absolute_import, division, print_function

import secrets
import string

NETFN_APP = 0x06
CMD_GET_USER_ACCESS = 0x44
NULL_USER_ID = 1
FIRST_FREE_USER_ID = 3  # 1 is the null user, 2 is the factory administrator on most BMCs
USER_ID_LIMIT = 16
"""User ids read (2..16): BMCs have 10 to 16 users; ipmi_sim claims 63, and reading them all
costs two round trips each on every run."""
PRIVILEGE_ADMINISTRATOR = 0x04
PRIVILEGE_NO_ACCESS = 0x0F
ENABLED, DISABLED = 0b01, 0b10  # "user ID enable status" bits 7:6 of Get User Access byte 2
IPMI_PASSWORD_BYTES = 20
PASSWORD_ALPHABET = string.ascii_letters + string.digits


class HardenError(Exception):
    """The BMC cannot be brought to the wanted state (no free user slot, short passwords ...)."""


class UserSlot(object):
    """One user id's name and its access on the LAN channel."""

    __slots__ = ("uid", "name", "privilege", "ipmi_messaging", "enable_status")

    def __init__(self, uid, name, privilege, ipmi_messaging, enable_status):
        self.uid = uid
        self.name = name
        self.privilege = privilege
        self.ipmi_messaging = ipmi_messaging
        self.enable_status = enable_status

    @property
    def disabled(self):
        """No access and no IPMI messaging; a BMC that reports the enable bit must say disabled too."""
        return (self.privilege == PRIVILEGE_NO_ACCESS and not self.ipmi_messaging
                and self.enable_status != ENABLED)

    @property
    def administrator(self):
        return (self.privilege == PRIVILEGE_ADMINISTRATOR and self.ipmi_messaging
                and self.enable_status != DISABLED)


def random_password(length=IPMI_PASSWORD_BYTES):
    """Letters and digits only: every BMC takes them, and YAML and Jinja leave them alone."""
    return "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(length))


def user_access(ipmi, channel, uid):
    """(max user ids, UserSlot without name) from Get User Access, read raw: pyghmi drops the enable bits."""
    response = ipmi.raw_command(netfn=NETFN_APP, command=CMD_GET_USER_ACCESS, data=[channel, uid])
    if "error" in response:
        raise HardenError("reading the access of user %d failed: %s" % (uid, response["error"]))
    data = response["data"]
    slot = UserSlot(uid, None, data[3] & 0x0F, bool(data[3] & 0x10), data[1] >> 6)
    return data[0] & 0x3F, slot


def read_user_names(ipmi, max_users):
    """{uid: name or None} for ids 2..max_users (id 1, the null user, has no name)."""
    return dict((uid, ipmi.get_user_name(uid) or None) for uid in range(2, max_users + 1))


def choose_admin_slot(names, admin_name, preferred_uid, reserved):
    """The slot that holds (or will hold) the site admin: where it already is, else the
    preferred id when it is free, else the first free id from 3 up."""
    if names.get(preferred_uid) == admin_name:
        return preferred_uid
    for uid in sorted(names):
        if names[uid] == admin_name:
            return uid
    if names.get(preferred_uid) is None and preferred_uid in names and preferred_uid not in reserved:
        return preferred_uid
    for uid in sorted(names):
        if uid >= FIRST_FREE_USER_ID and names[uid] is None and uid not in reserved:
            return uid
    raise HardenError("no free user slot for %r (ids 2-%d are all taken)" % (admin_name, max(names or [1])))


def harden(ipmi, logged_in_as, site, factory_names, preferred_uid, relogin, min_password_bytes,
           password_bytes, user_id_limit=USER_ID_LIMIT, dry_run=False):
    """Bring the BMC's accounts to the wanted state; returns (session now in use, result dict).

    `logged_in_as` is the label of the credential the session logged in with ("site" for
    the site admin with the vault's current password). `relogin(credential)` opens a
    session as the site admin and returns (session, password bytes the BMC kept).
    With `dry_run` (Ansible's check mode) nothing is written: the changes are only listed.
    """
    changes = []
    channel = ipmi.get_network_channel()
    max_users, null_user = user_access(ipmi, channel, NULL_USER_ID)
    names = read_user_names(ipmi, min(max_users, max(user_id_limit, preferred_uid)))
    factory_uids = [uid for uid, name in sorted(names.items()) if name in factory_names and name != site.user]
    admin_uid = choose_admin_slot(names, site.user, preferred_uid, set(factory_uids))
    _, admin = user_access(ipmi, channel, admin_uid)

    needs_admin = logged_in_as != "site" or names.get(admin_uid) != site.user or not admin.administrator
    if needs_admin and dry_run:
        changes.append("would set up the site admin %r as user id %d" % (site.user, admin_uid))
    elif needs_admin:
        ipmi, password_bytes = _make_site_admin(ipmi, logged_in_as, site, names, admin_uid, admin, channel,
                                                relogin, changes)
    if password_bytes < min_password_bytes and not (dry_run and needs_admin):
        raise HardenError("the BMC keeps only the first %d bytes of a password and the site asks for at least "
                          "%d (IPMI 2.0 allows 20); lower bmc_harden_min_password_bytes for this BMC model to "
                          "accept it" % (password_bytes, min_password_bytes))

    for uid in [NULL_USER_ID] + factory_uids:
        slot = null_user if uid == NULL_USER_ID else user_access(ipmi, channel, uid)[1]
        if not slot.disabled:
            if not dry_run:
                _disable(ipmi, channel, uid, scramble=uid != NULL_USER_ID)
            changes.append("%s the %s" % ("would disable" if dry_run else "disabled",
                                          "null user (id 1)" if uid == NULL_USER_ID else
                                          "factory user %r (id %d)" % (names[uid], uid)))
    return ipmi, {
        "changed": bool(changes),
        "changes": changes,
        "admin_user": site.user,
        "admin_user_id": admin_uid,
        "password_bytes": password_bytes,
        "disabled_user_ids": [NULL_USER_ID] + factory_uids,
    }


def _make_site_admin(ipmi, logged_in_as, site, names, admin_uid, admin, channel, relogin, changes):
    """Name, password, enable and administrator access for the site admin, then a fresh
    login with the new password; returns (that session, password bytes the BMC kept).
    The caller logs out of the session it started with."""
    if names.get(admin_uid) != site.user:
        ipmi.set_user_name(admin_uid, site.user)
        changes.append("created the site admin %r as user id %d" % (site.user, admin_uid))
    if logged_in_as != "site":
        ipmi.set_user_password(admin_uid, mode="set_password", password=site.password)
        changes.append("set the site admin's password to the site vault's random one (logged in as %s)"
                       % logged_in_as)
    if admin.enable_status != ENABLED or not admin.administrator:
        ipmi.set_user_password(admin_uid, mode="enable")
        ipmi.set_user_access(admin_uid, channel, callback=False, link_auth=False, ipmi_msg=True,
                             privilege_level="administrator")
        changes.append("gave the site admin administrator access on LAN channel %d" % channel)
    return relogin(site)


def _disable(ipmi, channel, uid, scramble):
    if scramble:  # a factory password printed in every manual must not work again if the user is re-enabled
        ipmi.set_user_password(uid, mode="set_password", password=random_password())
    ipmi.set_user_password(uid, mode="disable")
    ipmi.set_user_access(uid, channel, callback=False, link_auth=False, ipmi_msg=False,
                         privilege_level="no_access")
