"""`rackform gitops SITE`: the platform as a committed tree (gitops/<site>/) that Flux or Argo CD
applies. The manifests are exactly the platform's objects (and validate strictly), every Helm
release becomes a Flux HelmRelease and an Argo CD Application ordered by its `needs`, nothing
prunes, the output is deterministic, a second run touches nothing, `--check` tells CI whether
the committed tree is current, and neither this repo's .gitignore nor a `rackform init` repo's
ignores gitops/."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from platform_validation import problems

from rackform.installed_tools import find_tool, not_found
from rackform.cli import main
from rackform.commands import gitops
from rackform.k8s.cni import matrix_root
from rackform.k8s.manifests import after_release_manifests, helm_releases, platform_manifests
from rackform.k8s.platform import load_platform
from rackform.k8s.versions import load_matrix
from rackform.model.loader import load_site

REPO = Path(__file__).resolve().parents[2]
KUBECTL = find_tool("kubectl")
"""Beside rackform (the set-up's), else on PATH: its built-in kustomize needs no cluster."""
URL = "https://git.example.com/infra/sites.git"
SHAPE_SITES = ("lab", "reference")
"""lab as shipped; reference installs every release, so `needs` (gpu-operator's) are exercised."""
OLD = 1_000_000_000  # an mtime (2001) no write leaves behind


@pytest.fixture()
def root(tmp_path: Path, make_site_files) -> Path:
    return make_site_files(tmp_path / "repo").root


def run_gitops(capsys, root: Path, *args: str, site: str = "lab") -> tuple[int, str, str]:
    code = main(["gitops", site, "--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def tree(root: Path, site: str = "lab") -> dict[str, bytes]:
    folder = root / gitops.GITOPS_DIR / site
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def documents(files: dict[str, bytes], path: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(files[path]) if doc]


def listed(files: dict[str, bytes], folder: str) -> list[str]:
    """The files a folder's kustomization.yaml names, in its order."""
    return documents(files, f"{folder}/kustomization.yaml")[0]["resources"]


def platform(site_name: str):
    site = load_site(site_name, REPO)
    design, matrix = load_platform(site), load_matrix(matrix_root(site))
    return site, design, matrix


# ------------------------------------------------------------------ writing


def test_writes_the_tree_for_the_lab(capsys, root):
    code, out, _ = run_gitops(capsys, root, "--repo-url", URL)
    assert code == 0 and "lab: wrote gitops/lab/" in out
    files = tree(root)
    site = load_site("lab", root)
    assert files == gitops.gitops_files(site, URL, "main")
    releases = helm_releases(site, load_platform(site), load_matrix(matrix_root(site)))
    assert {gitops.README, "manifests/kustomization.yaml", "flux/kustomization.yaml", "flux/git-repository.yaml",
            "flux/kustomizations.yaml", "flux/releases/kustomization.yaml", "flux/releases/helm-repositories.yaml",
            "argocd/kustomization.yaml", "argocd/platform-manifests.yaml"} <= set(files)
    for release in releases:
        assert {f"flux/releases/{release.name}.yaml", f"argocd/{release.name}.yaml"} <= set(files)
    readme = files[gitops.README].decode()
    assert "rackform gitops lab" in readme and "do not edit by hand" in readme


def test_every_folder_kustomization_lists_its_files(capsys, root):
    run_gitops(capsys, root, "--repo-url", URL)
    files = tree(root)
    folders = {path.rsplit("/", 1)[0] for path in files if "/" in path}
    for folder in folders:
        here = sorted(p.split("/")[-1] for p in files if p.rsplit("/", 1)[0] == folder and
                      not p.endswith("/kustomization.yaml"))
        assert sorted(listed(files, folder)) == here, folder


def test_a_second_run_is_unchanged_and_touches_nothing(capsys, root):
    run_gitops(capsys, root, "--repo-url", URL)
    folder = root / "gitops" / "lab"
    paths = [p for p in folder.rglob("*") if p.is_file()]
    for path in paths:
        os.utime(path, (OLD, OLD))
    code, out, _ = run_gitops(capsys, root, "--repo-url", URL)
    assert code == 0 and "lab: gitops/lab/ unchanged" in out
    assert {p.stat().st_mtime for p in paths} == {OLD}


def test_a_change_rewrites_only_the_files_it_changes_and_removes_stale_ones(capsys, root):
    run_gitops(capsys, root, "--repo-url", URL)
    folder = root / "gitops" / "lab"
    (folder / "manifests" / "stale.yaml").write_text("---\n{}\n")
    for path in folder.rglob("*"):
        os.utime(path, (OLD, OLD))
    code, out, _ = run_gitops(capsys, root, "--repo-url", URL, "--branch", "production")
    assert code == 0 and "- gitops/lab/manifests/stale.yaml" in out
    assert not (folder / "manifests" / "stale.yaml").exists()
    touched = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                     if p.is_file() and p.stat().st_mtime != OLD)
    from_git = [p for p in tree(root) if p.startswith("argocd/platform-")]  # manifests (and after-releases)
    assert touched == sorted(["flux/git-repository.yaml", *from_git])
    assert documents(tree(root), "flux/git-repository.yaml")[0]["spec"]["ref"] == {"branch": "production"}


def test_the_output_is_deterministic_with_sorted_keys():
    site = load_site("lab", REPO)
    first = gitops.gitops_files(site, URL, "main")
    assert first == gitops.gitops_files(load_site("lab", REPO), URL, "main") and list(first) == sorted(first)

    def keys_sorted(value) -> bool:
        if isinstance(value, dict):
            return list(value) == sorted(value) and all(keys_sorted(v) for v in value.values())
        return all(keys_sorted(v) for v in value) if isinstance(value, list) else True

    generated = [p for p in first if p.startswith(("flux/", "argocd/"))]
    assert generated and all(keys_sorted(doc) for p in generated for doc in documents(first, p))


# ------------------------------------------------------------------ --check


def test_check_lists_what_differs_and_writes_nothing(capsys, root):
    code, out, _ = run_gitops(capsys, root, "--repo-url", URL, "--check")
    assert code == 1 and "missing  gitops/lab/flux/git-repository.yaml" in out
    assert not (root / "gitops").exists()

    run_gitops(capsys, root, "--repo-url", URL)
    code, out, _ = run_gitops(capsys, root, "--repo-url", URL, "--check")
    assert code == 0 and "lab: gitops/lab/ is up to date" in out

    edited = root / "gitops" / "lab" / "flux" / "kustomizations.yaml"
    edited.write_text(edited.read_text().replace("prune: false", "prune: true"))
    (root / "gitops" / "lab" / "argocd" / "extra.yaml").write_text("---\n{}\n")
    code, out, err = run_gitops(capsys, root, "--repo-url", URL, "--check")
    assert code == 1
    assert "differs  gitops/lab/flux/kustomizations.yaml" in out and "extra    gitops/lab/argocd/extra.yaml" in out
    assert "prune: true" in edited.read_text() and "rackform gitops lab --repo-url" in err

    code, out, _ = run_gitops(capsys, root, "--repo-url", URL, "--branch", "other", "--check")
    assert code == 1 and "differs  gitops/lab/flux/git-repository.yaml" in out


# ------------------------------------------------------------------ refusals


def test_repo_url_is_required(capsys, root):
    code, out, err = run_gitops(capsys, root)
    assert code == 2 and "--repo-url is required" in err and "nothing was written" in err
    assert "Traceback" not in err and not (root / "gitops").exists()


@pytest.mark.parametrize("url", ["git@git.example.com:infra/sites.git", "file:///srv/sites", "https://"])
def test_a_repo_url_flux_would_refuse_is_refused(capsys, root, url):
    code, _, err = run_gitops(capsys, root, "--repo-url", url)
    assert code == 2 and f"--repo-url {url!r}" in err and not (root / "gitops").exists()


def test_a_bad_branch_is_refused(capsys, root):
    code, _, err = run_gitops(capsys, root, "--repo-url", URL, "--branch", "a b")
    assert code == 2 and "not a branch name" in err


def test_an_unknown_site_is_bad_input(capsys, root):
    code, _, err = run_gitops(capsys, root, "--repo-url", URL, site="atlantis")
    assert code == 2 and "no such site 'atlantis'" in err and "nothing was changed" in err
    assert "Traceback" not in err and not (root / "gitops").exists()


def test_a_site_without_kubernetes_is_refused(capsys, root, monkeypatch):
    import rackform.pipeline

    real = rackform.pipeline.load_and_check

    def without_kubernetes(name, where):
        site, found = real(name, where)
        return dataclasses.replace(site, kubernetes=None), found

    monkeypatch.setattr(rackform.pipeline, "load_and_check", without_kubernetes)
    code, _, err = run_gitops(capsys, root, "--repo-url", URL)
    assert code == 2 and "no `kubernetes:`" in err and not (root / "gitops").exists()


def test_unset_chart_repositories_are_warned_about(capsys, root):
    code, _, err = run_gitops(capsys, root, "--repo-url", URL, site="reference")
    assert code == 0 and "no Helm chart repository set for" in err and "helm_repositories" in err


# ------------------------------------------------------------------ shapes


def test_manifests_are_the_platform_objects_and_validate_strictly():
    site, design, matrix = platform("lab")
    files = gitops.gitops_files(site, URL, "main")
    objects = [obj for name in listed(files, "manifests") for obj in documents(files, f"manifests/{name}")]
    assert objects == platform_manifests(site, design, matrix)
    assert [p for obj in objects for p in problems(obj, site.kubernetes.version)] == []
    after = after_release_manifests(site, design, matrix)
    if after:
        assert [obj for name in listed(files, "after-releases")
                for obj in documents(files, f"after-releases/{name}")] == after
    else:
        assert not any(p.startswith("after-releases/") for p in files)


def test_gitops_objects_are_custom_resources_kubernetes_validate_only_warns_about():
    """Flux's and Argo CD's kinds (and the releases' own, after-releases/) have no schema in
    kubernetes-validate: each is tried, and a missing schema is a warning, not a failure."""
    site = load_site("lab", REPO)
    files = gitops.gitops_files(site, URL, "main")
    custom = [doc for p in files if p.startswith(("flux/", "argocd/", "after-releases/")) and
              not p.endswith("kustomization.yaml") for doc in documents(files, p)]
    unchecked = set()
    for doc in custom:
        try:
            kubernetes_validate.validate(doc, site.kubernetes.version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.add(f"{doc['apiVersion']}/{doc['kind']}")
    if unchecked:
        warnings.warn(f"no schema to validate {', '.join(sorted(unchecked))} against", stacklevel=1)
    assert {f"{gitops.FLUX_HELM_API}/HelmRelease", f"{gitops.ARGOCD_API}/Application"} <= unchecked


@pytest.mark.parametrize("site_name", SHAPE_SITES)
def test_flux_objects(site_name):
    site, design, matrix = platform(site_name)
    releases = helm_releases(site, design, matrix)
    files = gitops.gitops_files(site, URL, "main")
    (source,) = documents(files, "flux/git-repository.yaml")
    assert source["apiVersion"] == gitops.FLUX_SOURCE_API and source["kind"] == "GitRepository"
    assert source["spec"]["url"] == URL and source["spec"]["ref"] == {"branch": "main"}

    stages = {ks["metadata"]["name"]: ks for ks in documents(files, "flux/kustomizations.yaml")}
    manifests = stages[f"rackform-{site_name}-manifests"]
    releases_ks = stages[f"rackform-{site_name}-releases"]
    for ks in stages.values():
        assert ks["apiVersion"] == gitops.FLUX_KUSTOMIZE_API and ks["spec"]["prune"] is False
        assert ks["spec"]["sourceRef"] == {"kind": "GitRepository", "name": source["metadata"]["name"]}
        folder = ks["spec"]["path"].removeprefix(f"./gitops/{site_name}/")
        assert f"{folder}/kustomization.yaml" in files
    assert manifests["spec"]["path"] == f"./gitops/{site_name}/manifests" and "dependsOn" not in manifests["spec"]
    assert releases_ks["spec"]["dependsOn"] == [{"name": f"rackform-{site_name}-manifests"}]

    repositories = {doc["metadata"]["name"]: doc for doc in documents(files, "flux/releases/helm-repositories.yaml")}
    assert all(doc["apiVersion"] == gitops.FLUX_SOURCE_API and doc["kind"] == "HelmRepository"
               for doc in repositories.values())
    assert sorted(doc["spec"]["url"] for doc in repositories.values()) == sorted({r.repository for r in releases})
    assert listed(files, "flux/releases") == ["helm-repositories.yaml", *(f"{r.name}.yaml" for r in releases)]

    for release in releases:
        (hr,) = documents(files, f"flux/releases/{release.name}.yaml")
        spec = hr["spec"]
        assert hr["apiVersion"] == gitops.FLUX_HELM_API and hr["kind"] == "HelmRelease"
        assert hr["metadata"]["name"] == release.name == spec["releaseName"]
        chart = spec["chart"]["spec"]
        assert (chart["chart"], chart["version"]) == (release.chart_name, release.version)
        assert chart["sourceRef"]["kind"] == "HelmRepository"
        assert repositories[chart["sourceRef"]["name"]]["spec"]["url"] == release.repository
        assert spec["targetNamespace"] == release.namespace == spec["storageNamespace"]
        assert spec["install"]["remediation"]["retries"] > 0 and spec["upgrade"]["remediation"]["retries"] > 0
        assert spec["values"] == release.values
        assert [need["name"] for need in spec.get("dependsOn", [])] == list(release.needs)


def test_reference_gpu_operator_depends_on_what_it_needs():
    files = gitops.gitops_files(load_site("reference", REPO), URL, "main")
    (hr,) = documents(files, "flux/releases/gpu-operator.yaml")
    assert hr["spec"]["dependsOn"] == [{"name": "kube-prometheus-stack"}, {"name": "network-operator"}]


@pytest.mark.parametrize("site_name", SHAPE_SITES)
def test_argocd_applications(site_name):
    site, design, matrix = platform(site_name)
    releases = helm_releases(site, design, matrix)
    files = gitops.gitops_files(site, URL, "main")
    apps = {p: doc for p in files if p.startswith("argocd/") and not p.endswith("kustomization.yaml")
            for doc in documents(files, p)}
    for app in apps.values():
        assert app["apiVersion"] == gitops.ARGOCD_API and app["kind"] == "Application"
        assert app["spec"]["syncPolicy"]["automated"]["prune"] is False  # namespaces are never pruned
        assert "finalizers" not in app["metadata"]  # deleting an Application leaves its objects
        assert app["metadata"]["name"].startswith(f"{site_name}-")
    wave = {p: int(app["metadata"]["annotations"][gitops.SYNC_WAVE]) for p, app in apps.items()}

    manifests = apps["argocd/platform-manifests.yaml"]["spec"]
    assert manifests["source"] == {"path": f"gitops/{site_name}/manifests", "repoURL": URL, "targetRevision": "main"}
    assert wave["argocd/platform-manifests.yaml"] == 0
    for release in releases:
        app = apps[f"argocd/{release.name}.yaml"]["spec"]
        assert app["source"] == {"chart": release.chart_name, "repoURL": release.repository,
                                 "targetRevision": release.version,
                                 "helm": {"releaseName": release.name, "valuesObject": release.values}}
        assert app["destination"]["namespace"] == release.namespace
        assert wave[f"argocd/{release.name}.yaml"] > 0
        assert all(wave[f"argocd/{need}.yaml"] < wave[f"argocd/{release.name}.yaml"] for need in release.needs)
    if "argocd/platform-after-releases.yaml" in apps:
        assert all(wave["argocd/platform-after-releases.yaml"] > wave[f"argocd/{r.name}.yaml"] for r in releases)
    assert sorted(listed(files, "argocd")) == sorted(p.removeprefix("argocd/") for p in apps)


@pytest.mark.skipif(KUBECTL is None, reason=f"needs kubectl (its kustomize): {not_found(['kubectl'])}")
def test_kubectl_kustomize_builds_every_folder(capsys, root):
    run_gitops(capsys, root, "--repo-url", URL)
    for folder in ("manifests", "flux", "flux/releases", "argocd"):
        subprocess.run([KUBECTL, "kustomize", str(root / "gitops" / "lab" / folder)],
                       capture_output=True, text=True, timeout=120, check=True)


# ------------------------------------------------------------------ Git


def ignored(repo: Path, relative: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", relative], cwd=repo, timeout=30)
    assert done.returncode in (0, 1), done
    return done.returncode == 0


GITOPS_PATHS = ("gitops/lab/", "gitops/lab/flux/releases/kueue.yaml", "gitops/edge/manifests/kustomization.yaml")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed here")
def test_this_repo_does_not_ignore_gitops():
    assert [path for path in GITOPS_PATHS if ignored(REPO, path)] == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed here")
def test_a_rackform_init_repo_does_not_ignore_gitops(tmp_path):
    from rackform.commands.init import write_repo

    repo = tmp_path / "sites"
    write_repo(repo, "edge")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    assert ignored(repo, "build/edge/platform/manifests/kustomization.yaml")  # the check itself works
    assert [path for path in GITOPS_PATHS if ignored(repo, path)] == []
