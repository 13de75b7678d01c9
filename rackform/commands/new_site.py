"""`rackform new-site NAME --from SITE`: scaffold a second site from an existing one.

Writes topologies/sites/NAME.yaml (SITE's design with NAME's prefixes, gateways and API VIP)
and inventories/NAME/ (hosts.yml, a host_vars stub per host and managed switch with
addresses from NAME's prefixes, SITE's group_vars); rackform.site_scaffold says how. NAME is
a real site even when SITE is a lab: no `lab_only`, host key checking on.
Never overwrites: an existing site or inventory is refused. The result is validated before
the command returns; when it does not pass (a prefix too small, prefixes that overlap),
what was written is removed again, so bad input writes nothing.

Exit 0 when the new site was written and validates, 2 for bad input.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from ipaddress import IPv4Network
from pathlib import Path

EXIT_OK, EXIT_BAD_INPUT = 0, 2
HELP = ("Scaffold a new site from an existing one: its design and an inventory with addresses from the "
        "new site's prefixes (never overwrites).")
SITE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _prefix(text: str) -> IPv4Network:
    try:
        return IPv4Network(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"'{text}': {error}") from None


def _named_prefix(text: str) -> tuple[str, IPv4Network]:
    name, separator, prefix = text.partition("=")
    if not separator or not name:
        raise argparse.ArgumentTypeError(f"'{text}': expected NETWORK=PREFIX, e.g. compute=10.30.0.0/16")
    return name, _prefix(prefix)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="NAME", help="the new site's name (topologies/sites/NAME.yaml)")
    parser.add_argument("--from", dest="source", required=True, metavar="SITE",
                        help="the site to copy racks, blocks, cabling and settings from")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/ (default: .)")
    parser.add_argument("--management-prefix", type=_prefix, metavar="PREFIX",
                        help="the new site's management network (host and switch addresses, gateway, API VIP)")
    parser.add_argument("--oob-prefix", type=_prefix, metavar="PREFIX", help="the new site's out-of-band (BMC) network")
    parser.add_argument("--fabric-prefix", type=_named_prefix, action="append", default=[], metavar="NETWORK=PREFIX",
                        help="a fabric network's new prefix, e.g. compute=10.30.0.0/16 (repeatable; "
                             "default: the source's)")


def _refuse(name: str, message: str) -> int:
    print(f"rackform: new-site {name}: {message}; nothing was written", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    from rackform.model.loader import load_site
    from rackform.model.source import BadInput
    from rackform.site_scaffold import NewPrefixes, ScaffoldError, scaffold_files

    name, root = args.site, Path(args.root)
    if not SITE_NAME.match(name):
        return _refuse(name, "a site name is lowercase letters, digits and inner hyphens")
    existing = [path for path in (root / "topologies" / "sites" / f"{name}.yaml", root / "inventories" / name)
                if path.exists()]
    if existing:
        return _refuse(name, f"{existing[0]} already exists: new-site never overwrites a site")
    try:
        source = load_site(args.source, root)
    except BadInput as error:
        for problem in error.errors:
            print(problem, file=sys.stderr)
        return _refuse(name, f"the source site {args.source} does not load")
    prefixes = NewPrefixes(args.management_prefix, args.oob_prefix, dict(args.fabric_prefix))
    try:
        files = scaffold_files(source, name, prefixes)
    except ScaffoldError as error:
        return _refuse(name, str(error))
    _write(root, files)
    problems = _validate(name, root)
    if problems:
        _remove(root, name)
        for line in problems:
            print(line, file=sys.stderr)
        return _refuse(name, "the scaffolded site does not validate (above)")
    _report(name, source, root, files, prefixes)
    return EXIT_OK


def _write(root: Path, files: dict[Path, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _remove(root: Path, name: str) -> None:
    """Undo `_write`: both paths were refused if they existed, so they are ours."""
    (root / "topologies" / "sites" / f"{name}.yaml").unlink(missing_ok=True)
    shutil.rmtree(root / "inventories" / name, ignore_errors=True)


def _validate(name: str, root: Path) -> list[str]:
    """The error lines `rackform validate NAME` would print; none when it passes."""
    from rackform.model.source import BadInput
    from rackform.pipeline import DesignRejected, load_and_check

    try:
        load_and_check(name, root)
    except BadInput as error:
        return [str(problem) for problem in error.errors]
    except DesignRejected as rejected:
        return [str(finding) for finding in rejected.findings if finding.severity == "error"]
    return []


def _report(name: str, source, root: Path, files: dict[Path, str], prefixes) -> None:
    host_vars = sum(path.parent.name == "host_vars" for path in files)
    print(f"{name}: wrote {root / 'topologies' / 'sites' / f'{name}.yaml'} and {root / 'inventories' / name}/ "
          f"({host_vars} host_vars stubs), scaffolded from {source.name}")
    for network in source.networks.values():
        if network.purpose in ("compute_fabric", "storage_fabric") and network.name not in prefixes.fabric:
            print(f"{name}: fabric network {network.name} keeps {source.name}'s prefix {network.prefix} "
                  f"(--fabric-prefix {network.name}=PREFIX to change it)")
    for leftover in (root / "topologies" / "platform" / f"{source.name}.yaml", root / f"Pulumi.{source.name}.yaml"):
        if leftover.exists():
            print(f"{name}: not copied: {leftover.relative_to(root)} (site-specific; copy it if {name} wants the same)")
    if source.lab_only:
        print(f"{name}: a real site, not lab-only like {source.name}: host key checking is on (what turned it off "
              f"was not copied); once the machines answer, `rackform ssh-keys {name} --collect` records their keys")
    print(f"{name}: fill in the serials and MACs marked TO FILL IN in inventories/{name}/host_vars/, "
          f"then `rackform validate {name}`")
