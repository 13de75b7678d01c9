"""`apply_platform`: the contract with kubectl and helm (argv, order, environment, working
folder, stop at the first failure) and the plain refusals when something is missing.

kubectl and helm here are STAND-INS: small scripts put first on PATH that record their
arguments, working folder and environment, and fail when told to (by a file beside the
kubeconfig: $KUBECONFIG is what rackform passes them, the rest of the test's environment is
not passed on: rackform.process_environment); the folder rackform looks
in before PATH (rackform.installed_tools: `.venv/bin`, where `make install` puts a real helm)
is an empty one here. No Kubernetes API server is reached, so nothing here shows that a real
cluster accepts the commands (docs/platform.md says what was not exercised)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from rackform.render.platform_files import platform_files
from rackform.run.platform_apply import PlatformUnavailable, apply_platform, platform_kubeconfig

MIRROR = "https://helm-mirror.example.com"

SITE_MIRROR_CHARTS = "http://10.10.0.11:8080/charts"
LAB_RELEASES = "  releases: [kueue]\n"
"""The shipped lab installs Kueue only (its mirror carries no other chart); these tests install every release."""
STAND_IN = f"""#!{sys.executable}
import json, os, sys
tool = os.path.basename(sys.argv[0])
settings = json.load(open(os.path.join(os.path.dirname(os.environ["KUBECONFIG"]), "stand-in.json")))
with open(settings["record"], "a") as record:
    record.write(json.dumps({{"tool": tool, "argv": sys.argv[1:], "cwd": os.getcwd(),
                             "kubeconfig": os.environ.get("KUBECONFIG"), "environment": dict(os.environ)}}) + "\\n")
installed = settings.get("releases")  # what `helm list` / `helm get values` answer
if tool == "helm" and sys.argv[1] in ("list", "get"):
    releases = json.load(open(installed)) if installed else {{}}
    if sys.argv[1] == "list":
        name = sys.argv[sys.argv.index("--filter") + 1].strip("^$")
        print(json.dumps([{{"name": name, **releases[name]["list"]}}] if name in releases else []))
    else:
        print(json.dumps(releases.get(sys.argv[3], {{}}).get("values")))
    sys.exit(0)
flaky = settings.get("flaky")  # a file: the first call that finds it gone fails, as a moving VIP does
if flaky and tool == "kubectl" and not os.path.exists(flaky):
    open(flaky, "w").close()
    sys.stderr.write("Unable to connect to the server: write tcp 10.10.0.1:58470->10.10.0.5:6443: write: "
                     "connection reset by peer\\n")
    sys.exit(1)
hang = settings.get("hang")  # a release that takes long: a cancel must stop it
if hang and hang in sys.argv:
    import time
    open(settings["record"] + ".hanging", "w").close()
    time.sleep(300)
fail = settings.get("fail")
if fail and fail in sys.argv:
    sys.stderr.write("Error: UPGRADE FAILED: context deadline exceeded\\n")
    sys.exit(3)
"""


@pytest.fixture(autouse=True)
def nothing_beside_rackform(tools_beside_rackform):
    """The stand-ins on PATH are the only kubectl and helm (not the venv's real helm)."""
    tools_beside_rackform()


class Cluster:
    """A rendered lab platform, a kubeconfig and stand-in tools on PATH."""

    def __init__(self, root: Path, site):
        self.project = root / "build" / "lab"
        for path, content in platform_files(site).items():
            (self.project / path).parent.mkdir(parents=True, exist_ok=True)
            (self.project / path).write_bytes(content)
        self.kubeconfig = self.project / "artifacts" / "kubeconfig"
        self.kubeconfig.parent.mkdir(parents=True)
        self.kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
        self.bin = root / "bin"
        self.bin.mkdir()
        for tool in ("kubectl", "helm"):
            (self.bin / tool).write_text(STAND_IN)
            (self.bin / tool).chmod(0o755)
        self.record = root / "record.jsonl"
        self.environ = {"PATH": str(self.bin)}
        self.set()

    def set(self, **settings: str) -> None:
        """How the stand-ins behave: fail=, hang= (a release), releases= (what helm lists), flaky= (a file)."""
        (self.kubeconfig.parent / "stand-in.json").write_text(json.dumps({"record": str(self.record), **settings}))

    def calls(self, queries: bool = False) -> list[dict]:
        """What the tools were asked to do; with `queries`, helm's read-only list/get too."""
        calls = [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []
        return [c for c in calls if queries or not (c["tool"] == "helm" and c["argv"][0] in ("list", "get"))]


@pytest.fixture()
def cluster(lab_files, tmp_path) -> Cluster:
    lab_files.edit("topologies/platform/lab.yaml", LAB_RELEASES, "")
    lab_files.edit("topologies/platform/lab.yaml", "versions: {}", "versions: {}\n  helm_repositories: {"
                   f"nvidia: {MIRROR}/nvidia, kubeflow: {MIRROR}/kubeflow, prometheus-community: {MIRROR}/pc}}")
    return Cluster(tmp_path, lab_files.load())


def helm_argv(name, chart, repo, version, namespace):
    url = repo if repo.startswith("http://") else f"{MIRROR}/{repo}"
    return ["upgrade", name, chart, "--install", "--repo", url, "--version", version,
            "--namespace", namespace, "--values", f"helm/{name}/values.yaml"]


WAIT = ["--wait", "--atomic", "--timeout", "900s"]
EXPECTED = [
    ("kubectl", ["apply", "--server-side", "--field-manager=rackform", "-k", "manifests"]),
    ("helm", helm_argv("kube-prometheus-stack", "kube-prometheus-stack", "pc", "70.0.0", "monitoring") + WAIT),
    ("helm", helm_argv("network-operator", "network-operator", "nvidia", "25.4.0", "nvidia-network-operator") + WAIT),
    ("helm", helm_argv("gpu-operator", "gpu-operator", "nvidia", "v25.3.0", "gpu-operator") + WAIT),
    ("helm", helm_argv("training-operator", "training-operator", "kubeflow", "v1.9.0", "kubeflow") + WAIT),
    ("helm", helm_argv("kueue", "kueue", SITE_MIRROR_CHARTS, "0.17.0", "kueue-system") + WAIT),
    # the releases' own kinds (Kueue's queues, kube-prometheus-stack's alert rules), once their CRDs exist
    ("kubectl", ["apply", "--server-side", "--field-manager=rackform", "-k", "after-releases"]),
]


def test_manifests_then_each_release_in_order_with_pinned_versions(cluster):
    result = apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)
    calls = cluster.calls()
    assert [(c["tool"], c["argv"]) for c in calls] == EXPECTED
    assert {(c["cwd"], c["kubeconfig"]) for c in calls} == {(str(cluster.project / "platform"), str(cluster.kubeconfig))}
    assert (result.playbook, result.status, result.rc, result.hosts, result.failures, result.ok) == (
        "platform", "successful", 0, {}, [], True)


def test_kubectl_and_helm_get_the_allowed_environment_only(cluster):
    """A secret of the caller's environment, another cluster's context or namespace for helm,
    and another kubeconfig never reach the tools; helm's own folders and the proxy do."""
    environ = {**cluster.environ, "AWS_SECRET_ACCESS_KEY": "aws-secret", "RACKFORM_SWITCH_PASSWORD": "switch-pw",
               "ANSIBLE_VAULT_PASSWORD_FILE": "/vault-pw", "HELM_KUBECONTEXT": "elsewhere", "HELM_NAMESPACE": "x",
               "HELM_REPO_PASSWORD": "repo-pw", "HELM_CACHE_HOME": "/helm-cache", "https_proxy": "http://proxy:3128",
               "KUBECONFIG": "/another/kubeconfig", "LC_ALL": "C.UTF-8"}
    assert apply_platform(cluster.project, cluster.kubeconfig, environ=environ).ok
    calls = cluster.calls(queries=True)
    assert {c["tool"] for c in calls} == {"kubectl", "helm"}
    for call in calls:
        passed = call["environment"]
        assert not {"AWS_SECRET_ACCESS_KEY", "RACKFORM_SWITCH_PASSWORD", "ANSIBLE_VAULT_PASSWORD_FILE",
                    "HELM_KUBECONTEXT", "HELM_NAMESPACE", "HELM_REPO_PASSWORD"} & set(passed), call["tool"]
        assert (passed["KUBECONFIG"], passed["https_proxy"], passed["LC_ALL"]) == (
            str(cluster.kubeconfig), "http://proxy:3128", "C.UTF-8")
        assert passed.get("HELM_CACHE_HOME") == ("/helm-cache" if call["tool"] == "helm" else None)


def test_check_mode_asks_the_server_for_a_dry_run_and_waits_for_nothing(cluster):
    result = apply_platform(cluster.project, cluster.kubeconfig, check=True, environ=cluster.environ)
    expected = [(tool, [a for a in argv if a not in WAIT] + ["--dry-run=server"]) for tool, argv in EXPECTED]
    assert ([(c["tool"], c["argv"]) for c in cluster.calls()], result.ok) == (expected, True)


def test_a_failed_release_stops_the_rest_and_says_which_and_why(cluster):
    progress: list[str] = []
    cluster.set(fail="gpu-operator")
    result = apply_platform(cluster.project, cluster.kubeconfig, progress=progress.append, environ=cluster.environ)
    assert [c["argv"][1] for c in cluster.calls() if c["tool"] == "helm"] == [
        "kube-prometheus-stack", "network-operator", "gpu-operator"]
    assert (result.status, result.rc, result.ok, progress[-1]) == ("failed", 3, False, "helm upgrade --install gpu-operator")
    [failure] = result.failures
    assert (failure.host, failure.task, failure.message) == (
        "cluster", "helm upgrade --install gpu-operator", "exit 3: Error: UPGRADE FAILED: context deadline exceeded")


def test_a_cancel_stops_the_running_release_and_starts_nothing_more(cluster):
    """The first Ctrl-C (or Pulumi's Cancel) while helm runs: helm is stopped within seconds, no
    later step starts, and the result is "canceled" (the stage runner records nothing for it)."""
    hanging = Path(f"{cluster.record}.hanging")
    cluster.set(hang="gpu-operator")
    started = time.monotonic()
    result = apply_platform(cluster.project, cluster.kubeconfig, cancel_requested=hanging.exists,
                            environ=cluster.environ)
    assert time.monotonic() - started < 60  # helm's stand-in sleeps 300 s
    assert [c["argv"][1] for c in cluster.calls() if c["tool"] == "helm"] == [
        "kube-prometheus-stack", "network-operator", "gpu-operator"]
    assert (result.status, result.ok, [f.message for f in result.failures]) == ("canceled", False, ["cancelled"])


def test_a_cancel_before_the_first_step_runs_nothing(cluster):
    result = apply_platform(cluster.project, cluster.kubeconfig, cancel_requested=lambda: True,
                            environ=cluster.environ)
    assert (cluster.calls(queries=True), result.status) == ([], "canceled")


def test_the_shipped_lab_installs_kueue_from_its_site_mirror_then_its_queues(lab_site, tmp_path):
    """No helm_repositories entry: the one chart the lab installs is the site mirror's own."""
    lab = Cluster(tmp_path, lab_site)
    assert apply_platform(lab.project, lab.kubeconfig, environ=lab.environ).ok
    assert [(c["tool"], c["argv"]) for c in lab.calls()] == [EXPECTED[0], *EXPECTED[-2:]]


def test_without_a_kubeconfig_nothing_runs_and_the_reason_is_plain(cluster):
    with pytest.raises(PlatformUnavailable, match=r"no kubeconfig for site lab: the kubernetes stage fetched none"):
        apply_platform(cluster.project, None, environ=cluster.environ)
    assert cluster.calls() == []


@pytest.mark.parametrize(("tools", "reason"), [
    (("kubectl",), r"^helm not found in \S+ \(where the set-up puts it: docs/install.md\) nor on PATH: "
                   r"install it to apply the platform$"),
    ((), r"^kubectl and helm not found in \S+ \(where the set-up puts them: docs/install.md\) nor on PATH"),
])
def test_a_missing_tool_is_named(cluster, tools, reason):
    for tool in {"kubectl", "helm"} - set(tools):
        (cluster.bin / tool).unlink()
    with pytest.raises(PlatformUnavailable, match=reason):
        apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)
    assert cluster.calls() == []


def test_the_tools_beside_rackform_are_found_without_path(cluster, tools_beside_rackform):
    """`.venv/bin/rackform deploy` with the venv not activated: kubectl and helm from where
    `make install` put them, beside rackform, though PATH has neither."""
    for tool in ("kubectl", "helm"):
        (cluster.bin / tool).unlink()
    beside = tools_beside_rackform(["kubectl", "helm"], STAND_IN)
    assert apply_platform(cluster.project, cluster.kubeconfig, environ={**cluster.environ, "PATH": "/nowhere"}).ok
    assert [c["tool"] for c in cluster.calls()] == [tool for tool, _argv in EXPECTED]
    assert (beside / "helm").is_file()


def test_a_chart_without_repository_is_refused_before_anything_runs(lab_files, tmp_path):
    lab_files.edit("topologies/platform/lab.yaml", LAB_RELEASES, "")
    cluster = Cluster(tmp_path, lab_files.load())
    with pytest.raises(PlatformUnavailable) as raised:
        apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)
    assert raised.value.reason == (
        "no Helm chart repository set for prometheus-community (kube-prometheus-stack); nvidia (network-operator, "
        "gpu-operator); kubeflow (training-operator): add the site's mirror under platform.helm_repositories in "
        "topologies/platform/lab.yaml and render again")
    assert cluster.calls() == []


def test_an_unrendered_platform_is_refused(cluster):
    (cluster.project / "platform" / "manifests" / "kustomization.yaml").unlink()
    with pytest.raises(PlatformUnavailable, match="has no manifests"):
        apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)


# ------------------------------------------------------------------ which kubeconfig


def test_the_fetched_kubeconfig_wins_over_the_environment(tmp_path):
    fetched = tmp_path / "build/lab/artifacts/kubeconfig"
    fetched.parent.mkdir(parents=True)
    fetched.write_text("fetched")
    (tmp_path / "other").write_text("other")
    assert platform_kubeconfig(tmp_path / "build/lab", {"KUBECONFIG": str(tmp_path / "other")}) == fetched


def test_kubeconfig_from_the_environment_when_none_was_fetched(tmp_path):
    (tmp_path / "b").write_text("b")
    environ = {"KUBECONFIG": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    assert platform_kubeconfig(tmp_path / "build/lab", environ) == tmp_path / "b"


def test_the_ambient_kube_config_is_never_used(tmp_path, monkeypatch):
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube/config").write_text("someone else's cluster")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert platform_kubeconfig(tmp_path / "build/lab") is None


def test_a_release_the_cluster_already_runs_as_rendered_is_not_upgraded_again(cluster, tmp_path):
    """helm says kueue is deployed at the rendered chart version with the rendered values: no
    `helm upgrade` for it (a second deploy adds no revision); the others still run."""
    import yaml

    values = yaml.safe_load((cluster.project / "platform/helm/kueue/values.yaml").read_text())
    installed = tmp_path / "releases.json"
    installed.write_text(json.dumps({"kueue": {"list": {"status": "deployed", "chart": "kueue-0.17.0"},
                                               "values": values}}))
    progress: list[str] = []
    cluster.set(releases=str(installed))
    assert apply_platform(cluster.project, cluster.kubeconfig, progress=progress.append, environ=cluster.environ).ok
    assert [(c["tool"], c["argv"]) for c in cluster.calls()] == [*EXPECTED[:-2], EXPECTED[-1]]
    assert "helm upgrade --install kueue: unchanged" in progress


@pytest.mark.parametrize("drift", [
    {"list": {"status": "deployed", "chart": "kueue-0.16.0"}},
    {"list": {"status": "failed", "chart": "kueue-0.17.0"}},
    {"values": {"managerConfig": {}}},
])
def test_a_release_that_differs_from_the_render_is_upgraded(cluster, tmp_path, drift):
    import yaml

    values = yaml.safe_load((cluster.project / "platform/helm/kueue/values.yaml").read_text())
    release = {"list": {"status": "deployed", "chart": "kueue-0.17.0"}, "values": values} | drift
    installed = tmp_path / "releases.json"
    installed.write_text(json.dumps({"kueue": release}))
    cluster.set(releases=str(installed))
    assert apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ).ok
    assert [(c["tool"], c["argv"]) for c in cluster.calls()] == EXPECTED


def test_a_passing_connection_failure_is_tried_again(cluster, tmp_path, monkeypatch):
    """The API's VIP moving back to a node returning from maintenance resets a connection: the
    step runs again (a minute at most) instead of failing the platform."""
    import rackform.run.platform_apply as platform_apply

    monkeypatch.setattr(platform_apply, "RETRY_PAUSE_S", 0.0)
    cluster.set(flaky=str(tmp_path / "flaked"))
    result = apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)
    assert result.ok
    assert [(c["tool"], c["argv"]) for c in cluster.calls()] == [EXPECTED[0], *EXPECTED]


def test_a_lasting_failure_is_not_tried_again(cluster):
    cluster.set(fail="gpu-operator")
    result = apply_platform(cluster.project, cluster.kubeconfig, environ=cluster.environ)
    assert not result.ok
    assert [c["argv"][1] for c in cluster.calls() if c["tool"] == "helm"].count("gpu-operator") == 1
