"""`rackform node add|remove|replace SITE ...`: day-2 changes to a site's servers, no hand edits.

add:     find BMCs the inventory lacks on an OOB range, identify each one's block from its
         FRU, power it on and learn its cabling from LLDP on the leaves and its management
         MAC, name, address and place it, write the site file and inventory (round-trip
         edits; --dry-run shows the diff and writes nothing), then deploy the node (with the
         leaves it is cabled to and the PXE server) and verify it.
remove:  cordon and drain where a cluster exists, power off through the BMC, take the host
         out of the design, cabling, placement and inventory; the site stays valid.
replace: the BMC's FRU serial no longer matches the inventory (`bmc status` flags it):
         record the new serial and MACs, drain and delete the old node object where a
         cluster exists, re-image over PXE, harden the BMC, deploy and verify the node,
         and re-join it (scale.yml) where a cluster exists.

Exit 0 when done, 1 when a BMC, switch, stage or check failed (named), 2 for bad input
(unknown host, address exhausted, rack full, ambiguous block type ...), nothing touched.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import time
from pathlib import Path

from rackform.ipmi.cli_options import add_login_arguments

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = "Add, replace or retire a server: files written with round-trip edits, then deployed and verified."
LLDP_TIMEOUT_S = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="node_command", required=True, metavar="ACTION")

    def sub(name: str, help_text: str, *, factory: bool) -> argparse.ArgumentParser:
        command = actions.add_parser(name, help=help_text, description=help_text)
        command.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
        command.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
        command.add_argument("--dry-run", action="store_true", help="show what would change (a diff); change nothing")
        command.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")
        add_login_arguments(command, factory_default=factory)
        return command

    add = sub("add", "Find new BMCs on an OOB range and add their nodes to the site, then deploy and verify them.",
              factory=True)
    add.add_argument("--oob", required=True, metavar="RANGE", help="addresses to scan (a.b.c.0/24, a.b.c.10-50)")
    add.add_argument("--rack", help="rack for the new node (default: the first with room)")
    add.add_argument("--position", type=int, metavar="U", help="lowest U of the new node (needs --rack)")
    add.add_argument("--block", help="building block, when the FRU fits several")
    add.add_argument("--leases", type=Path, metavar="FILE", help="the PXE server's dnsmasq lease file, for the "
                                                                 "management MAC")
    add.add_argument("--lldp-timeout", type=float, default=LLDP_TIMEOUT_S, metavar="S",
                     help=f"seconds to wait for the leaves to hear a powered-on node (default {LLDP_TIMEOUT_S:g})")
    add.add_argument("--no-deploy", action="store_true", help="write the files, do not deploy or verify")
    add.set_defaults(func=run)

    remove = sub("remove", "Retire a server: drain, power off through its BMC, take it out of the site.",
                 factory=False)
    remove.add_argument("host", metavar="HOST")
    remove.add_argument("--keep-power", action="store_true", help="leave the server powered on")
    remove.add_argument("--no-deploy", action="store_true",
                        help="do not run the fabric and os stages that take it out of the leaves and /etc/hosts")
    remove.set_defaults(func=run)

    replace = sub("replace", "Record a swapped server (FRU serial changed), re-image, harden, deploy and verify it.",
                  factory=False)
    replace.add_argument("host", metavar="HOST")
    replace.add_argument("--no-deploy", action="store_true", help="record the new facts only")
    replace.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rackform.fabric.live import LiveError
    from rackform.ipmi import discovery
    from rackform.ipmi.credentials import CredentialsUnavailable
    from rackform.run.sitelock import SiteLocked, site_lock

    started = time.monotonic()
    try:
        flow = {"add": _add, "remove": _remove, "replace": _replace}[args.node_command]
        with site_lock(args.root, args.site, say=print):  # no deploy, rollout or `pulumi up` in between
            code = flow(args)
    except SiteLocked as locked:
        print(f"rackform: node {args.node_command} {args.site}: {locked}; nothing was done", file=sys.stderr)
        code = EXIT_FAILED
    except discovery.RangeError as error:
        print(f"rackform: --oob: {error}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    except CredentialsUnavailable as error:
        print(f"rackform: {error}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    except LiveError as error:
        print(f"rackform: reading LLDP: {error}", file=sys.stderr)
        code = EXIT_FAILED
    print(f"node {args.node_command} {args.site}: exit {code} after {time.monotonic() - started:.1f} s")
    return code


# ---------------------------------------------------------------- add


def _add(args: argparse.Namespace) -> int:
    from rackform.day2 import add, blocks, files, lldp, naming, wire
    from rackform.day2.errors import refuse
    from rackform.ipmi import discovery
    from rackform.ipmi.cli_options import credential_source, fleet_from
    from rackform.ipmi.fleet import BmcTarget
    from rackform.ipmi.session import Timeouts
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    oob = site.network_for("oob")
    if oob is None:
        raise refuse(site.loc, "networks", "no network with purpose oob: node add scans the out-of-band network")
    answers = discovery.sweep(discovery.parse_range(args.oob, oob.prefix), timeouts=Timeouts(reply_s=args.reply_timeout))
    known = {str(host.bmc_address) for host in site.hosts.values() if host.bmc_address}
    new = sorted((address for address in answers if address not in known), key=ipaddress.IPv4Address)
    print(f"{len(answers)} BMC(s) answered in {args.oob}: {len(answers) - len(new)} known, {len(new)} new")
    if not new:
        print(f"node add {site.name}: nothing new")
        return EXIT_OK
    if (args.rack or args.position) and len(new) > 1:
        raise refuse(None, "--rack", f"{len(new)} new BMCs answered ({', '.join(new)}): --rack/--position place one "
                                     f"node; narrow --oob to one address")
    fleet = fleet_from(args, credential_source(args, site.name, args.root))
    results = wire.read_bmcs(fleet, [BmcTarget(address, address) for address in new])
    unread = [f"{result.address}: {result.describe()}" for result in results if not result.ok]
    bmcs = [result.value for result in results if result.ok]
    ask = _ask if sys.stdin.isatty() and not args.dry_run else None
    kinds = {bmc.address: blocks.identify(site.catalog, bmc.manufacturer, bmc.product, bmc.address, args.block, ask)
             for bmc in bmcs}

    # Name, place and address every node before any power changes: rack full, address exhausted and
    # the like are refused (exit 2) with nothing touched. Cabling comes from LLDP after power-on.
    names, addresses, reserved = naming.taken_names(site), set(), []
    for bmc in bmcs:
        add.plan_node(site, add.Found(bmc.address, bmc.bmc_mac, bmc.serial, kinds[bmc.address], fru=bmc.fru),
                      rack=args.rack, position_u=args.position, taken_names=names, taken_addresses=addresses,
                      reserved=reserved)
    reader = lldp.ssh_reader(_transport(site, args.private_key))
    found, claimed, problems = [], set(), list(unread)
    for bmc in bmcs:
        if args.dry_run and bmc.power == "off":  # a dry run changes nothing, power included
            print(f"{bmc.address}: powered off; a dry run does not power it on, so its cabling (LLDP) and "
                  f"management MAC are found by the real run")
            found.append(add.Found(bmc.address, bmc.bmc_mac, bmc.serial, kinds[bmc.address], fru=bmc.fru))
            continue
        heard, note = _hear(site, fleet, bmc, reader, claimed, args)
        print(f"{bmc.address}: {note}")
        if heard is None:
            problems.append(f"{bmc.address}: {note}")
            continue
        system, items = heard
        claimed.add(system)
        mac, source = _management_mac(items, system, args.leases)
        print(f"{bmc.address}: management MAC {mac or 'unknown'} ({source})")
        found.append(add.Found(bmc.address, bmc.bmc_mac, bmc.serial, kinds[bmc.address],
                               tuple(add.FabricLink(item.port, item.switch, item.switch_port)
                                     for item in sorted(items, key=lambda i: (i.port or "", i.switch))),
                               mac, bmc.fru))
    if not found:
        _report_problems(problems)
        return EXIT_FAILED
    taken_names, taken_addresses, reserved, plans = naming.taken_names(site), set(), [], []
    for item in found:  # each plan takes its name, addresses and rack units before the next is made
        plans.append(add.plan_node(site, item, rack=args.rack, position_u=args.position, taken_names=taken_names,
                                   taken_addresses=taken_addresses, reserved=reserved))
    changes = add.file_changes(site, args.root, plans)
    for plan in plans:
        print("\n".join(plan.lines()))
    print(files.diff_text(changes), end="")
    uncabled = [plan.host for plan in plans if not plan.found.links]
    if args.dry_run and uncabled:  # powered off, so unheard: the real run checks the cabled result
        print(f"dry run: the site is checked with {', '.join(uncabled)} once the cabling is heard (the real run)")
    else:
        files.check_on_copy(site.name, args.root, changes)
    hosts = [plan.host for plan in plans]
    if args.dry_run:
        print(f"dry run: {len(changes)} file(s) would change; nothing was written")
        _report_problems(problems)
        return EXIT_FAILED if problems else EXIT_OK
    files.write(args.root, changes)
    print(f"wrote {', '.join(str(change.path) for change in changes)}")
    code = EXIT_OK
    if not args.no_deploy:
        leaves = sorted({link.switch for plan in plans for link in plan.found.links})
        code = _deploy_and_verify(site.name, args.root, hosts, [*leaves, "provisioning"], args.private_key,
                                  os_everywhere=True)
    _report_problems(problems)
    print(f"node add {site.name}: {', '.join(hosts)} added" + ("" if code == EXIT_OK else " (deploy or verify failed)"))
    return EXIT_FAILED if problems or code else EXIT_OK


def _hear(site, fleet, bmc, reader, claimed: set[str], args):
    """Power the node on (when off) and wait for the leaves to hear a system the site does not know."""
    from rackform.day2 import lldp, wire
    from rackform.ipmi.fleet import BmcTarget

    before = set(lldp.by_system(lldp.strangers(site, lldp.read(site, reader)))) - claimed
    if bmc.power == "off":
        result = wire.power(fleet, [BmcTarget(bmc.address, bmc.address)], "on")[0]
        if not result.ok:
            return None, f"could not power it on: {result.describe()}"
        unknown_before = set()  # whatever appears now is this node
        ignore = before
    else:
        unknown_before, ignore = before, set()

    def fresh():
        systems = lldp.by_system(lldp.strangers(site, lldp.read(site, reader)))
        return {name: items for name, items in systems.items() if name not in claimed and name not in ignore}

    heard = wire.wait_until(fresh, args.lldp_timeout, interval_s=3.0)
    if heard:
        time.sleep(3.0)  # let every port of the node be heard, not just the first
        heard = fresh() or heard
    if not heard:
        return None, (f"no new LLDP neighbour on the leaves within {args.lldp_timeout:g} s: is it cabled, and does "
                      f"it run an LLDP agent?")
    if len(heard) > 1:
        names = ", ".join(sorted(heard))
        why = "was already on" if unknown_before else "powered on"
        return None, (f"it {why} and the leaves hear {len(heard)} unknown systems ({names}): cannot tell which one "
                      f"it is; power the others off, or add one node at a time")
    system, items = next(iter(heard.items()))
    ports = ", ".join(f"{item.port}->{item.switch}:{item.switch_port}" for item in items)
    return (system, items), f"heard on LLDP as {system}: {ports}"


def _management_mac(items, system, leases):
    from rackform.day2 import mgmtmac

    addresses = sorted({ip for item in items for ip in item.mgmt_ips})
    return mgmtmac.management_mac(addresses, system, leases)


def _ask(candidates) -> str | None:
    print("The FRU fits several blocks:")
    for block in candidates:
        print(f"  {block.name}: {block.display_name}")
    try:
        return input("block? ").strip() or None
    except EOFError:
        return None


def _transport(site, private_key: Path | None):
    from rackform.fabric.live import SshTransport, lab_transport

    transport = lab_transport(site.name)
    if transport is not None and private_key is None:
        return transport
    key = private_key or (Path(site.group_vars.ansible_ssh_private_key_file)
                          if site.group_vars.ansible_ssh_private_key_file else None)
    return SshTransport(user=site.group_vars.ansible_user, key_file=key)


def _report_problems(problems: list[str]) -> None:
    for problem in problems:
        print(f"not added: {problem}", file=sys.stderr)


def _deploy_and_verify(site_name: str, root: Path, hosts: list[str], also: list[str], private_key,
                       os_everywhere: bool = False) -> int:
    """Every stage on `hosts` (and `also`), then, when the site's machines must learn a new name, the os
    stage on all of them (each one's /etc/hosts lists every machine), then verify `hosts`."""
    from rackform.day2 import converge

    limit = ",".join([*hosts, *also])
    print(f"deploying {', '.join(hosts)} (limit {limit}: " + ", ".join(
        ["the leaves get the new ports" if len(also) > 1 else "", "the PXE server its reservation"]).lstrip(", ") + ")")
    runs = [converge.deploy(site_name, root, limit, private_key=private_key)]
    if os_everywhere and runs[0].ok:
        # The storage stage too: a new GPU node is a client of the data sets that default to
        # every GPU host, so their servers' exports must admit it (a site without data sets
        # reports the stage as not run).
        print("os and storage stages on every host: each one's /etc/hosts names the new node, "
              "the data sets' exports admit it")
        runs.append(converge.deploy(site_name, root, None, stages=["os", "storage"], private_key=private_key))
    for deployed in runs:
        print("\n".join(deployed.lines))
        if not deployed.ok:
            print(f"rackform: {site_name}: deploy failed on {', '.join(deployed.failed_hosts) or 'the run'}",
                  file=sys.stderr)
            return EXIT_FAILED
    verified = converge.verify(site_name, root, ",".join(hosts), private_key=private_key)
    print("\n".join(verified.lines))
    return EXIT_OK if verified.ok else EXIT_FAILED


# ---------------------------------------------------------------- remove


def _remove(args: argparse.Namespace) -> int:
    from rackform.day2 import cluster, files, remove, wire
    from rackform.ipmi.cli_options import credential_source, fleet_from
    from rackform.ipmi.fleet import BmcTarget
    from rackform.pipeline import build_dir, load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    host = remove.known_host(site, args.host)
    changes = remove.file_changes(site, args.root, args.host)
    print(files.diff_text(changes), end="")
    files.check_on_copy(site.name, args.root, changes)
    if args.dry_run:
        print(f"dry run: {args.host} would be drained, powered off and removed; nothing was changed")
        return EXIT_OK
    k8s = cluster.find(build_dir(args.root, site.name))
    for step in (k8s.cordon, k8s.drain, k8s.forget):
        ok, said = step(args.host)
        print(f"{args.host}: {step.__name__}: {said.splitlines()[-1] if said else 'ok'}")
        if not ok:
            print(f"rackform: {args.host}: {step.__name__} failed; nothing else was done", file=sys.stderr)
            return EXIT_FAILED
        if k8s.absent:
            break
    if not args.keep_power and host.bmc_address is not None:
        fleet = fleet_from(args, credential_source(args, site.name, args.root))
        result = wire.power(fleet, [BmcTarget(args.host, str(host.bmc_address))], "off")[0]
        if not result.ok:
            print(f"rackform: {args.host}: power off through {host.bmc_address} failed: {result.describe()}; "
                  f"the files were left as they were", file=sys.stderr)
            return EXIT_FAILED
        print(f"{args.host}: powered off through its BMC {host.bmc_address}")
    files.write(args.root, changes)
    load_and_check(site.name, args.root)
    print(f"{args.host}: out of the design, cabling, placement and inventory; validate: clean")
    code = EXIT_OK
    if not args.no_deploy:
        from rackform.day2 import converge

        print("fabric, os and storage stages on every machine: the leaves drop its ports, /etc/hosts its name, "
              "the data sets' exports its addresses")
        deployed = converge.deploy(site.name, args.root, None, stages=["fabric", "os", "storage"],
                                   private_key=args.private_key)
        print("\n".join(deployed.lines))
        code = EXIT_OK if deployed.ok else EXIT_FAILED
    print(f"node remove {site.name}: {args.host} retired; its addresses {host.management_address}, "
          f"{host.bmc_address} are free" + ("" if code == EXIT_OK else " (the follow-up deploy failed)"))
    return code


# ---------------------------------------------------------------- replace


def _replace(args: argparse.Namespace) -> int:
    from rackform.day2 import files, remove, replace
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(args.site, args.root)
    host = remove.known_host(site, args.host)
    if host.bmc_address is None:
        from rackform.day2.errors import refuse
        raise refuse(host.vars_loc, "bmc_address", f"{args.host} has no bmc_address: nothing to read the new FRU from")
    facts, why = replace.read_swapped(args, site, host)
    if facts is None:
        print(f"rackform: {args.host}: {why}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{args.host}: BMC {host.bmc_address} ({why}): serial {facts.serial or '-'}, BMC MAC {facts.bmc_mac or '-'}")
    if facts.serial == host.serial:
        print(f"node replace {site.name}: {args.host}'s FRU serial {host.serial} matches the inventory: nothing to do")
        return EXIT_OK
    changes = replace.file_changes(site, args.root, host, facts)
    print(files.diff_text(changes), end="")
    files.check_on_copy(site.name, args.root, changes)
    if args.dry_run:
        print("dry run: nothing was written or re-imaged")
        return EXIT_OK
    files.write(args.root, changes)
    if args.no_deploy:
        return EXIT_OK
    from rackform.day2 import cluster
    from rackform.pipeline import build_dir

    k8s = cluster.find(build_dir(args.root, site.name))
    for step in (k8s.drain, k8s.forget):  # the old node object goes; the new machine joins afresh
        ok, said = step(args.host)
        print(f"{args.host}: {step.__name__}: {said.splitlines()[-1] if said else 'ok'}")
        if not ok:
            return EXIT_FAILED
        if k8s.absent:
            break
    code = replace.reimage(args, site, host)
    if code:
        return code
    code = _deploy_and_verify(site.name, args.root, [args.host], ["provisioning"], args.private_key)
    if code == EXIT_OK and not k8s.absent:
        from rackform.commands.upgrade import run_maintenance_playbook

        code = run_maintenance_playbook(site.name, args.root, "scale.yml", f"{args.host},kube_control_plane",
                                        args.private_key)
    print(f"node replace {site.name}: {args.host} now serial {facts.serial}"
          + ("" if code == EXIT_OK else " (deploy or verify failed)"))
    return code
