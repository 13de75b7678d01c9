"""Command modules of the `rackform` CLI: each has `add_arguments(parser)` and `run(args) -> int`,
and `rackform.cli` wires them in."""
