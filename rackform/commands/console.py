"""`rackform console SITE HOST [--log FILE]`: the host's serial console over LAN (SOL) through its BMC.

ipmitool's `sol activate` (lanplus, cipher suite 3) does the talking; the password goes to
it through its environment (`-E`), never on a command line. First `sol info` asks whether
the BMC serves SOL at all: a BMC that does not (the lab's ipmi_sim BMCs have no serial
device behind them: their lan.conf has no `sol` line) is reported as such, exit 1.
`--log FILE` records the session (util-linux `script`). `~.` ends it (ipmitool's escape).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from rackform.ipmi.cli_options import add_login_arguments
from rackform.process_environment import tool_environment

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = "Open a host's serial-over-LAN console through its BMC (ipmitool sol activate); --log FILE records it."
CIPHER_SUITE = "3"  # what every BMC here speaks (ipmi_sim fails on ipmitool's default 17)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("host", metavar="HOST")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--log", type=Path, metavar="FILE", help="record the session to FILE")
    parser.add_argument("--dry-run", action="store_true", help="check SOL and print the command; open nothing")
    add_login_arguments(parser, factory_default=False)


def ipmitool_argv(address: str, user: str, *command: str) -> list[str]:
    return ["ipmitool", "-I", "lanplus", "-C", CIPHER_SUITE, "-H", address, "-U", user, "-E", *command]


def run(args: argparse.Namespace) -> int:
    from rackform.day2.errors import refuse
    from rackform.day2.remove import known_host
    from rackform.ipmi.cli_options import credential_source
    from rackform.ipmi.credentials import CredentialsUnavailable
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    host = known_host(site, args.host)
    if host.bmc_address is None:
        raise refuse(host.vars_loc, "bmc_address", f"{args.host} has no bmc_address: no BMC to reach its console through")
    if shutil.which("ipmitool") is None:
        print("rackform: console needs ipmitool (apt: ipmitool)", file=sys.stderr)
        return EXIT_FAILED
    try:
        login = credential_source(args, site.name, args.root)(args.host)
    except CredentialsUnavailable as error:
        print(f"rackform: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    address = str(host.bmc_address)
    # The password, then earlier ones and each one's first 16 bytes (what IPMI 1.5-era firmware keeps).
    for candidate in login.logins():
        env = tool_environment("ipmitool", {"IPMI_PASSWORD": candidate.password})  # ipmitool -E reads it
        info = subprocess.run(ipmitool_argv(address, candidate.user, "sol", "info", "1"), env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        said = (info.stdout + info.stderr).strip()
        if "Unable to establish" not in said:
            login = candidate
            break
    enabled = next((line.split(":", 1)[1].strip() for line in said.splitlines()
                    if line.split(":", 1)[0].strip() == "Enabled"), None)
    if info.returncode != 0 and "Invalid command" not in said:
        reason = said.splitlines()[-1] if said else f"ipmitool exit {info.returncode}"
        print(f"rackform: {args.host}: could not ask the BMC at {address} about serial-over-LAN: {reason}", file=sys.stderr)
        print(f"console {site.name} {args.host}: no console (exit 1)")
        return EXIT_FAILED
    if enabled != "true":
        reason = said.splitlines()[-1] if info.returncode else "SOL is disabled in its settings"
        print(f"rackform: {args.host}: the BMC at {address} does not serve serial-over-LAN ({reason})", file=sys.stderr)
        print(f"console {site.name} {args.host}: no console (exit 1)")
        return EXIT_FAILED
    argv = ipmitool_argv(address, login.user, "sol", "activate")
    if args.log is not None:
        argv = ["script", "-q", "-f", "-c", shlex.join(argv), str(args.log)]
    if args.dry_run:
        print(f"dry run: SOL is enabled on {address}; would run: {shlex.join(argv)}")
        return EXIT_OK
    print(f"{args.host}: serial console through {address} (~. ends it)" + (f", recorded to {args.log}" if args.log else ""))
    code = subprocess.run(argv, env=env, check=False).returncode
    print(f"console {site.name} {args.host}: closed (ipmitool exit {code})")
    return EXIT_OK if code == 0 else EXIT_FAILED
