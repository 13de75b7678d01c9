"""Preflight checks: every one runs on the loaded model before anything touches hardware.

A plain package: nothing is imported here (Python runs this file before any module of the
package, so anything imported here would load with each of them, and a module imported here
would import the package back). Callers import from the module that does the work:

- `runner.py`: `run_checks(site)` runs every check in report order;
- `findings.py`: `Finding`, what a check reports;
- `registry.py`: `@check`, which registers a check in `REGISTRY`;
- one module per family of checks (`racks.py`, `addresses.py`, ...), each a set of plain
  functions `check(site) -> Iterable[Finding]` registered with `@check`.
"""
