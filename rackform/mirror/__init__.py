"""The site mirror's bundle: every package and image a site installs, with its version and digest.

Most on-premises AI sites are air-gapped or behind a proxy, so a site installs Kubernetes
from a mirror of its own (docs/mirror.md). `rackform mirror build` fills a bundle on the
controller; the `site_mirror` role serves it from a machine of the site.

A bundle is a folder (`bundle.BUNDLES_DIR/kubernetes-<version>/`):

    manifest.json       every artifact: kind, name, version or tag, path, digest, source
    apt/                a flat apt repository (Packages, Packages.gz, Release, the .debs)
    images/<name>_<tag> one OCI image layout per image
    charts/             a Helm chart repository: <chart>-<version>.tgz and index.yaml (Kueue's)

It is filled one of two ways, into the same format:
- from source (`rackform.mirror.source`): Kubernetes, etcd, CoreDNS, the CNI plugins,
  kube-router and Kueue built from their Go modules at the versions sources/ pins (go.mod, go.sum),
  packaged as .debs (dpkg-deb), OCI images (umoci) and Kueue's chart (`rackform.mirror.charts`);
  builds are cached by version and digest under `cache.CACHE_DIR`, so a second build
  builds nothing;
- from upstream on a connected machine (`rackform.mirror.upstream`): the same artifacts
  copied from the upstream package repository and registry, checked against their indexes
  (Kueue is carried by a build from source only).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rackform.installed_tools import find_tool
from rackform.process_environment import tool_environment


class MirrorError(RuntimeError):
    """A bundle could not be built or filled; the message says what and why."""


def run(argv: Sequence[str | Path], *, cwd: Path | None = None, extra_env: Mapping[str, str] | None = None,
        timeout_s: float | None = 3600) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise MirrorError with its last lines of output. The program is
    looked for beside rackform first (the venv's bin, where the set-up links a Go toolchain it
    fetched), then on PATH. Its environment is its profile's in rackform.process_environment
    (by the program's name: `go` gets GOPROXY, GOFLAGS ..., `skopeo` REGISTRY_AUTH_FILE ...),
    then `extra_env`."""
    args = [str(arg) for arg in argv]
    args[0] = find_tool(args[0]) or args[0]
    env = tool_environment(Path(args[0]).name, extra_env)
    try:
        result = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout_s)
    except FileNotFoundError as error:
        raise MirrorError(f"{args[0]}: not installed ({error})") from error
    except subprocess.TimeoutExpired as error:
        raise MirrorError(f"`{' '.join(args)}` did not finish within {timeout_s} s") from error
    if result.returncode != 0:
        detail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise MirrorError(f"`{' '.join(args)}` failed (exit {result.returncode}):\n{detail}")
    return result
