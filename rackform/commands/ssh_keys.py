"""`rackform ssh-keys SITE [--collect [HOST ...]] [--replace HOST ...] [--dry-run]`: record host keys.

Host key checking is on for real sites: the rendered known_hosts holds each machine's
`ssh_host_keys` (rackform.render.known_hosts). This command is how they get there on first
contact, with no prompt:

- no option: each host and managed switch, with the keys it has recorded (exit 0);
- `--collect`: ssh-keyscan every machine that has no keys recorded (or the HOSTs named), at
  the address and port Ansible uses (rackform.render.ssh_address), a bounded number at a time;
  write what each one presents into its host_vars file (round-trip edit: comments and order
  kept; `host_vars/<host>.yml` is created where there is none) and print each key's SHA-256
  fingerprint to compare with the machine's console. A machine that does not answer is named
  and left alone (exit 1).
- a machine presenting other keys than recorded is never overwritten: it is reported CHANGED
  with both fingerprints (exit 1); `--replace HOST` (named hosts only) writes the new ones.
- `--dry-run` shows the diff and writes nothing.

Unknown site or host, and an unmanaged switch or a machine without management_address named,
are bad input: exit 2, nothing scanned or written.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = ("List which machines have SSH host keys recorded; --collect records them with ssh-keyscan (no prompts), "
        "printing fingerprints to compare with the console.")
TIMEOUT_S = 5
PARALLEL = 16
NEW_FILE_HEADER = "# {name}: host variables (ssh_host_keys recorded by `rackform ssh-keys`).\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--collect", nargs="*", metavar="HOST",
                        help="scan and record the keys of the HOSTs named, else of every machine without keys")
    parser.add_argument("--replace", nargs="+", default=[], metavar="HOST",
                        help="with --collect: overwrite these hosts' recorded keys when the machine presents others")
    parser.add_argument("--dry-run", action="store_true", help="show what would be written; write nothing")
    parser.add_argument("--timeout", type=int, default=TIMEOUT_S, metavar="S",
                        help=f"ssh-keyscan's timeout per connection (default {TIMEOUT_S})")
    parser.add_argument("--parallel", type=int, default=PARALLEL, metavar="N",
                        help=f"machines scanned at once (default {PARALLEL})")


@dataclass(slots=True)
class _Machine:
    node: object
    """The model's Host or Switch."""
    recorded: list[str]
    address: tuple[str, int] | None
    managed: bool


def run(args: argparse.Namespace) -> int:
    from rackform.day2.errors import refuse
    from rackform.model.source import BadInput
    from rackform.pipeline import load_and_check
    from rackform.render.known_hosts import host_key_checking, machine_host_keys
    from rackform.render.ssh_address import ssh_address, ssh_ports

    if args.timeout < 1 or args.parallel < 1:
        raise refuse(None, "--timeout" if args.timeout < 1 else "--parallel", "must be 1 or more")
    if args.replace and args.collect is None:
        raise refuse(None, "--replace", "replaces collected keys: use --collect --replace HOST ...")
    site, _warnings = load_and_check(args.site, args.root)
    errors: list = []
    ports = ssh_ports(site)
    machines = {node.name: _Machine(node, machine_host_keys(node, errors), ssh_address(node, ports),
                                    getattr(node, "os", None) != "unmanaged")
                for node in (*site.hosts.values(), *site.switches.values())}
    if errors:
        raise BadInput(errors)
    named = list(dict.fromkeys([*(args.collect or []), *args.replace]))
    for name in named:
        _check_named(site, machines, name)

    checking = "ON" if host_key_checking(site) else "OFF for this site (ansible_host_key_checking: false)"
    print(f"ssh-keys {site.name}: host key checking {checking}")
    if args.collect is None:
        return _report(site.name, machines)
    return _collect(args, site, machines, named)


def _check_named(site, machines: dict[str, _Machine], name: str) -> None:
    from rackform.day2.errors import refuse

    machine = machines.get(name)
    if machine is None:
        raise refuse(site.loc, "hosts", f"unknown host {name!r}; the site's machines are: {', '.join(machines)}")
    if not machine.managed:
        raise refuse(machine.node.loc, name, "an unmanaged switch: rackform does not reach it over SSH")
    if machine.address is None:
        raise refuse(machine.node.vars_loc or machine.node.loc, "management_address",
                     f"{name} has no management_address: no address to scan")


def _where(machine: _Machine) -> str:
    return f"{machine.address[0]}:{machine.address[1]}" if machine.address else "-"


def _report(site_name: str, machines: dict[str, _Machine]) -> int:
    from rackform.run.hostkeys import fingerprint

    width = max(len(name) for name in machines)
    reachable = [machine for machine in machines.values() if machine.managed]
    for name, machine in machines.items():
        if not machine.managed:
            state = "unmanaged switch (no SSH)"
        elif machine.recorded:
            state = f"{len(machine.recorded)} key(s) recorded"
        elif machine.address is None:
            state = "no keys; no management_address to scan"
        else:
            state = "no keys recorded"
        print(f"  {name:<{width}}  {_where(machine):<21}  {state}")
        for key in machine.recorded:
            print(f"  {'':<{width}}    {fingerprint(key)}")
    have = sum(1 for machine in reachable if machine.recorded)
    print(f"ssh-keys {site_name}: {have} of {len(reachable)} machine(s) have host keys recorded"
          + ("" if have == len(reachable) else f"; `rackform ssh-keys {site_name} --collect` records the rest"))
    return EXIT_OK


def _collect(args: argparse.Namespace, site, machines: dict[str, _Machine], named: list[str]) -> int:
    from rackform.day2 import files
    from rackform.run.hostkeys import Target, changed, fingerprint, scan

    if shutil.which("ssh-keyscan") is None:
        print("rackform: ssh-keys --collect needs ssh-keyscan (apt: openssh-client)", file=sys.stderr)
        return EXIT_FAILED
    chosen = named or [name for name, machine in machines.items()
                       if machine.managed and machine.address is not None and not machine.recorded]
    if not chosen:
        print(f"ssh-keys {site.name}: every machine has host keys recorded; nothing to collect")
        return EXIT_OK
    targets = [Target(name, *machines[name].address) for name in chosen]
    print(f"ssh-keys {site.name}: scanning {len(targets)} machine(s), {min(args.parallel, len(targets))} at a time")
    counts = {"recorded": 0, "replaced": 0, "unchanged": 0, "CHANGED": 0, "no answer": 0}
    changes: list[files.FileChange] = []
    for result in scan(targets, timeout_s=args.timeout, parallel=args.parallel):
        name, machine = result.target.name, machines[result.target.name]
        if result.error:
            counts["no answer"] += 1
            print(f"{name} {result.target}: no answer, left alone: {result.error}")
            continue
        if not machine.recorded:
            outcome = "recorded"
        elif not changed(machine.recorded, result.keys):
            counts["unchanged"] += 1
            extra = [fingerprint(key) for key in result.keys if key not in machine.recorded]
            print(f"{name} {result.target}: unchanged ({len(machine.recorded)} key(s) recorded)"
                  + (f"; it also presents {', '.join(extra)} (--replace {name} records all)" if extra else ""))
            continue
        elif name in args.replace:
            outcome = "replaced"
        else:
            counts["CHANGED"] += 1
            print(f"{name} {result.target}: CHANGED: it presents other keys than the inventory records; "
                  f"not written")
            _print_keys("recorded ", machine.recorded)
            _print_keys("presented", result.keys)
            print(f"    if the console shows the presented ones: rackform ssh-keys {site.name} --collect --replace {name}")
            continue
        counts[outcome] += 1
        change = _keys_change(args.root, site, machine, list(result.keys))
        changes.append(change)
        print(f"{name} {result.target}: {outcome} {len(result.keys)} key(s) in {change.path}")
        if outcome == "replaced":
            _print_keys("was", machine.recorded)
        _print_keys("now" if outcome == "replaced" else "", result.keys)
    if changes and args.dry_run:
        print(files.diff_text(changes), end="")
        print(f"ssh-keys {site.name}: dry run: {len(changes)} file(s) would change; nothing written")
    elif changes:
        files.check_on_copy(site.name, args.root, changes)
        files.write(args.root, changes)
        print(f"ssh-keys {site.name}: compare the fingerprints above with each machine's console "
              f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then render and commit inventories/{site.name}/")
    failed = counts["CHANGED"] + counts["no answer"]
    summary = ", ".join(f"{count} {what}" for what, count in counts.items() if count)
    print(f"ssh-keys {site.name}: {summary}: exit {EXIT_FAILED if failed else EXIT_OK}")
    return EXIT_FAILED if failed else EXIT_OK


def _print_keys(label: str, keys) -> None:
    from rackform.run.hostkeys import fingerprint

    for key in keys:
        print(f"    {label + ' ' if label else ''}{fingerprint(key)}")


# ---------------------------------------------------------------- the host_vars edit


def _keys_change(root: Path, site, machine: _Machine, keys: list[str]):
    """The FileChange that records `keys` as the machine's ssh_host_keys (round-trip edit)."""
    from ruamel.yaml.comments import CommentedMap

    from rackform.day2.files import FileChange
    from rackform.day2.yamledit import INDENT_STYLES, YamlFile
    from rackform.model.loader import site_paths

    inventory = site_paths(root, site.name)[2]
    document = _keys_file(inventory / "host_vars", machine)
    if document is None or document.data is None:  # no file yet, or one holding only comments
        path = document.path if document else inventory / "host_vars" / f"{machine.node.name}.yml"
        fresh = YamlFile(path, "", CommentedMap(), INDENT_STYLES[0], True)
        _set_keys(fresh.data, keys)
        if document is None:
            kept = NEW_FILE_HEADER.format(name=machine.node.name)
        else:
            kept = document.original.rstrip("\n") + "\n" if document.original.strip() else ""
        return FileChange(path.relative_to(root), document.original if document else None, kept + fresh.text())
    _set_keys(document.data, keys)
    return FileChange(document.path.relative_to(root), document.original, document.text())


def _keys_file(host_vars: Path, machine: _Machine):
    """The YAML file to edit: the one that records the keys now, else host_vars/<host>.yml
    (or .yaml); None when the machine has none (a new file)."""
    from rackform.day2.errors import refuse
    from rackform.day2.yamledit import YamlFile
    from rackform.render.known_hosts import HOST_KEYS_VARIABLE

    name = machine.node.name
    own = [host_vars / f"{name}{suffix}" for suffix in (".yml", ".yaml")]
    folder = host_vars / name
    inside = sorted(path for path in folder.rglob("*") if path.suffix in (".yml", ".yaml")) if folder.is_dir() else []
    if HOST_KEYS_VARIABLE in machine.node.user_vars:
        for path in (*own, *inside):
            if path.is_file():
                document = YamlFile.load(path)
                if isinstance(document.data, dict) and HOST_KEYS_VARIABLE in document.data:
                    return document
        where = machine.node.var_locs.get(HOST_KEYS_VARIABLE) or machine.node.vars_loc
        raise refuse(where, HOST_KEYS_VARIABLE, f"{name}'s keys are recorded here; ssh-keys edits only "
                                                f"host_vars/{name}.yml or host_vars/{name}/*.yml: move them there")
    existing = next((path for path in own if path.is_file()), None)
    return YamlFile.load(existing) if existing else None


def _set_keys(mapping, keys: list[str]) -> None:
    """Set ssh_host_keys to `keys`, a block list. An existing list is refilled in place, so
    the comment lines after it (which introduce the next key) stay where they are."""
    from ruamel.yaml.comments import CommentedSeq

    from rackform.day2.yamledit import insert_after, remove_at, set_key
    from rackform.render.known_hosts import HOST_KEYS_VARIABLE

    current = mapping.get(HOST_KEYS_VARIABLE)
    if not isinstance(current, CommentedSeq) or not current or current.fa.flow_style():
        set_key(mapping, HOST_KEYS_VARIABLE, CommentedSeq(keys))
        return
    old_count = len(current)
    for key in keys:
        insert_after(current, len(current) - 1, key)
    for _ in range(old_count):
        remove_at(current, 0)
