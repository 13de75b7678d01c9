"""promtool, built from Prometheus' own Go module, to check the alert rules rackform ships.

sources/prometheus/<version>/ is a Go module of ours holding only go.mod and go.sum, with one
`tool github.com/prometheus/prometheus/cmd/promtool` line; rackform.mirror.gobuild builds it
and keeps the binary in its cache (by version and a digest of go.mod, go.sum and the Go
toolchain), so only the first call on a machine compiles. `make promtool` does that before
the tests (`python -m rackform.k8s.promtool --link .venv/bin/promtool`: prints the cached
binary's path, links it into the venv).

Prometheus 3.x publishes its module as v0.3MM.P (v0.316.0 is Prometheus 3.16.0); the folder
is named after the release.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rackform.mirror import MirrorError, gobuild
from rackform.mirror.source import source_dir
from rackform.paths import SOURCES_DIR

PROMETHEUS_VERSION = "3.16.0"
"""The Prometheus release promtool comes from (module github.com/prometheus/prometheus v0.316.0)."""
PROMTOOL_PACKAGE = "github.com/prometheus/prometheus/cmd/promtool"


def spec(sources: Path = SOURCES_DIR) -> gobuild.GoBuild:
    # The version `promtool --version` reports, where upstream's build (promu) stamps it.
    ldflags = ("-s", "-w", f"-X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}")
    return gobuild.GoBuild("prometheus", PROMETHEUS_VERSION, source_dir("prometheus", PROMETHEUS_VERSION, sources),
                           {PROMTOOL_PACKAGE: "promtool"}, ldflags)


def promtool(progress: Callable[[str], None] = print, cache_dir: Path = gobuild.CACHE_DIR) -> Path:
    """The promtool binary: from the Go build cache, or built now (minutes, once per machine)."""
    return gobuild.build(spec(), progress, cache_dir).binaries["promtool"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackform.k8s.promtool",
                                     description="Build promtool from sources/prometheus (cached); print its path.")
    parser.add_argument("--link", type=Path, metavar="PATH", help="also link it there (.venv/bin/promtool)")
    args = parser.parse_args(argv)
    try:
        built = gobuild.build(spec(), lambda line: print(line, file=sys.stderr, flush=True))
    except MirrorError as error:
        print(f"rackform promtool: {error}", file=sys.stderr)
        return 1
    binary = built.binaries["promtool"]
    if not built.cached:
        print(f"  promtool {PROMETHEUS_VERSION}: built in {built.seconds:.0f} s", file=sys.stderr)
    if args.link:
        if args.link.is_symlink() or args.link.exists():
            args.link.unlink()
        args.link.parent.mkdir(parents=True, exist_ok=True)
        args.link.symlink_to(binary)
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
