"""Commands the controller itself runs, built from sources/ like the bundle's binaries: `helm`,
which the platform stage calls (`rackform.run.platform_apply`) from PATH.

    python -m rackform.mirror.tools --install .venv/bin/helm     # what `make tools` runs

The binary is built once per version and inputs into the Go build cache (`gobuild.CACHE_DIR`)
and copied where asked; a second run only copies.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

from rackform.mirror import MirrorError, gobuild, run
from rackform.mirror.source import source_dir
from rackform.paths import SOURCES_DIR

HELM_VERSION = "3.22.0"
"""The Helm client the controller uses (sources/helm/<it>/)."""
HELM_MODULE = "helm.sh/helm/v3"


def helm_build(version: str = HELM_VERSION, sources: Path = SOURCES_DIR) -> gobuild.GoBuild:
    """helm as upstream's Makefile builds it: version stamped, and the Kubernetes version helm assumes
    without a cluster (`helm template`'s .Capabilities) taken from the k8s.io/client-go it is built with."""
    module_dir = source_dir("helm", version, sources)
    found = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.\d+", (module_dir / "go.mod").read_text(), re.MULTILINE)
    if found is None:
        raise MirrorError(f"{module_dir / 'go.mod'}: requires no k8s.io/client-go v0.x (helm's Kubernetes version)")
    kube = {"k8sVersionMajor": "1", "k8sVersionMinor": found.group(1)}
    ldflags = ["-s", "-w", f"-X {HELM_MODULE}/internal/version.version=v{version}",
               f"-X {HELM_MODULE}/internal/version.gitTreeState=clean"]
    ldflags += [f"-X {HELM_MODULE}/pkg/{package}.{name}={value}"
                for package in ("lint/rules", "chartutil") for name, value in kube.items()]
    return gobuild.GoBuild("helm", version, module_dir, {f"{HELM_MODULE}/cmd/helm": "helm"}, tuple(ldflags))


def install(binary: Path, target: Path) -> None:
    """A copy of `binary` at `target`, replaced in one rename. A copy, not a symlink: its time is
    the install's, so make sees it newer than what it was built from (a link would show the cache
    entry's time), and it keeps working if the cache is cleared."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.installing")
    shutil.copyfile(binary, partial)
    partial.chmod(0o755)
    partial.replace(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackform.mirror.tools",
                                     description="Build helm from sources/helm (cached) and install it.")
    parser.add_argument("--install", type=Path, required=True, metavar="PATH",
                        help="where to put helm (.venv/bin/helm): a copy of the cached binary")
    args = parser.parse_args(argv)
    try:
        built = gobuild.build(helm_build(), lambda line: print(line, flush=True))
        binary = built.binaries["helm"]
        if not built.cached:
            print(f"  helm {HELM_VERSION}: built in {built.seconds:.0f} s")
        install(binary, args.install)
        print(f"{args.install}: helm {run([args.install, 'version', '--short']).stdout.strip()}, from {binary}")
    except MirrorError as error:
        print(f"rackform tools: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
