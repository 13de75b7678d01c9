"""The gates a site passes before a rollout's next wave starts (topologies/rollout.yaml `gates:`).

Each gate is `(site, root, output) -> (passed, detail)`:
- verify: the testinfra host checks of every stage (`rackform verify`) pass;
- fabric-check: the live fabric check (`rackform fabric check`) finds no mismatch between
  the two ends of any link, nor between LLDP and the cabling.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TextIO

Gate = Callable[[str, Path, TextIO], tuple[bool, str]]


def verify_gate(site: str, root: Path, out: TextIO) -> tuple[bool, str]:
    from rackform.model.loader import load_site
    from rackform.run.environment import stage_environment
    from rackform.run.verify import VerifyError, verify

    envvars = stage_environment(load_site(site, root), set()).envvars
    try:
        report = verify(site, root, envvars=envvars, progress=lambda line: print(line, file=out))
    except VerifyError as error:
        return False, str(error)
    print("\n".join(report.lines()), file=out)
    failed_hosts = sorted({failure.host for failure in report.failures}) if report.failures else []
    return report.ok, "" if report.ok else f"{len(report.failures)} check(s) failed on {', '.join(failed_hosts)}"


def fabric_gate(site: str, root: Path, out: TextIO) -> tuple[bool, str]:
    from rackform.fabric.check_report import text_report
    from rackform.fabric.live_report import live_fabric_report
    from rackform.model.loader import load_site

    from rackform.fabric.live import LiveError

    try:
        report = live_fabric_report(load_site(site, root))
    except LiveError as error:
        return False, str(error)
    print(text_report(report), file=out)
    return report.ok, "" if report.ok else f"{report.links_with_mismatches()} link(s) disagree"


GATE_CHECKS: dict[str, Gate] = {"verify": verify_gate, "fabric-check": fabric_gate}
