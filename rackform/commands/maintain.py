"""`rackform maintain SITE --batch N`: rolling maintenance of the site's servers (rackform.day2.maintain).

Exit 0 when every batch came back verified, 1 when a batch failed (the line stops there and
the hosts are named), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rackform.ipmi.cli_options import add_login_arguments

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = ("Rolling maintenance in batches: drain, reboot / upgrade packages / run a hook, power-cycle through the BMC, "
        "wait for SSH and verify, uncordon; stop at the first failed batch.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rackform.day2.maintain import UP_TIMEOUT_S

    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--batch", type=int, required=True, metavar="N", help="hosts per batch")
    parser.add_argument("--max-unavailable", type=int, metavar="M", help="never more than M hosts down at once")
    parser.add_argument("--limit", metavar="HOSTS", help="comma-separated host names (default: every server)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--reboot", action="store_true", help="reboot each host (systemctl reboot over SSH)")
    action.add_argument("--upgrade-packages", action="store_true", help="apt-get upgrade each host over SSH")
    action.add_argument("--hook", type=Path, metavar="PATH",
                        help="run PATH here once per host (RACKFORM_HOST, RACKFORM_BMC_ADDRESS ... in its environment); "
                             "a firmware update, say")
    parser.add_argument("--power-cycle", action="store_true", help="power-cycle each host through its BMC")
    parser.add_argument("--up-timeout", type=float, default=UP_TIMEOUT_S, metavar="S",
                        help=f"seconds a host has to answer SSH again (default {UP_TIMEOUT_S:g})")
    parser.add_argument("--dry-run", action="store_true", help="print the batches; change nothing")
    parser.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")
    add_login_arguments(parser, factory_default=False)


def run(args: argparse.Namespace) -> int:
    from rackform.day2 import maintain
    from rackform.day2.errors import refuse
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    hosts = list(site.hosts)
    if args.limit:
        wanted = [name.strip() for name in args.limit.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in site.hosts]
        if unknown:
            raise refuse(site.loc, "--limit", f"unknown host(s) {', '.join(unknown)}; the site's hosts are: "
                                              f"{', '.join(sorted(site.hosts))}")
        hosts = [name for name in hosts if name in wanted]
    if not (args.reboot or args.upgrade_packages or args.hook or args.power_cycle):
        raise refuse(None, "maintain", "nothing to do: give --reboot, --upgrade-packages, --hook PATH and/or "
                                       "--power-cycle")
    if args.hook is not None and not args.hook.is_file():
        raise refuse(None, "--hook", f"{args.hook}: no such program")
    try:
        plan = maintain.batches(hosts, args.batch, args.max_unavailable)
    except ValueError as error:
        raise refuse(None, "--batch", str(error)) from None
    what = ", ".join(word for word, wanted in (("reboot", args.reboot), ("package upgrade", args.upgrade_packages),
                                              (f"hook {args.hook}", args.hook), ("BMC power cycle", args.power_cycle))
                     if wanted)
    print(f"maintain {site.name}: {len(hosts)} host(s) in {len(plan)} batch(es) of at most {len(plan[0]) if plan else 0}: "
          f"{what}")
    for number, batch in enumerate(plan, 1):
        print(f"  batch {number}: {', '.join(batch)}")
    if args.dry_run:
        print("dry run: nothing was done")
        return EXIT_OK
    from rackform.run.sitelock import SiteLocked, site_lock

    try:
        with site_lock(args.root, site.name, say=print):  # no deploy, rollout or `pulumi up` in between
            return _batches(args, site, plan)
    except SiteLocked as locked:
        print(f"rackform: maintain {site.name}: {locked}; nothing was done", file=sys.stderr)
        return EXIT_FAILED


def _batches(args: argparse.Namespace, site, plan: list[list[str]]) -> int:
    started = time.monotonic()
    done: list[str] = []
    for number, batch in enumerate(plan, 1):
        result = _one_batch(args, site, batch)
        print(f"batch {number}/{len(plan)}: {', '.join(batch)}: {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s")
        if not result.ok:
            for host, why in result.failed.items():
                print(f"  {host}: {why}", file=sys.stderr)
            left = [host for later in plan[number:] for host in later]
            print(f"rackform: maintain {site.name}: batch {number} failed on {', '.join(result.failed)}; stopped "
                  f"(done: {', '.join(done) or 'none'}; not started: {', '.join(left) or 'none'})", file=sys.stderr)
            return EXIT_FAILED
        done += batch
    print(f"maintain {site.name}: {len(done)} host(s) maintained and verified in {time.monotonic() - started:.1f} s "
          f"({(time.monotonic() - started) / max(1, len(done)):.1f} s per host)")
    return EXIT_OK


def _one_batch(args, site, batch: list[str]):
    from rackform.day2 import cluster, converge, maintain, wire
    from rackform.fabric.live import LiveError, Target
    from rackform.ipmi.cli_options import credential_source, fleet_from
    from rackform.ipmi.fleet import BmcTarget
    from rackform.commands.node import _transport
    from rackform.pipeline import build_dir

    started = time.monotonic()
    result = maintain.BatchResult(batch)
    k8s = cluster.find(build_dir(args.root, site.name))
    for host in batch:
        for step in (k8s.cordon, k8s.drain):
            ok, said = step(host)
            if not ok:
                result.failed[host] = f"{step.__name__}: {said}"
    if k8s.absent:
        print(f"  {', '.join(batch)}: {k8s.absent}")
    live = [host for host in batch if host not in result.failed]
    ssh = _transport(site, args.private_key)
    rebooting = args.reboot or args.power_cycle
    booted = {host: _boot_marker(ssh, site, host) for host in live} if rebooting else {}
    for host in list(live):
        node = site.hosts[host]
        address = str(node.management_address)
        target = Target(host, "host", address)
        if args.reboot or args.upgrade_packages:
            command = "systemctl reboot\n" if args.reboot else maintain.UPGRADE_COMMAND
            try:
                ssh.run_script(target, command)
            except LiveError as error:
                if not args.reboot:  # a reboot drops the connection: that is the point
                    result.failed[host] = f"over SSH: {error}"
            if args.reboot and not maintain.wait_port(address, False, maintain.DOWN_TIMEOUT_S):
                result.failed[host] = f"still answering SSH {maintain.DOWN_TIMEOUT_S:g} s after `systemctl reboot`"
        if args.hook:
            ok, said = maintain.run_hook(args.hook, site, node)
            print(f"  {host}: {said}")
            if not ok:
                result.failed[host] = said
    live = [host for host in live if host not in result.failed]
    if args.power_cycle and live:
        fleet = fleet_from(args, credential_source(args, site.name, args.root))
        for outcome in wire.power(fleet, [BmcTarget(h, str(site.hosts[h].bmc_address)) for h in live
                                          if site.hosts[h].bmc_address], "cycle"):
            if not outcome.ok:
                result.failed[outcome.node] = f"power cycle through {outcome.address}: {outcome.describe()}"
            else:
                print(f"  {outcome.node}: power cycled through its BMC {outcome.address}")
    live = [host for host in live if host not in result.failed]
    for host in live:
        if not maintain.wait_port(str(site.hosts[host].management_address), True, args.up_timeout):
            result.failed[host] = f"does not answer SSH at {site.hosts[host].management_address} after " \
                                  f"{args.up_timeout:g} s"
    live = [host for host in live if host not in result.failed]
    for host in live if rebooting else []:
        marker = _boot_marker(ssh, site, host)
        if marker is not None and marker == booted.get(host):
            result.failed[host] = "answers SSH but did not restart (same boot id and PID 1 start time as before)"
    live = [host for host in live if host not in result.failed]
    if live:
        verified = converge.verify(site.name, args.root, ",".join(live), private_key=args.private_key,
                                   say=lambda line: None)
        for line in verified.lines:
            print(f"  {line}")
        for host in verified.failed_hosts or ([] if verified.ok else live):
            result.failed[host] = "verify failed (see above)"
    if result.ok:
        for host in batch:
            ok, said = k8s.uncordon(host)
            if not ok:
                result.failed[host] = f"uncordon: {said}"
    result.seconds = time.monotonic() - started
    return result


def _boot_marker(ssh, site, host: str) -> str | None:
    """The host's boot marker (rackform.day2.maintain.BOOT_MARKER_SCRIPT), None when it cannot be read."""
    from rackform.day2.maintain import BOOT_MARKER_SCRIPT
    from rackform.fabric.live import LiveError, Target

    try:
        text = ssh.run_script(Target(host, "host", str(site.hosts[host].management_address)), BOOT_MARKER_SCRIPT)
    except LiveError:
        return None
    return text.strip() or None
