"""`rackform mirror build|show|sign`: fill, inspect and sign the site mirror's bundle (docs/mirror.md).

    rackform mirror build lab                       # the release lab pins, built from source here
    rackform mirror build --kubernetes 1.36.1       # another release the matrix carries
    rackform mirror build lab --from upstream       # copied from Kubernetes' repository and registries
    rackform mirror show lab --verify               # every artifact, version and digest; re-checked
    rackform mirror sign lab                        # lab's mirror keys: the apt repository signed, the registry's TLS

`sign` is what a deploy does before a stage serves the mirror; by itself it is for a playbook
run by hand (ansible-playbook os.yml), whose site_mirror role refuses an unsigned bundle and
reads the registry's certificate and push credential from the vault file it names.

The release must be one `kubernetes.carried` in topologies/versions.yaml lists (what sources/
pins); anything else is bad input (exit 2) and nothing is built. A bundle whose inputs have
not changed is left alone and the command says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.mirror.bundle import BUNDLES_DIR

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = ("Fill the site mirror's bundle (Kubernetes packages and images, with digests), show what it holds, "
        "or sign its apt repository with the site's key.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="mirror_command", required=True, metavar="ACTION")
    build = actions.add_parser("build", help="fill the bundle of a Kubernetes release, from source or upstream",
                               description="Fill the bundle of a Kubernetes release: from source (default: its Go "
                                           "modules under sources/, cached by version and digest) or from upstream.")
    show = actions.add_parser("show", help="list a bundle's artifacts with versions and digests",
                              description="List a bundle's artifacts with their versions and digests.")
    sign = actions.add_parser("sign", help="make or keep the site's mirror keys: the bundle's apt repository signed, "
                                           "the registry's TLS and push credential",
                              description="Sign the apt repository of the bundle the site's mirror serves with the "
                                          "site's own key, and make or keep the registry's CA, certificate and push "
                                          "credential, all kept in the site's vault (made the first time): what a "
                                          "deploy does before a stage uses the mirror. Prints what a playbook run by "
                                          "hand needs to read the mirror host's vault file.")
    sign.add_argument("site", metavar="SITE", help="site whose key signs, and whose kubernetes.version picks the release")
    for sub in (build, show):
        sub.add_argument("site", metavar="SITE", nargs="?", help="site whose kubernetes.version picks the release")
    for sub in (build, show, sign):
        sub.add_argument("--kubernetes", metavar="VERSION", help="the release (default: the site's, else the matrix's)")
        sub.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
        sub.add_argument("--bundles", type=Path, default=BUNDLES_DIR, metavar="DIR",
                         help=f"where bundles are kept (default: {BUNDLES_DIR})")
    build.add_argument("--from", dest="origin", choices=("source", "upstream"), default="source",
                       help="build here from sources/ (default), or copy from upstream on a connected machine")
    build.add_argument("--upstream-apt", metavar="URL",
                       help="with --from upstream: the flat apt repository of the release's minor (default: "
                            "Kubernetes' package repository)")
    build.add_argument("--upstream-registry", metavar="HOST[:PORT]",
                       help="with --from upstream: take every image from this registry (same repository paths)")
    build.add_argument("--plain-http", action="store_true",
                       help="with --upstream-registry: it speaks HTTP (a stand-in or a proxy on a trusted network)")
    show.add_argument("--verify", action="store_true", help="re-check every file's digest against the manifest")


def run(args: argparse.Namespace) -> int:
    from rackform.mirror import MirrorError
    from rackform.mirror.bundle import bundle_path, release_pins

    version = args.kubernetes
    if version is None and args.site is not None:
        version = _pinned_release(args.site, args.root)
    pins = release_pins(args.root, version=version)  # BadInput: exit 2 before anything is built
    bundle = bundle_path(pins.kubernetes, args.bundles)
    try:
        if args.mirror_command == "build":
            return _build(args, pins, bundle)
        if args.mirror_command == "sign":
            return _sign(args, pins.kubernetes, bundle)
        return _show(args, bundle)
    except MirrorError as error:
        print(f"rackform mirror: {error}", file=sys.stderr)
        return EXIT_FAILED


def _pinned_release(site_name: str, root: Path) -> str | None:
    """The Kubernetes release the site pins, once its design passes the checks (a rejected
    design is bad input, exit 2, and nothing is built)."""
    from rackform.pipeline import load_and_check

    site, _warnings = load_and_check(site_name, root)
    return site.kubernetes.version if site.kubernetes else None


def _build(args: argparse.Namespace, pins, bundle: Path) -> int:
    from rackform.mirror import source, upstream
    from rackform.model.source import BadInput, SourceError, Loc

    if args.origin == "source" and (args.upstream_apt or args.upstream_registry):
        raise BadInput([SourceError(Loc("<command line>", 0), "--upstream-apt/--upstream-registry",
                                    "only with --from upstream")])
    missing = source.pins_environment_check()
    if args.origin == "source" and missing:
        print(f"rackform mirror: a build from source needs {', '.join(missing)} on this machine (docs/mirror.md)",
              file=sys.stderr)
        return EXIT_FAILED
    progress = lambda line: print(line, flush=True)  # noqa: E731
    if args.origin == "source":
        report = source.fill(pins, bundle, progress)
    else:
        report = upstream.fill(pins, bundle, upstream.Upstream.for_release(
            pins, args.upstream_apt, args.upstream_registry, args.plain_http), progress)
    _summary(report)
    return EXIT_OK


def _sign(args: argparse.Namespace, version: str, bundle: Path) -> int:
    from rackform.k8s.site_mirror import mirror_address
    from rackform.mirror import MirrorError
    from rackform.mirror.apt_signing import SIGNED_FILES
    from rackform.mirror.site_keys import apt_key_file, ensure_apt_key, prepare_apt, prepare_registry, registry_ca_file
    from rackform.pipeline import load_and_check
    from rackform.secrets import SecretsError, SiteVault

    site, _warnings = load_and_check(args.site, args.root)
    if site.mirror is None or site.mirror.host is None or mirror_address(site) is None:
        raise MirrorError(f"site {site.name} has no mirror host of its own (mirror.host): rackform serves no mirror "
                          "for it, so it keeps no keys for one")
    if not (bundle / "apt" / "Release").is_file():
        raise MirrorError(f"{bundle}/apt/Release: no such file: build the bundle first with "
                          f"`rackform mirror build {args.site}`")
    try:
        vault = SiteVault(args.site)
        signatures = prepare_apt(vault, bundle, version)
        fingerprint = ensure_apt_key(vault).fingerprint
        environment = prepare_registry(vault, str(mirror_address(site)), (site.mirror.host,))
    except SecretsError as error:
        print(f"rackform mirror: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"bundle {bundle}: apt repository signed with {args.site}'s key {fingerprint} "
          f"({apt_key_file(args.site)}): {', '.join(str(signatures / name) for name in SIGNED_FILES)}")
    print(f"registry: the site's CA {registry_ca_file(args.site)}; for a playbook run by hand:")
    print(" ".join(f"{name}={value}" for name, value in environment.items()))
    return EXIT_OK


def _summary(report) -> None:
    artifacts = report.manifest.artifacts
    size_mib = sum(p.stat().st_size for p in report.bundle.rglob("*") if p.is_file()) / (1 << 20)
    kinds = ", ".join(f"{sum(a.kind == kind for a in artifacts)} {kind}s" for kind in ("deb", "image", "chart")
                      if any(a.kind == kind for a in artifacts))
    if report.unchanged:
        print(f"bundle {report.bundle}: unchanged (its inputs are the same): {kinds}, {size_mib:.0f} MiB")
        return
    built = f"built {', '.join(report.built)}" if report.built else "nothing built"
    cached = f"; from the cache: {', '.join(report.cached)}" if report.cached else ""
    print(f"bundle {report.bundle}: Kubernetes {report.manifest.kubernetes} from {report.manifest.filled_from}: "
          f"{kinds}, {size_mib:.0f} MiB in {report.seconds:.0f} s ({built}{cached})")


def _show(args: argparse.Namespace, bundle: Path) -> int:
    from rackform.mirror.manifest import read, verify

    manifest = read(bundle)
    print(f"bundle {bundle}: Kubernetes {manifest.kubernetes}, filled from {manifest.filled_from}")
    for artifact in manifest.artifacts:
        print(f"  {artifact.kind:<5} {artifact.name:<28} {artifact.version:<24} {artifact.digest[:19]}  "
              f"{artifact.source}")
    if not args.verify:
        return EXIT_OK
    problems = verify(bundle, manifest)
    for problem in problems:
        print(f"  MISMATCH {problem}")
    print(f"{len(manifest.artifacts)} artifacts, "
          + ("every digest matches" if not problems else f"{len(problems)} do not match"))
    return EXIT_FAILED if problems else EXIT_OK
