"""Command-line options the BMC commands share: where logins come from, how patient to be.

Passwords never come from the command line (it is visible to every user of the machine,
docs/domain.md, "IPMI safety rules"): the choices are the site's secret store, a password file, or the factory login.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rackform.ipmi import credentials as creds
from rackform.ipmi.fleet import DEFAULT_ATTEMPTS, DEFAULT_MAX_PARALLEL, Fleet, RetryPolicy
from rackform.ipmi.session import DEFAULT_REPLY_S, Timeouts


def add_login_arguments(parser: argparse.ArgumentParser, *, factory_default: bool) -> None:
    login = parser.add_argument_group("BMC login (passwords are never taken from the command line)")
    if factory_default:
        login.add_argument("--user", default=creds.FACTORY_USER,
                           help=f"BMC user (default: the factory {creds.FACTORY_USER})")
        login.add_argument("--password-file", type=Path, metavar="PATH",
                           help=f"file holding the password (default: the factory {creds.FACTORY_USER}/"
                                f"{creds.FACTORY_PASSWORD})")
    else:
        login.add_argument("--factory", action="store_true",
                           help=f"log in with the factory {creds.FACTORY_USER}/{creds.FACTORY_PASSWORD} "
                                f"(BMCs not yet hardened) instead of the site's secret store")
        login.add_argument("--user", default=creds.FACTORY_USER, help="BMC user for --password-file")
        login.add_argument("--password-file", type=Path, metavar="PATH",
                           help="one password for every BMC, read from this file")
    tuning = parser.add_argument_group("patience")
    tuning.add_argument("--parallel", type=int, default=DEFAULT_MAX_PARALLEL, metavar="N",
                        help=f"BMCs talked to at once (default {DEFAULT_MAX_PARALLEL}; one command per BMC at a time)")
    tuning.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, metavar="N",
                        help=f"tries per BMC before it is reported failed (default {DEFAULT_ATTEMPTS})")
    tuning.add_argument("--reply-timeout", type=float, default=DEFAULT_REPLY_S, metavar="S",
                        help=f"seconds to wait for each reply before asking again (default {DEFAULT_REPLY_S:g})")


def credential_source(args: argparse.Namespace, site_name: str, root: Path) -> creds.CredentialSource:
    """The logins the options ask for; CredentialsUnavailable says why there are none."""
    if getattr(args, "password_file", None):
        return creds.password_file_credentials(args.user, args.password_file)
    if getattr(args, "factory", True):  # discover has no --factory: the factory login is its default
        return creds.factory_credentials(args.user if hasattr(args, "user") else creds.FACTORY_USER)
    return creds.site_credentials(site_name, root)


def fleet_from(args: argparse.Namespace, credentials: creds.CredentialSource) -> Fleet:
    return Fleet(credentials, retry=RetryPolicy(attempts=max(1, args.attempts)),
                 timeouts=Timeouts(reply_s=args.reply_timeout), max_parallel=max(1, args.parallel))
