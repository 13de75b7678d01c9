"""The Pulumi engine for the controller (`pulumi up -s <site>`), built from Pulumi's own Go modules.

No registry this tool can rely on ships Pulumi's binaries (an air-gapped site has none either),
so `make pulumi` builds the engine the way the site mirror builds Kubernetes: each part from a
Go module of ours under sources/ holding only go.mod and go.sum, cached by version and digest
(`rackform.mirror.gobuild`), then installed into the venv's libexec/pulumi/, where the CLI finds
its plugins beside itself:

| file in .venv/libexec/pulumi | from | why this version |
|---|---|---|
| pulumi | github.com/pulumi/pulumi/pkg/v3 cmd/pulumi (sources/pulumi/) | the CLI and engine |
| pulumi-language-python | github.com/pulumi/pulumi/sdk/v3 python/cmd/pulumi-language-python (sources/pulumi-language-python/) | the last sdk/v3 that carries it; its own module is not served |
| pulumi-language-python-exec | sdk/v3 python/cmd/ at the pip SDK's version (sources/pulumi-python-scripts/) | the script that runs the program with the pip SDK |
| pulumi-resource-pulumi-python | sdk/v3 python/dist/ at the pip SDK's version | the dynamic-provider launcher |

The CLI drives the older language host through the engine's fallbacks for older hosts; that
host is not given the `virtualenv` option by the newer CLI and runs the `python3` it finds on
PATH. So `.venv/bin/pulumi` is a launcher that puts the venv's bin first on PATH and runs the
CLI: `.venv/bin/pulumi up -s lab` works without an activated venv. docs/pulumi.md has the
pairing and how to use one's own Pulumi installation instead.

    python -m rackform.mirror.pulumi_engine --install .venv/bin     # what `make pulumi` runs
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Callable
from pathlib import Path

from rackform.mirror import MirrorError, gobuild, run
from rackform.mirror.source import source_dir
from rackform.mirror.tools import install
from rackform.paths import SOURCES_DIR

CLI_VERSION = "3.274.1"
"""The Pulumi CLI (sources/pulumi/<it>/)."""
LANGUAGE_HOST_VERSION = "3.68.0"
"""The newest github.com/pulumi/pulumi/sdk/v3 that carries python/cmd/pulumi-language-python."""
SDK_MODULE = "github.com/pulumi/pulumi/sdk/v3"
VERSION_VARIABLE = f"{SDK_MODULE}/go/common/version.Version"
"""Where Pulumi's release builds stamp the version `pulumi version` prints (empty without it)."""
SCRIPTS = {"pulumi-language-python-exec": "python/cmd/pulumi-language-python-exec",
           "pulumi-resource-pulumi-python": "python/dist/pulumi-resource-pulumi-python"}
"""Plain files of the SDK module: the name they are installed as -> their path in the module."""


def cli_build(sources: Path = SOURCES_DIR) -> gobuild.GoBuild:
    return gobuild.GoBuild("pulumi", CLI_VERSION, source_dir("pulumi", CLI_VERSION, sources),
                           {"github.com/pulumi/pulumi/pkg/v3/cmd/pulumi": "pulumi"},
                           ("-s", "-w", f"-X {VERSION_VARIABLE}=v{CLI_VERSION}"))


def language_host_build(sources: Path = SOURCES_DIR) -> gobuild.GoBuild:
    return gobuild.GoBuild("pulumi-language-python", LANGUAGE_HOST_VERSION,
                           source_dir("pulumi-language-python", LANGUAGE_HOST_VERSION, sources),
                           {f"{SDK_MODULE}/python/cmd/pulumi-language-python": "pulumi-language-python"},
                           ("-s", "-w", f"-X {VERSION_VARIABLE}=v{LANGUAGE_HOST_VERSION}"))


def pip_sdk_version() -> str:
    """The version of the pulumi Python package installed beside rackform (requirements.lock pins it)."""
    try:
        return importlib.metadata.version("pulumi")
    except importlib.metadata.PackageNotFoundError:
        raise MirrorError("the pulumi Python package is not installed (pip install 'rackform[pulumi]')") from None


def sdk_scripts(sdk_version: str, sources: Path = SOURCES_DIR) -> dict[str, Path]:
    """The SDK's scripts at `sdk_version`, from Go's module cache, checked against our go.sum."""
    module_dir = source_dir("pulumi-python-scripts", sdk_version, sources)
    answer = run(["go", "mod", "download", "-json", SDK_MODULE], cwd=module_dir, extra_env={"GOFLAGS": "-mod=readonly"},
                 timeout_s=600)
    try:
        downloaded = Path(json.loads(answer.stdout)["Dir"])
    except (ValueError, KeyError) as error:
        raise MirrorError(f"go mod download {SDK_MODULE} in {module_dir}: no module folder in its answer ({error})") from None
    found = {name: downloaded / path for name, path in SCRIPTS.items()}
    for name, path in found.items():
        if not path.is_file():
            raise MirrorError(f"{SDK_MODULE}@v{sdk_version} has no {SCRIPTS[name]}")
    return found


LAUNCHER = """\
#!/bin/sh
# rackform's Pulumi engine (python -m rackform.mirror.pulumi_engine wrote this; docs/pulumi.md).
# The Python language host it carries runs the python3 it finds on PATH: this venv's, first.
bin=$(cd "$(dirname "$0")" && pwd)
PATH="$bin:$PATH" exec "$bin/../libexec/pulumi/pulumi" "$@"
"""


def engine_dir(bin_dir: Path) -> Path:
    """Where the engine's own files go: the venv's libexec/pulumi/ beside its bin/."""
    return bin_dir.parent / "libexec" / "pulumi"


def install_engine(bin_dir: Path, progress: Callable[[str], None] = print) -> dict[str, Path]:
    """Build (or take from the cache) every part of the engine, copy it into the venv's
    libexec/pulumi/ and write the `pulumi` launcher into `bin_dir`."""
    sdk_version = pip_sdk_version()
    sources: dict[str, Path] = {}
    for spec in (cli_build(), language_host_build()):
        built = gobuild.build(spec, progress)
        if not built.cached:
            progress(f"  {spec.component} {spec.version}: built in {built.seconds:.0f} s")
        sources |= built.binaries
    sources |= sdk_scripts(sdk_version)
    installed = {}
    for name, source in sources.items():
        installed[name] = engine_dir(bin_dir) / name
        install(source, installed[name])
    launcher = bin_dir / "pulumi"
    partial = launcher.with_name(".pulumi.installing")
    partial.write_text(LAUNCHER)
    partial.chmod(0o755)
    partial.replace(launcher)
    return installed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackform.mirror.pulumi_engine",
                                     description="Build the Pulumi engine from sources/ (cached) and install it.")
    parser.add_argument("--install", type=Path, required=True, metavar="DIR",
                        help="the venv's bin folder (.venv/bin): the `pulumi` launcher goes there, the engine "
                             "into ../libexec/pulumi/")
    args = parser.parse_args(argv)
    try:
        install_engine(args.install, lambda line: print(line, flush=True))
        version = run([args.install / "pulumi", "version"]).stdout.strip()
    except MirrorError as error:
        print(f"rackform pulumi: {error}", file=sys.stderr)
        return 1
    print(f"{args.install / 'pulumi'}: Pulumi {version} (Python host {LANGUAGE_HOST_VERSION}, "
          f"SDK scripts {pip_sdk_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
