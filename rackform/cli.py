"""The `rackform` command line: the same pipeline the Pulumi program drives.

Exit status: 0 success, 1 a run failed, 2 bad input (the design or the command line);
bad input is reported as `file:line: key: message`, never as a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rackform import __version__
from rackform.commands.report import print_warnings, report_bad_input, report_rejected
from rackform.lab import LabError  # light: the lab's error type and command runner, nothing of the lab itself
from rackform.model.site import Site
from rackform.model.source import BadInput
from rackform.pipeline import STAGE_NAMES, DesignRejected, build_dir, load_and_check

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a writer killed by SIGPIPE: the reader left (`... | head`)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rackform",
        description="From cabled racks to a GPU Kubernetes cluster, as code.",
        epilog="Sites live in topologies/sites/<site>.yaml with their hosts in inventories/<site>/.",
    )
    parser.add_argument("--version", action="version", version=f"rackform {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
        sub.add_argument("--root", type=Path, default=Path("."), help="repository root holding topologies/ and inventories/ (default: .)")
        return sub

    render = add("render", "Check a site and write its standalone Ansible project to build/SITE/.")
    render.add_argument("--out", type=Path, help="output folder (default: ROOT/build/SITE)")
    render.set_defaults(func=cmd_render)

    diagram = add("diagram", "Draw an SVG rack elevation per rack (U positions, blocks, power against budget).")
    diagram.add_argument("--out", type=Path, help="output folder (default: ROOT/build/SITE/diagrams)")
    diagram.set_defaults(func=cmd_diagram)

    verify = add("verify", "Run the testinfra host checks (tests/infra) against the rendered project's inventory.")
    verify.add_argument("--junit-xml", type=Path, metavar="PATH", help="also write a JUnit XML report (for CI)")
    verify.add_argument("--limit", metavar="HOSTS", help="groups, host names or wildcards, comma separated")
    verify.add_argument("--stage", dest="stages", metavar="STAGE", nargs="+", action="extend", choices=STAGE_NAMES,
                        help="only the checks of these stages (default: all)")
    verify.add_argument("-k", dest="checks", metavar="EXPR", help="pytest -k expression picking checks by name")
    verify.add_argument("--private-key", type=Path, metavar="PATH", help="SSH key (default as for deploy)")
    verify.set_defaults(func=cmd_verify)

    _add_lab(commands)
    _add_command_modules(commands)
    return parser


def _add_command_modules(commands: argparse._SubParsersAction) -> None:
    """Commands that live in their own modules: `add_arguments(parser)` and `run(args) -> int`."""
    from rackform.commands import bmc, deploy, discover, init, plan, rollout, validate
    from rackform.commands import fabric as fabric_check
    from rackform.fabric import apply_cli as fabric_apply
    from rackform import secrets_cli

    def add(container, name: str, module, help_text: str) -> None:
        sub = container.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)

    add(commands, "init", init, init.HELP)
    add(commands, "validate", validate, validate.HELP)
    add(commands, "deploy", deploy, deploy.HELP)
    add(commands, "plan", plan, plan.HELP)
    add(commands, "gitops", gitops := __import__("rackform.commands.gitops", fromlist=["run"]), gitops.HELP)
    add(commands, "rollout", rollout, rollout.HELP)
    add(commands, "bmc", bmc, "Talk to the site's BMCs over IPMI: status (power, watts, firmware) and power actions.")
    add(commands, "discover", discover, "Scan an out-of-band range for BMCs not in the inventory and add them.")
    add(commands, "new-site", new_site := __import__("rackform.commands.new_site", fromlist=["run"]), new_site.HELP)
    add(commands, "node", __import__("rackform.commands.node", fromlist=["run"]), "Add, replace or retire a server (day 2).")
    add(commands, "maintain", maintain := __import__("rackform.commands.maintain", fromlist=["run"]), maintain.HELP)
    add(commands, "upgrade", upgrade := __import__("rackform.commands.upgrade", fromlist=["run"]), upgrade.HELP)
    add(commands, "scale", scale := __import__("rackform.commands.scale", fromlist=["run"]), scale.HELP)
    add(commands, "certs", certs := __import__("rackform.commands.certs", fromlist=["run"]), certs.HELP)
    add(commands, "backup", backup := __import__("rackform.commands.backup", fromlist=["run"]), backup.HELP)
    add(commands, "restore", restore := __import__("rackform.commands.restore", fromlist=["run"]), restore.HELP)
    add(commands, "console", console := __import__("rackform.commands.console", fromlist=["run"]), console.HELP)
    add(commands, "ssh-keys", ssh_keys := __import__("rackform.commands.ssh_keys", fromlist=["run"]), ssh_keys.HELP)
    add(commands, "mirror", mirror := __import__("rackform.commands.mirror", fromlist=["run"]), mirror.HELP)
    add(commands, "kubeconfig", kubeconfig := __import__("rackform.commands.kubeconfig", fromlist=["run"]),
        kubeconfig.HELP)
    add(commands, "secrets", secrets_cli, "The site's vault: BMC passwords and the cluster's encryption keys; "
                                         "rotate them, forget old ones.")
    fabric_help = "The RoCE fabric: push switch configurations, check that both ends of every link agree."
    fabric = commands.add_parser("fabric", help=fabric_help, description=fabric_help)
    actions = fabric.add_subparsers(dest="fabric_command", required=True, metavar="ACTION")
    add(actions, "check", fabric_check, fabric_check.HELP)
    add(actions, "apply", fabric_apply, "Show each switch's configuration diff and apply it (Onyx over netmiko, "
        "Cumulus files over SSH); --dry-run changes nothing.")


def _add_lab(commands: argparse._SubParsersAction) -> None:
    lab_help = "The local lab: a whole site as systemd-nspawn containers on this machine (needs root; docs/lab.md)."
    lab = commands.add_parser("lab", help=lab_help, description=lab_help)
    actions = lab.add_subparsers(dest="lab_command", required=True, metavar="ACTION")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
        return sub

    up = add("up", "Bring the site up: one container per server and Cumulus switch, cabled as designed. "
                   "Exit 1 if a node does not come up.")
    up.add_argument("--root", type=Path, default=Path("."), help="repository root holding topologies/ and inventories/ (default: .)")
    up.set_defaults(func=cmd_lab_up)
    add("down", "Remove the site's lab: nodes, disks, namespaces, bridges, state.").set_defaults(func=cmd_lab_down)
    add("status", "Show each node: powered, answering SSH, systemd's state. "
                  "Exit 0 when every node is ready, 1 otherwise.").set_defaults(func=cmd_lab_status)


def main(argv: list[str] | None = None) -> int:
    from rackform.run.interrupt import owned_signals

    args = _parser().parse_args(argv)
    try:
        with owned_signals():  # SIGTERM and SIGINT for the whole command (rackform.run.interrupt)
            code = args.func(args)
            sys.stdout.flush()  # here, not at exit: a reader that left is caught below
            return code
    except LabError as exc:
        print(f"rackform: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BadInput as exc:
        return report_bad_input(exc, as_json=getattr(args, "json", False), site=args.site)
    except DesignRejected as exc:
        return report_rejected(exc, as_json=getattr(args, "json", False), site=args.site)
    except KeyboardInterrupt:
        print("rackform: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader closed the pipe (`rackform plan --all | head`): stop quietly. stdout
        # goes to /dev/null so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


# ---------------------------------------------------------------- commands


def cmd_render(args: argparse.Namespace) -> int:
    from rackform.render.project import render_project

    site, warnings = load_and_check(args.site, args.root)
    print_warnings(warnings)
    out_dir = args.out or build_dir(args.root, site.name)
    result = render_project(site, out_dir)
    total = result.unchanged + len(result.added) + len(result.modified)
    print(
        f"{site.name}: rendered {total} files to {out_dir} "
        f"({len(result.added)} added, {len(result.modified)} changed, {len(result.removed)} removed)"
    )
    if not result.changed:
        print(f"{site.name}: the project was already up to date")
    return EXIT_OK


def cmd_diagram(args: argparse.Namespace) -> int:
    from rackform.render.diagram import site_svgs

    site, warnings = load_and_check(args.site, args.root)
    print_warnings(warnings)
    # The same files `render` puts in the project's diagrams/ folder.
    out_dir = args.out or build_dir(args.root, site.name) / "diagrams"
    out_dir.mkdir(parents=True, exist_ok=True)
    for file_name, svg in site_svgs(site).items():
        path = out_dir / file_name
        path.write_text(svg, encoding="utf-8")
        print(f"{site.name}: wrote {path}")
    return EXIT_OK


def _connection_env(site: Site, private_key: Path | None) -> dict[str, str]:
    """How the checks log in: the same SSH key the stages use (rackform.run.environment)."""
    from rackform.run.environment import stage_environment

    return stage_environment(site, set(), private_key=private_key, say=print).envvars


def cmd_verify(args: argparse.Namespace) -> int:
    from rackform.run.verify import VerifyError, verify

    site, _warnings = load_and_check(args.site, args.root)
    try:
        report = verify(
            site.name, args.root, junit_xml=args.junit_xml, hosts=args.limit, stages=args.stages,
            checks=args.checks, envvars=_connection_env(site, args.private_key), progress=print,
        )
    except VerifyError as exc:
        print(f"rackform: {site.name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("\n".join(report.lines()))
    return report.exit_code


def cmd_lab_up(args: argparse.Namespace) -> int:
    from rackform.lab import lab

    status = lab.up(args.site, args.root, progress=print)
    if status.up:
        return EXIT_OK
    print("\n".join(status.lines()), file=sys.stderr)
    print(f"rackform: lab {args.site}: not every node came up", file=sys.stderr)
    return EXIT_FAILED


def cmd_lab_down(args: argparse.Namespace) -> int:
    from rackform.lab import lab

    lab.down(args.site, progress=print)
    return EXIT_OK


def cmd_lab_status(args: argparse.Namespace) -> int:
    from rackform.lab import lab

    status = lab.status(args.site)
    print("\n".join(status.lines()))
    return EXIT_OK if status.up else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
