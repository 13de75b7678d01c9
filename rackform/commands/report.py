"""How every command reports bad input, a rejected design and warnings: `file:line: key: message`
on stderr (or the same as JSON), never a traceback; exit 2 for bad input.

Shared by the CLI's own handlers (rackform.cli) and the commands that report it themselves
(`validate --all`, one report per site), so both say it the same way and no command imports
the CLI that imports the commands.
"""

from __future__ import annotations

import json
import sys

from rackform.checks.findings import Finding
from rackform.model.source import BadInput
from rackform.pipeline import DesignRejected

EXIT_BAD_INPUT = 2


def report_bad_input(exc: BadInput, *, as_json: bool, site: str) -> int:
    if as_json:
        errors = [
            {"file": e.loc.path, "line": e.loc.line, "key": e.key, "message": e.message, "severity": "error", "check": "load"}
            for e in exc.errors
        ]
        print(json.dumps({"site": site, "ok": False, "errors": errors, "warnings": []}, indent=2))
    for error in exc.errors:
        print(error, file=sys.stderr)
    where = f"{site}: " if site else ""
    print(f"rackform: {where}{len(exc.errors)} error(s) in the input; nothing was changed", file=sys.stderr)
    return EXIT_BAD_INPUT


def report_rejected(exc: DesignRejected, *, as_json: bool, site: str) -> int:
    errors = [f for f in exc.findings if f.severity == "error"]
    warnings = [f for f in exc.findings if f.severity == "warning"]
    if as_json:
        print(json.dumps(findings_json(site, errors, warnings), indent=2))
    for finding in exc.findings:
        print(finding, file=sys.stderr)
    print(
        f"rackform: {site}: {len(errors)} error(s), {len(warnings)} warning(s) in the design; nothing was changed",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


def findings_json(site: str, errors: list[Finding], warnings: list[Finding], summary: dict | None = None) -> dict:
    data = {
        "site": site,
        "ok": not errors,
        "errors": [f.as_dict() for f in errors],
        "warnings": [f.as_dict() for f in warnings],
    }
    if summary is not None:
        data["summary"] = summary
    return data


def print_warnings(warnings: list[Finding]) -> None:
    for finding in warnings:
        print(finding, file=sys.stderr)
