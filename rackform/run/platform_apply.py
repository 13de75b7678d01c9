"""Apply the rendered platform (build/<site>/platform/) to the site's cluster with kubectl and helm.

The `platform` stage has no playbook: `rackform deploy --stage platform` calls
`apply_platform`, which runs, in this order and from build/<site>/platform/:

    kubectl apply --server-side --field-manager=rackform -k manifests
    helm upgrade <release> <chart> --install --repo <url> --version <pinned> --namespace <ns>
         --values helm/<release>/values.yaml --wait --atomic --timeout <s>s     (per release, releases.yaml order)
    kubectl apply --server-side --field-manager=rackform -k after-releases    (when rendered: Kueue queues)
    kubectl delete clusterqueue <tenant>; kubectl delete namespace <tenant>    (per --prune-tenant only)

A release the cluster already runs as rendered (`helm list`: deployed, the same chart at the
same version; `helm get values`: the same values) is not upgraded again: a second deploy adds no
Helm revision and changes nothing. In check mode the same commands run with `--dry-run=server` (helm 3.13 or later) instead of
waiting. It stops at the first failure, as Pulumi stops at a failed resource. Both tools
get the kubeconfig through $KUBECONFIG only, and of the rest of the environment only what
rackform.process_environment allows them (profiles `kubectl` and `helm`: no secrets, no
HELM_KUBECONTEXT or HELM_NAMESPACE that would point helm elsewhere); their output is not
kept (a helm dry run prints rendered Secrets), a failure reports the end of its stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from rackform.installed_tools import find_tool, not_found
from rackform.k8s.manifests import FIELD_MANAGER, REPOSITORY_NOT_SET
from rackform.process_environment import tool_environment
from rackform.render.platform_files import (
    AFTER_RELEASES_DIR,
    AFTER_RELEASES_KUSTOMIZATION,
    HELM_DIR,
    KUSTOMIZATION,
    MANIFESTS_DIR,
    PLATFORM_DIR,
    RELEASE_FILE,
    RELEASE_INDEX,
    VALUES_FILE,
)
from rackform.run import interrupt
from rackform.run.ansible import RunResult, TaskFailure

FETCHED_KUBECONFIG = Path("artifacts") / "kubeconfig"
"""Where the kubernetes stage fetches the admin kubeconfig, relative to build/<site>/."""
MANIFESTS_TIMEOUT_S = 300
HELM_GRACE_S = 60
"""Seconds beyond helm's own --timeout before the process is given up on."""
STDERR_TAIL_CHARS = 600
PRUNE_TIMEOUT_S = 300
"""A namespace's deletion waits for its pods to stop and their finalizers."""
ATTEMPTS = 10
RETRY_PAUSE_S = 6.0
"""A step that meets a passing trouble is run again, a minute at most: the API through its VIP
while the VIP moves (a control-plane node back from maintenance takes it again), or a release's
admission webhook (Kueue's), which answers some seconds after its Deployment is Ready."""
TRANSIENT = re.compile(
    r"Unable to connect to the server|connection (refused|reset)|i/o timeout|TLS handshake timeout"
    r"|currently unable to handle the request|etcdserver: (leader changed|request timed out)"
    r"|Kubernetes cluster unreachable|failed calling webhook|no endpoints available")
"""Failures worth another try; any other failure (a refused object, a chart error) stops at once."""
CLUSTER = "cluster"
"""The `host` of a platform failure: the platform acts on the cluster, not on a machine."""


class PlatformUnavailable(Exception):
    """The platform cannot be applied from here; `reason` says plainly what is missing."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Step:
    task: str
    """What a person reads: `kubectl apply -k manifests`, `helm upgrade --install gpu-operator`."""
    argv: tuple[str, ...]
    timeout_s: int
    attempts: int = ATTEMPTS
    """Tries before the step fails when its failure is a passing one (TRANSIENT); 1 in check mode."""
    release: InstalledRelease | None = None
    """A Helm release step: what the cluster must already run for the step to be skipped."""

    @property
    def tool(self) -> str:
        """`kubectl` or `helm`: whose profile of rackform.process_environment the step runs with."""
        return Path(self.argv[0]).name


@dataclass(frozen=True, slots=True)
class InstalledRelease:
    """A release as `helm upgrade --install` leaves it: deployed, this chart at this version, these values."""

    name: str
    namespace: str
    chart: str
    """`<chart>-<version>`, as `helm list` names a release's chart."""
    values_file: str
    """Relative to platform/."""


def platform_kubeconfig(project_dir: Path, environ: Mapping[str, str] | None = None) -> Path | None:
    """The kubeconfig the platform is applied with, or None.

    The one the kubernetes stage fetched (build/<site>/artifacts/kubeconfig) wins: it is this
    site's cluster by construction. Else $KUBECONFIG when set (a cluster bootstrapped outside
    rackform), its first entry that exists. Never ~/.kube/config: an ambient default could be
    another cluster.
    """
    environ = os.environ if environ is None else environ
    fetched = Path(project_dir) / FETCHED_KUBECONFIG
    if fetched.is_file():
        return fetched
    for entry in environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry and Path(entry).expanduser().is_file():
            return Path(entry).expanduser()
    return None


def _load(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlatformUnavailable(f"{path} is missing: render the site again (rackform render)") from None
    if not isinstance(data, dict):
        raise PlatformUnavailable(f"{path}: expected a mapping; render the site again (rackform render)")
    return data


def _releases(platform_dir: Path) -> list[dict]:
    releases = []
    for name in _load(platform_dir.parent / RELEASE_INDEX).get("releases") or []:
        record = _load(platform_dir.parent / HELM_DIR / str(name) / RELEASE_FILE)
        missing = [key for key in ("name", "chart", "repository", "version", "namespace") if not record.get(key)]
        if missing:
            raise PlatformUnavailable(f"{platform_dir.parent / HELM_DIR / str(name) / RELEASE_FILE}: "
                                      f"missing {', '.join(missing)}")
        releases.append(record)
    return releases


def _unset_repositories(releases: list[dict], site: str) -> None:
    unset: dict[str, list[str]] = {}
    for release in releases:
        if str(release["repository"]).startswith(REPOSITORY_NOT_SET):
            unset.setdefault(str(release["repository"]).rsplit("/", 1)[-1], []).append(str(release["name"]))
    if unset:
        names = "; ".join(f"{alias} ({', '.join(names)})" for alias, names in unset.items())
        raise PlatformUnavailable(f"no Helm chart repository set for {names}: add the site's mirror under "
                                  f"platform.helm_repositories in topologies/platform/{site}.yaml and render again")


def _binaries(environ: Mapping[str, str]) -> tuple[str, str]:
    """kubectl and helm: beside rackform first (`make install` puts helm there), then on the PATH of `environ`."""
    path = environ.get("PATH", os.defpath)
    found = {tool: find_tool(tool, path=path) for tool in ("kubectl", "helm")}
    missing = [tool for tool, where in found.items() if where is None]
    if missing:
        raise PlatformUnavailable(f"{not_found(missing)}: install {'them' if len(missing) > 1 else 'it'} "
                                  f"to apply the platform")
    return found["kubectl"], found["helm"]  # type: ignore[return-value]


def platform_steps(project_dir: Path, kubectl: str, helm: str, *, check: bool = False,
                   prune_tenants: Collection[str] = ()) -> list[Step]:
    """The commands, in order, that apply build/<site>/platform/ (run from that folder), then delete
    the tenants `prune_tenants` names (removed from the design: rackform.run.retained)."""
    platform_dir = Path(project_dir) / PLATFORM_DIR
    if not (Path(project_dir) / KUSTOMIZATION).is_file():
        raise PlatformUnavailable(f"{platform_dir} has no manifests: a site without `kubernetes:` has no platform; "
                                  "otherwise render the site first (rackform render)")
    manifests = os.path.relpath(Path(project_dir) / MANIFESTS_DIR, platform_dir)
    dry_run = ["--dry-run=server"] if check else []
    steps = [Step(f"kubectl apply -k {manifests}",
                  (kubectl, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-k", manifests, *dry_run),
                  MANIFESTS_TIMEOUT_S)]
    releases = _releases(platform_dir)
    _unset_repositories(releases, Path(project_dir).name)
    helm_dir = os.path.relpath(Path(project_dir) / HELM_DIR, platform_dir)
    for release in releases:
        name, timeout_s = str(release["name"]), int(release.get("timeout_s") or 900)
        finish = dry_run or ["--wait", "--atomic", "--timeout", f"{timeout_s}s"]
        values = f"{helm_dir}/{name}/{release.get('values') or VALUES_FILE}"
        steps.append(Step(f"helm upgrade --install {name}", (
            helm, "upgrade", name, str(release["chart"]), "--install",
            "--repo", str(release["repository"]), "--version", str(release["version"]),
            "--namespace", str(release["namespace"]),
            "--values", values, *finish,
        ), timeout_s + HELM_GRACE_S, release=InstalledRelease(
            name, str(release["namespace"]), f"{release['chart']}-{release['version']}", values)))
    if (Path(project_dir) / AFTER_RELEASES_KUSTOMIZATION).is_file():
        after = os.path.relpath(Path(project_dir) / AFTER_RELEASES_DIR, platform_dir)
        steps.append(Step(f"kubectl apply -k {after}",
                          (kubectl, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-k", after, *dry_run),
                          MANIFESTS_TIMEOUT_S))
    for tenant in sorted(prune_tenants):
        steps += [
            Step(f"delete tenant {tenant}'s queue", (kubectl, "delete", "clusterqueues.kueue.x-k8s.io", tenant,
                                                     "--ignore-not-found", *dry_run), MANIFESTS_TIMEOUT_S),
            Step(f"delete tenant {tenant}'s namespace", (kubectl, "delete", "namespace", tenant, "--ignore-not-found",
                                                         f"--timeout={PRUNE_TIMEOUT_S}s", *dry_run),
                 PRUNE_TIMEOUT_S + HELM_GRACE_S),
        ]
    return steps


QUERY_TIMEOUT_S = 60


def _environment(tool: str, kubeconfig: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a kubectl or helm (`tool`): the allowed part of `environ` and the
    kubeconfig, which wins over any $KUBECONFIG there."""
    return tool_environment(tool, {"KUBECONFIG": str(kubeconfig)}, environ=environ)


def _helm_json(argv: list[str], cwd: Path, kubeconfig: Path, environ: Mapping[str, str]) -> object:
    """What a helm query printed as JSON; None when it failed or printed something else."""
    try:
        done = subprocess.run(argv, cwd=cwd, env=_environment("helm", kubeconfig, environ), capture_output=True,
                              text=True, timeout=QUERY_TIMEOUT_S, check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def release_current(helm: str, release: InstalledRelease, cwd: Path, kubeconfig: Path,
                    environ: Mapping[str, str]) -> bool:
    """The cluster already runs the release as rendered: deployed, same chart and version, same
    values. Then `helm upgrade` would only add a revision: a second deploy changes nothing.
    Anything unreadable counts as not current (the upgrade runs, as it would without this)."""
    listed = _helm_json([helm, "list", "--namespace", release.namespace, "--filter", f"^{release.name}$",
                         "--output", "json"], cwd, kubeconfig, environ)
    if not (isinstance(listed, list) and len(listed) == 1 and isinstance(listed[0], dict)
            and listed[0].get("status") == "deployed" and listed[0].get("chart") == release.chart):
        return False
    live = _helm_json([helm, "get", "values", release.name, "--namespace", release.namespace, "--output", "json"],
                      cwd, kubeconfig, environ)
    try:
        rendered = yaml.safe_load((cwd / release.values_file).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    return (live or {}) == (rendered or {})


def _tail(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= STDERR_TAIL_CHARS else "..." + text[-STDERR_TAIL_CHARS:]


CANCELLED_RC = -1
"""The rc of a step stopped by a cancel (the RunResult's status says "canceled")."""
CANCEL_POLL_S = 0.5
"""How often a running step looks for a cancel (the first Ctrl-C, or Pulumi's Cancel)."""
STOP_GRACE_S = 30
"""Seconds a cancelled kubectl or helm has, after SIGTERM, before it is killed."""


def _run(step: Step, cwd: Path, kubeconfig: Path, environ: Mapping[str, str],
         cancel_requested: Callable[[], bool]) -> tuple[int, TaskFailure | None]:
    """The step's exit status and, when it failed, why; CANCELLED_RC when a cancel stopped it."""
    process = subprocess.Popen(step.argv, cwd=cwd, env=_environment(step.tool, kubeconfig, environ),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + step.timeout_s
    while True:
        try:
            _out, err = process.communicate(timeout=CANCEL_POLL_S)
            break
        except subprocess.TimeoutExpired:
            if cancel_requested():  # helm gets SIGTERM first: --atomic rolls a half-made release back
                _stop(process, signal_first=True)
                return CANCELLED_RC, TaskFailure(CLUSTER, step.task, "cancelled")
            if time.monotonic() > deadline:
                _stop(process, signal_first=False)
                return 1, TaskFailure(CLUSTER, step.task, f"no answer within {step.timeout_s} s")
    if process.returncode != 0:
        return process.returncode, TaskFailure(
            CLUSTER, step.task, f"exit {process.returncode}: {_tail(err) or 'no error output'}")
    return 0, None


def _stop(process: subprocess.Popen, *, signal_first: bool) -> None:
    if signal_first:
        process.terminate()
        try:
            process.communicate(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            pass
    process.kill()
    process.communicate()


def apply_platform(
    project_dir: Path,
    kubeconfig: Path | None,
    *,
    check: bool = False,
    progress: Callable[[str], object] | None = None,
    environ: Mapping[str, str] | None = None,
    prune_tenants: Collection[str] = (),
    cancel_requested: Callable[[], bool] = interrupt.cancel_requested,
) -> RunResult:
    """Apply build/<site>/platform/ to the cluster `kubeconfig` reaches.

    A cancel (the first Ctrl-C of `rackform deploy`, Pulumi's Cancel) stops the running kubectl
    or helm and starts no later step: the result is "canceled", which the stage runner records
    nothing for.

    Raises PlatformUnavailable (nothing has run) without a kubeconfig, kubectl or helm,
    rendered platform files or a chart repository for every release. `progress` gets
    each step's task before it runs. `environ` (default: this process's) is where kubectl and
    helm are looked for (its PATH) and what their environment is taken from: its allowed part only.
    """
    project_dir = Path(project_dir).resolve()
    environ = dict(os.environ if environ is None else environ)
    if kubeconfig is None or not Path(kubeconfig).is_file():
        where = f"{kubeconfig} does not exist" if kubeconfig is not None else (
            f"the kubernetes stage fetched none to {project_dir / FETCHED_KUBECONFIG} and $KUBECONFIG names no file")
        raise PlatformUnavailable(f"no kubeconfig for site {project_dir.name}: {where}")
    kubectl, helm = _binaries(environ)
    steps = platform_steps(project_dir, kubectl, helm, check=check, prune_tenants=prune_tenants)
    kubeconfig = Path(kubeconfig).resolve()
    started = time.monotonic()
    rc, failure = 0, None
    cwd = project_dir / PLATFORM_DIR
    for step in steps:
        if cancel_requested():
            rc, failure = CANCELLED_RC, TaskFailure(CLUSTER, step.task, "not started: cancelled")
            break
        if step.release is not None and not check and release_current(helm, step.release, cwd, kubeconfig, environ):
            if progress is not None:
                progress(f"{step.task}: unchanged")
            continue
        if progress is not None:
            progress(step.task)
        for attempt in range(1 if check else step.attempts):  # a dry run tries once: no webhook starts
            if attempt:
                time.sleep(RETRY_PAUSE_S)
            rc, failure = _run(step, cwd, kubeconfig, environ, cancel_requested)
            if failure is None or rc == CANCELLED_RC or not TRANSIENT.search(failure.message):
                break
        if failure is not None:
            break
    status = "canceled" if rc == CANCELLED_RC else "failed" if failure else "successful"
    return RunResult(
        playbook="platform", status=status, rc=rc, hosts={},
        failures=[failure] if failure else [], duration_s=time.monotonic() - started,
    )


def check_ready(project_dir: Path, environ: Mapping[str, str] | None = None, *,
                kubeconfig_to_come: bool = False) -> Path | None:
    """The kubeconfig to apply the platform with; PlatformUnavailable, saying what is missing,
    when it cannot be applied from here (checked before a deploy starts, so the summary says why).
    `kubeconfig_to_come`: the run bootstraps the cluster first, which fetches it (None is returned
    while it is not there yet)."""
    environ = dict(os.environ if environ is None else environ)
    kubeconfig = platform_kubeconfig(project_dir, environ)
    if kubeconfig is None and not kubeconfig_to_come:
        raise PlatformUnavailable(f"no kubeconfig for site {Path(project_dir).name}: the kubernetes stage fetched "
                                  f"none to {Path(project_dir) / FETCHED_KUBECONFIG} and $KUBECONFIG names no file")
    _binaries(environ)
    return kubeconfig
