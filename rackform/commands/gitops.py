"""`rackform gitops SITE --repo-url URL [--branch main] [--check]`: the platform as a tree a site repo commits.

`rackform render` writes the platform under build/<site>/platform/, which is git-ignored.
This command writes the same objects, plus the Flux and Argo CD objects that install the
Helm releases, to ROOT/gitops/<site>/, a folder meant to be committed:

    gitops/<site>/                               README.md: generated, do not edit
    gitops/<site>/manifests/                     the plain objects (platform_manifests) + kustomization.yaml
    gitops/<site>/after-releases/                objects of the releases' own kinds (after_release_manifests), if any
    gitops/<site>/flux/kustomization.yaml        what `kubectl apply -k` (or a parent Flux Kustomization) applies:
    gitops/<site>/flux/git-repository.yaml         GitRepository for --repo-url / --branch
    gitops/<site>/flux/kustomizations.yaml         Flux Kustomizations: manifests/, then flux/releases/, then
                                                   after-releases/ (each dependsOn the one before)
    gitops/<site>/flux/releases/                 HelmRepository per chart repository, HelmRelease per release
    gitops/<site>/argocd/                        Application per release (sync waves from `needs`), one for
                                                 manifests/ (wave 0) and one for after-releases/ (last wave),
                                                 with a kustomization.yaml listing them

Nothing prunes: the Flux Kustomizations have `prune: false` and the Argo CD Applications sync
automatically without pruning and without a resources finalizer, so a GitOps tool never
deletes the platform's namespaces. Paths in the GitRepository and Applications are relative to
ROOT, which must be the root of the Git repository at --repo-url.

Deterministic: sorted keys (the manifests keep the key order `rackform render` writes), files
in a fixed order; a file whose content is unchanged is not rewritten (its mtime stays).
Exit 0 written or up to date, 1 `--check` found files that differ, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

HELP = ("Write the platform (manifests, Flux HelmReleases, Argo CD Applications) to gitops/SITE/, "
        "a folder the site repo commits; --check says whether the committed tree is up to date.")
GITOPS_DIR = "gitops"
README = "README.md"
MANIFESTS = "manifests"
AFTER_RELEASES = "after-releases"
FLUX_NAMESPACE = "flux-system"
ARGOCD_NAMESPACE = "argocd"
IN_CLUSTER = "https://kubernetes.default.svc"
KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
FLUX_SOURCE_API = "source.toolkit.fluxcd.io/v1"
FLUX_HELM_API = "helm.toolkit.fluxcd.io/v2"
FLUX_KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
ARGOCD_API = "argoproj.io/v1alpha1"
SYNC_WAVE = "argocd.argoproj.io/sync-wave"
REMEDIATION_RETRIES = 3
REPO_URL = re.compile(r"(https?|ssh)://\S+")
"""What Flux's GitRepository accepts as spec.url (its CRD's pattern); Argo CD accepts these too."""
BRANCH = re.compile(r"[A-Za-z0-9._/-]+")


class GitopsInputError(Exception):
    """Bad command line for this command: the message says what to give instead."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("site", metavar="SITE", help="site name (topologies/sites/SITE.yaml)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root holding topologies/ and inventories/, and the root of the Git "
                             "repository at --repo-url; gitops/SITE/ is written here (default: .)")
    parser.add_argument("--repo-url", metavar="URL",
                        help="required: the Git URL (https://, http:// or ssh://) of this repository, which Flux's "
                             "GitRepository and Argo CD's manifests Application pull gitops/SITE/manifests from")
    parser.add_argument("--branch", default="main", help="the branch they follow (default: main)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and list the files of gitops/SITE/ that differ (for CI)")


# ------------------------------------------------------------------ the files


def _sorted(value: Any) -> Any:
    """The value with every mapping's keys sorted, recursively (stable, reviewable diffs)."""
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/managed-by": "rackform"}


def _name(text: str) -> str:
    """A DNS-1123 label from a repository alias."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63] or "charts"


def helm_repository_names(releases) -> dict[str, str]:
    """Repository URL -> the name of its HelmRepository: the first alias (sorted) that maps to it."""
    names: dict[str, str] = {}
    for release in sorted(releases, key=lambda r: r.repository_alias):
        names.setdefault(release.repository, _name(release.repository_alias))
    return dict(sorted(names.items(), key=lambda item: item[1]))


def sync_waves(releases) -> dict[str, int]:
    """Release name -> Argo CD sync wave: 1 + the highest wave of what it needs (manifests are wave 0)."""
    waves: dict[str, int] = {}
    for release in releases:  # install order: needs come first
        waves[release.name] = 1 + max((waves[need] for need in release.needs), default=0)
    return waves


def flux_objects(site_name: str, releases, repo_url: str, branch: str, after_releases: bool) -> dict[str, list[dict]]:
    """File under flux/ -> the objects in it (files under flux/releases/ named `releases/...`)."""
    source = f"rackform-{site_name}"
    names = {folder: f"rackform-{site_name}-{folder}" for folder in (MANIFESTS, "releases", AFTER_RELEASES)}

    def meta(name: str) -> dict:
        return {"labels": _labels(), "name": name, "namespace": FLUX_NAMESPACE}

    def kustomization(folder: str, path: str, after: str | None) -> dict:
        spec = {"interval": "10m", "path": f"./{GITOPS_DIR}/{site_name}/{path}", "prune": False, "timeout": "5m",
                "wait": True, "sourceRef": {"kind": "GitRepository", "name": source}}
        if after:
            spec["dependsOn"] = [{"name": names[after]}]
        return {"apiVersion": FLUX_KUSTOMIZE_API, "kind": "Kustomization", "metadata": meta(names[folder]),
                "spec": spec}

    repositories = helm_repository_names(releases)
    stages = [kustomization(MANIFESTS, MANIFESTS, None), kustomization("releases", "flux/releases", MANIFESTS)]
    if after_releases:
        stages.append(kustomization(AFTER_RELEASES, AFTER_RELEASES, "releases"))
    files: dict[str, list[dict]] = {
        "git-repository.yaml": [{"apiVersion": FLUX_SOURCE_API, "kind": "GitRepository", "metadata": meta(source),
                                 "spec": {"interval": "1m", "ref": {"branch": branch}, "url": repo_url}}],
        "kustomizations.yaml": stages,
        "releases/helm-repositories.yaml": [
            {"apiVersion": FLUX_SOURCE_API, "kind": "HelmRepository", "metadata": meta(name),
             "spec": {"interval": "1h", "url": url}} for url, name in repositories.items()],
    }
    for release in releases:
        spec = {
            "chart": {"spec": {"chart": release.chart_name, "version": release.version,
                               "sourceRef": {"kind": "HelmRepository", "name": repositories[release.repository],
                                             "namespace": FLUX_NAMESPACE}}},
            "interval": "30m",
            "releaseName": release.name,  # else Flux names it <targetNamespace>-<name>
            "targetNamespace": release.namespace,
            "storageNamespace": release.namespace,  # where `rackform deploy`'s helm keeps it: Flux adopts that release
            "timeout": f"{release.timeout_s}s",
            "install": {"crds": "Create", "remediation": {"retries": REMEDIATION_RETRIES}},
            "upgrade": {"crds": "CreateReplace",
                        "remediation": {"remediateLastFailure": True, "retries": REMEDIATION_RETRIES,
                                        "strategy": "rollback"}},
            "values": release.values,
        }
        if release.needs:
            spec["dependsOn"] = [{"name": need} for need in release.needs]
        files[f"releases/{release.name}.yaml"] = [
            {"apiVersion": FLUX_HELM_API, "kind": "HelmRelease", "metadata": meta(release.name), "spec": spec}]
    return {name: objects for name, objects in files.items() if objects}


def argocd_objects(site_name: str, releases, repo_url: str, branch: str, after_releases: bool) -> dict[str, list[dict]]:
    """File under argocd/ -> the Application in it."""
    sync_policy = {"automated": {"prune": False, "selfHeal": True},
                   "retry": {"backoff": {"duration": "30s", "factor": 2, "maxDuration": "10m"}, "limit": 10},
                   "syncOptions": ["ServerSideApply=true"]}

    def application(name: str, wave: int, source: dict, namespace: str | None) -> dict:
        destination = {"server": IN_CLUSTER, **({"namespace": namespace} if namespace else {})}
        return {"apiVersion": ARGOCD_API, "kind": "Application",
                "metadata": {"annotations": {SYNC_WAVE: str(wave)}, "labels": _labels(),
                             "name": f"{site_name}-{name}", "namespace": ARGOCD_NAMESPACE},
                "spec": {"destination": destination, "project": "default", "source": source,
                         "syncPolicy": sync_policy}}

    def from_git(folder: str) -> dict:
        return {"path": f"{GITOPS_DIR}/{site_name}/{folder}", "repoURL": repo_url, "targetRevision": branch}

    waves = sync_waves(releases)
    files = {f"platform-{MANIFESTS}.yaml": [application(f"platform-{MANIFESTS}", 0, from_git(MANIFESTS), None)]}
    for release in releases:
        source = {"chart": release.chart_name, "repoURL": release.repository, "targetRevision": release.version,
                  "helm": {"releaseName": release.name, "valuesObject": release.values}}
        files[f"{release.name}.yaml"] = [application(release.name, waves[release.name], source, release.namespace)]
    if after_releases:
        last = 1 + max(waves.values(), default=0)
        files[f"platform-{AFTER_RELEASES}.yaml"] = [
            application(f"platform-{AFTER_RELEASES}", last, from_git(AFTER_RELEASES), None)]
    return files


def _readme(site_name: str) -> str:
    return (f"# {site_name}: the GPU platform for GitOps\n\n"
            f"Generated by `rackform gitops {site_name}` from the site's design; do not edit by hand: "
            "change the design and run the command again (`--check` tells CI whether this folder is up to date). "
            f"`{MANIFESTS}/` holds the plain objects (`{AFTER_RELEASES}/`, where present, those applied once the "
            "releases are installed), `flux/` the Flux sources, Kustomizations and HelmReleases, `argocd/` the "
            "Argo CD Applications; apply one of the two with `kubectl apply -k` (the rackform repository's "
            "docs/gitops.md says how).\n")


def gitops_files(site, repo_url: str, branch: str) -> dict[str, bytes]:
    """Every file of gitops/<site>/, keyed by path relative to that folder, sorted."""
    from rackform.k8s.cni import matrix_root
    from rackform.k8s.manifests import after_release_manifests, helm_releases, platform_manifests
    from rackform.k8s.platform import load_platform
    from rackform.model.versions import load_matrix
    from rackform.render import yamltext
    from rackform.render.platform_files import file_header, manifest_files

    design, matrix = load_platform(site), load_matrix(matrix_root(site))
    again = f"run `rackform gitops {site.name}` again"
    tenants = {tenant.name for tenant in design.tenants}
    text = manifest_files(site, platform_manifests(site, design, matrix), tenants, MANIFESTS, again=again)
    after = after_release_manifests(site, design, matrix)
    if after:
        text.update(manifest_files(site, after, tenants, AFTER_RELEASES, again=again))
    releases = helm_releases(site, design, matrix)

    def tree(folder: str, objects: dict[str, list[dict]], title: str) -> None:
        for name, documents in objects.items():
            text[f"{folder}/{name}"] = file_header(site, f"{title}: {name.removesuffix('.yaml')}", again) + "".join(
                yamltext.dump(_sorted(document)) for document in documents)
        for sub in dict.fromkeys(name.split("/", 1)[0] for name in objects if "/" in name):
            listed = [name.split("/", 1)[1] for name in objects if name.startswith(f"{sub}/")]
            text[f"{folder}/{sub}/kustomization.yaml"] = yamltext.dump(
                {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization", "resources": listed},
                file_header(site, f"{title}: what the {sub} Kustomization applies", again))
        text[f"{folder}/kustomization.yaml"] = yamltext.dump(
            {"apiVersion": KUSTOMIZE_API, "kind": "Kustomization",
             "resources": [name for name in objects if "/" not in name]},
            file_header(site, f"{title}: what `kubectl apply -k {GITOPS_DIR}/{site.name}/{folder}` applies", again))

    tree("flux", flux_objects(site.name, releases, repo_url, branch, bool(after)), "Flux")
    tree("argocd", argocd_objects(site.name, releases, repo_url, branch, bool(after)), "Argo CD")
    text[README] = _readme(site.name)
    return {path: text[path].encode() for path in sorted(text)}


def unset_repositories(site) -> list[str]:
    """Chart repository aliases the site names no mirror for (their URLs never resolve)."""
    from rackform.k8s.cni import matrix_root
    from rackform.k8s.manifests import helm_releases
    from rackform.k8s.platform import load_platform
    from rackform.model.versions import load_matrix

    releases = helm_releases(site, load_platform(site), load_matrix(matrix_root(site)))
    return sorted({release.repository_alias for release in releases if not release.repository_set})


# ------------------------------------------------------------------ writing


def _existing(folder: Path) -> dict[str, Path]:
    if not folder.is_dir():
        return {}
    return {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*"))
            if path.is_file() or path.is_symlink()}


def differences(files: dict[str, bytes], folder: Path) -> tuple[list[str], list[str], list[str]]:
    """(added, changed, removed) paths, relative to folder, that writing `files` would make."""
    old = _existing(folder)
    added = [path for path in files if path not in old]
    changed = [path for path in files if path in old and
               (old[path].is_symlink() or old[path].read_bytes() != files[path])]
    removed = sorted(path for path in old if path not in files)
    return added, changed, removed


def write_tree(files: dict[str, bytes], folder: Path) -> tuple[list[str], list[str], list[str]]:
    """Make folder hold exactly `files`: each new or changed file replaced atomically, files no
    longer generated removed, unchanged files left alone (mtime kept)."""
    added, changed, removed = differences(files, folder)
    for path in (*added, *changed):
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(files[path])
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    for path in removed:
        (folder / path).unlink()
    for directory in sorted({(folder / path).parent for path in removed}, key=lambda p: len(p.parts), reverse=True):
        while directory != folder and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
    return added, changed, removed


# ------------------------------------------------------------------ the command


def _options(args: argparse.Namespace) -> tuple[str, str]:
    url = (args.repo_url or "").strip()
    if not url:
        raise GitopsInputError(
            "--repo-url is required: the Git URL (https://, http:// or ssh://) of this repository, from which "
            f"Flux's GitRepository and Argo CD's Application pull {GITOPS_DIR}/{args.site}/manifests")
    if not REPO_URL.fullmatch(url):
        raise GitopsInputError(f"--repo-url {url!r}: expected an https://, http:// or ssh:// URL (what Flux's "
                               "GitRepository accepts; for scp-like git@host:path write ssh://git@host/path)")
    if not BRANCH.fullmatch(args.branch) or args.branch.startswith(("-", "/")) or ".." in args.branch:
        raise GitopsInputError(f"--branch {args.branch!r}: not a branch name")
    return url, args.branch


def run(args: argparse.Namespace) -> int:
    from rackform.commands.report import print_warnings
    from rackform.pipeline import load_and_check

    try:
        repo_url, branch = _options(args)
    except GitopsInputError as error:
        print(f"rackform gitops: {args.site}: {error}; nothing was written", file=sys.stderr)
        return 2
    site, warnings = load_and_check(args.site, args.root)  # BadInput, DesignRejected: the CLI reports them
    print_warnings(warnings)
    if site.kubernetes is None:
        print(f"rackform gitops: {site.name}: the site has no `kubernetes:` block, so no platform to put in Git; "
              "nothing was written", file=sys.stderr)
        return 2
    shown = f"{GITOPS_DIR}/{site.name}/"
    folder = Path(args.root) / GITOPS_DIR / site.name
    if folder.exists() and not folder.is_dir():
        print(f"rackform gitops: {site.name}: {folder} is not a folder; nothing was written", file=sys.stderr)
        return 2
    unset = unset_repositories(site)
    if unset:
        print(f"rackform gitops: {site.name}: warning: no Helm chart repository set for {', '.join(unset)}: their "
              "HelmRepository and Application URLs never resolve, so those releases fail visibly; add the site's "
              f"mirror under platform.helm_repositories in topologies/platform/{site.name}.yaml", file=sys.stderr)
    files = gitops_files(site, repo_url, branch)
    if args.check:
        added, changed, removed = differences(files, folder)
        stale = [*(f"  missing  {shown}{p}" for p in added), *(f"  differs  {shown}{p}" for p in changed),
                 *(f"  extra    {shown}{p}" for p in removed)]
        if stale:
            print(f"{site.name}: {shown} is out of date ({len(stale)} file(s)):")
            print("\n".join(stale))
            print(f"rackform gitops: {site.name}: run `rackform gitops {site.name} --repo-url {repo_url} "
                  f"--branch {branch}` and commit {shown}", file=sys.stderr)
            return 1
        print(f"{site.name}: {shown} is up to date ({len(files)} files)")
        return 0
    added, changed, removed = write_tree(files, folder)
    if not (added or changed or removed):
        print(f"{site.name}: {shown} unchanged ({len(files)} files)")
        return 0
    for mark, paths in (("+", added), ("~", changed), ("-", removed)):
        for path in paths:
            print(f"  {mark} {shown}{path}")
    print(f"{site.name}: wrote {shown} ({len(added)} added, {len(changed)} changed, {len(removed)} removed, "
          f"{len(files)} files); commit it")
    return 0
