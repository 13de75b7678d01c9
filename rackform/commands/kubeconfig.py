"""`rackform kubeconfig SITE --tenant TENANT --user NAME`: a tenant admin's own kubeconfig.

A client certificate for NAME, valid --hours (1 to 24, default 8), signed by the cluster
through the CSR API with the site's admin kubeconfig (rackform.run.tenant_credentials), in a
kubeconfig whose context is the tenant's namespace: build/SITE/artifacts/kubeconfig-TENANT-NAME
by default, mode 0600. Only the admins the platform file names for the tenant
(topologies/platform/SITE.yaml `tenants[].admins`) get one: the RoleBinding in its namespace
names them and nobody else. Refused, with nothing changed: a tenant or user not in that file,
hours out of range (exit 2); a site with no cluster yet or no kubectl (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rackform.run.tenant_credentials import HOURS_DEFAULT, HOURS_MAX, HOURS_MIN

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
HELP = ("Write a tenant admin's own kubeconfig: a client certificate valid a few hours, signed through the "
        "cluster's CSR API, in the tenant's namespace.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root (default: .)")
    parser.add_argument("--tenant", required=True, metavar="TENANT", help="a tenant of topologies/platform/SITE.yaml")
    parser.add_argument("--user", required=True, metavar="NAME", help="one of that tenant's admins")
    parser.add_argument("--hours", type=int, default=HOURS_DEFAULT, metavar="N",
                        help=f"how long the certificate is valid, {HOURS_MIN} to {HOURS_MAX} (default: {HOURS_DEFAULT}); "
                             f"it cannot be revoked before then")
    parser.add_argument("--output", type=Path, metavar="PATH",
                        help="where to write it (default: ROOT/build/SITE/artifacts/kubeconfig-TENANT-NAME)")


def run(args: argparse.Namespace) -> int:
    from rackform.day2.errors import refuse
    from rackform.installed_tools import find_tool, not_found
    from rackform.k8s.platform import load_platform, platform_path
    from rackform.model.source import BadInput, SourceError, display_path
    from rackform.pipeline import build_dir, load_and_check
    from rackform.run import cluster
    from rackform.run.tenant_credentials import CredentialError, issue, safe_name

    site, _warnings = load_and_check(args.site, args.root)
    if not HOURS_MIN <= args.hours <= HOURS_MAX:
        raise refuse(None, "--hours", f"{args.hours}: expected {HOURS_MIN} to {HOURS_MAX} (a client certificate "
                                      f"cannot be revoked before it expires: keep it short)")
    try:
        design = load_platform(site)
    except SourceError as exc:
        raise BadInput([exc]) from None
    tenants = {tenant.name: (index, tenant) for index, tenant in enumerate(design.tenants)}
    if args.tenant not in tenants:
        shown = display_path(platform_path(site), args.root)
        known = f"its tenants are {', '.join(tenants)}" if tenants else "it names no tenants"
        raise refuse(design.loc or None, "--tenant", f"{args.tenant!r} is not a tenant of {shown}: {known}")
    index, tenant = tenants[args.tenant]
    if args.user not in tenant.admins:
        admins = ", ".join(tenant.admins) or "none"
        raise refuse(tenant.loc, f"platform.tenants[{index}].admins",
                     f"{args.user!r} is not an admin of tenant {tenant.name} (its admins: {admins}); only they get "
                     f"a kubeconfig for it")

    project = build_dir(args.root, site.name)
    k8s = cluster.find(project)
    if k8s.kubeconfig is None:
        print(f"kubeconfig {site.name}: not issued: the site has no cluster yet (no admin kubeconfig at "
              f"{project}/artifacts/kubeconfig and $KUBECONFIG names no file): deploy the kubernetes stage first",
              file=sys.stderr)
        return EXIT_FAILED
    kubectl = find_tool("kubectl")
    if kubectl is None:
        print(f"kubeconfig {site.name}: not issued: {not_found(['kubectl'])}", file=sys.stderr)
        return EXIT_FAILED

    output = args.output or project / "artifacts" / f"kubeconfig-{safe_name(tenant.name)}-{safe_name(args.user)}"
    try:
        issued = issue(kubectl=kubectl, admin_kubeconfig=k8s.kubeconfig, user=args.user, namespace=tenant.name,
                       hours=args.hours, output=output)
    except CredentialError as exc:
        print(f"kubeconfig {site.name}: not issued: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if issued.left_over:
        print(f"kubeconfig {site.name}: warning: the CSR object stays ({issued.left_over}); it holds no secret",
              file=sys.stderr)
    print(f"kubeconfig {site.name}: wrote {issued.path} (mode 0600) for user {issued.user}, tenant {tenant.name} "
          f"(namespace {issued.namespace}), valid until {issued.expires:%Y-%m-%d %H:%M} UTC")
    return EXIT_OK
