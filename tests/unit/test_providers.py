"""The `Playbook` dynamic provider, called directly (Pulumi's mocks never call providers).

Covers: check/diff/read; the dill round trip exactly as the engine does it (in this
process and in a fresh one started in the program directory, as Pulumi starts its
dynamic-provider process); create/update running a real playbook on localhost (a
stand-in render); and create with the real render of the lab, its run step replaced.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import dill
import pytest
from stand_in_render import stand_in_environment

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
# Pulumi runs the program with stacks/ first on sys.path (Pulumi.yaml `main: stacks/`).
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from components.stages import stage_digests  # noqa: E402
from providers.playbook import (  # noqa: E402
    OUTPUT_KEYS,
    Playbook,
    PlaybookProvider,
    StageFailed,
    failure_message,
)
from pulumi.dynamic import Config, ConfigureRequest  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime._serialization import _deserialize, _serialize  # noqa: E402

import rackform.render.project  # noqa: E402
import rackform.run.deploy  # noqa: E402
import rackform.run.stage_process  # noqa: E402
import rackform.run.stages  # noqa: E402
from rackform.run import applied  # noqa: E402
from rackform.run.stages import INCOMPLETE_PREFIX  # noqa: E402
from rackform.pipeline import load_and_check  # noqa: E402
from rackform.render.digest import stage_digest  # noqa: E402
from rackform.run.ansible import HostStats, RunResult, TaskFailure  # noqa: E402

PROPS = {"site": "lab", "stage": "fabric", "root": "/srv/rackform", "digest": "sha256:aaa"}


def engine_serialize(provider: PlaybookProvider) -> str:
    """What `pulumi.dynamic.Resource.__init__` stores in the state's `__provider`."""
    serialized, _contains_secrets = _serialize(True, serialize_provider, provider)
    return serialized


def engine_deserialize(serialized: str) -> PlaybookProvider:
    """What `pulumi.dynamic.__main__.get_provider` does in the provider process."""
    provider = _deserialize(lambda: dill.loads(base64.b64decode(serialized)))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    return provider


# ---------------------------------------------------------------- check, diff, read


def test_check_accepts_an_ansible_stage():
    assert PlaybookProvider().check({}, PROPS).failures == []


@pytest.mark.parametrize("stage", ["deploy"])
def test_check_refuses_a_stage_without_playbook(stage: str):
    failures = PlaybookProvider().check({}, PROPS | {"stage": stage}).failures
    assert [(f.property, f.reason.split(";")[0]) for f in failures] == [("stage", f"'{stage}' is not an Ansible stage")]


def test_check_requires_every_input():
    failures = PlaybookProvider().check({}, {"site": "lab"}).failures
    assert sorted(f.property for f in failures) == ["digest", "root", "stage"]


def test_diff_same_digest_is_no_change():
    result = PlaybookProvider().diff("lab/fabric", PROPS | {"changed": 3}, PROPS)
    assert (result.changes, result.replaces) == (False, [])


def test_diff_new_digest_is_an_update_not_a_replacement():
    result = PlaybookProvider().diff("lab/fabric", PROPS, PROPS | {"digest": "sha256:bbb"})
    assert (result.changes, result.replaces) == (True, [])


def test_diff_ignores_where_the_repo_sits():
    result = PlaybookProvider().diff("lab/fabric", PROPS, PROPS | {"root": "/home/ops/rackform"})
    assert result.changes is False


# ---------------------------------------------------------------- engine serialization


def test_provider_is_pickled_by_reference_not_by_value():
    payload = base64.b64decode(engine_serialize(PlaybookProvider()))
    assert b"providers.playbook" in payload and b"PlaybookProvider" in payload
    assert len(payload) < 200  # no module graph (rackform, ansible-runner) travels with it


def test_round_trip_then_diff_in_this_process():
    provider = engine_deserialize(engine_serialize(PlaybookProvider()))
    assert provider.diff("lab/fabric", PROPS, PROPS | {"digest": "sha256:bbb"}).changes is True


PROVIDER_PROCESS = textwrap.dedent("""
    import base64, json, sys
    import dill
    from pulumi.dynamic import Config, ConfigureRequest
    from pulumi.runtime._serialization import _deserialize
    provider = _deserialize(lambda: dill.loads(base64.b64decode(sys.argv[1])))
    provider.configure(ConfigureRequest(config=Config(raw_config={}, project_name="rackform")))
    olds, news = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    result = provider.diff("lab/fabric", olds, news)
    print(json.dumps({"changes": result.changes, "replaces": result.replaces,
                      "loaded": sorted(m for m in sys.modules if m.startswith(("rackform", "ansible_runner")))}))
    """)


def test_round_trip_then_diff_in_a_fresh_provider_process():
    """Pulumi starts `python -m pulumi.dynamic` in the program directory: the pickled
    reference must resolve there, with nothing from the program imported first."""
    serialized = engine_serialize(PlaybookProvider())
    news = PROPS | {"digest": "sha256:bbb"}
    completed = subprocess.run(
        [sys.executable, "-c", PROVIDER_PROCESS, serialized, json.dumps(PROPS), json.dumps(news)],
        cwd=STACKS,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(completed.stdout) == {"changes": True, "replaces": [], "loaded": []}


# ---------------------------------------------------------------- create / update


# A stand-in for the rendered project, shaped like it (ansible.cfg, inventory/hosts.yml,
# one playbook per stage) but acting on localhost: the lab's own playbooks target real
# hosts. Only `render_files` is replaced; the digest, the writer and the run are real.
LOCAL_PROJECT = {
    "validate.yml": """\
- name: Validate (stand-in)
  hosts: all
  gather_facts: false
  tasks:
    - name: Inventory checked
      ansible.builtin.debug: {{msg: checked}}
""",
    "ansible.cfg": "[defaults]\ninventory = inventory\ngathering = explicit\n",
    "inventory/hosts.yml": (
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    ),
    "provision.yml": """\
- name: Provision (stand-in)
  hosts: all
  tasks:
    - name: Marker written
      ansible.builtin.copy: {{dest: "{marker}", content: "provisioned\\n", mode: "0644"}}
""",
    "fabric.yml": """\
- name: Fabric (stand-in)
  hosts: all
  tasks:
    - name: Configure PFC
      ansible.builtin.fail: {{msg: PFC priority 3 not lossless}}
""",
}


def localhost_files(marker: Path) -> dict[str, bytes]:
    return {path: text.format(marker=marker).encode() for path, text in LOCAL_PROJECT.items()}


def stage_props(root: Path, stage: str, digest: str = "sha256:program") -> dict:
    return {"site": "lab", "stage": stage, "root": str(root), "digest": digest}


# Each ansible-playbook run costs seconds: one root and one create are shared by the
# class below; class scope also ends the stand-in render with the class.
@pytest.fixture(scope="class")
def root(tmp_path_factory) -> Path:
    """A repo root with the shipped designs, rendering the localhost stand-in."""
    root = tmp_path_factory.mktemp("repo")
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, root / folder)
    files = localhost_files(root / "marker.txt")
    with pytest.MonkeyPatch.context() as patch:
        # here, and in the stage process the provider starts (tests/stand_in_render.py)
        patch.setattr(rackform.render.project, "render_files", lambda site: dict(files))
        for name, value in stand_in_environment(root / "stand-in", files).items():
            patch.setenv(name, value)
        yield root


@pytest.fixture(scope="class")
def created(root: Path):
    return PlaybookProvider().create(stage_props(root, "provision"))


class TestOnLocalhost:
    """create/update running real playbooks through the real ansible-runner driver."""

    def test_create_runs_the_stage_and_reports_changes(self, created, root: Path):
        assert (created.id, created.outs["changed"], created.outs["ok_hosts"]) == ("lab/provision", 1, 1)
        assert (root / "marker.txt").read_text() == "provisioned\n"

    def test_create_records_the_applied_stage_as_deploy_does(self, created, root: Path):
        recorded = applied.load(root, "lab")["provision"]
        assert (recorded.digest, recorded.via, recorded.complete) == (created.outs["digest"], "pulumi", True)

    def test_create_writes_the_project_under_build(self, created, root: Path):
        assert (root / "build" / "lab" / "provision.yml").is_file()

    def test_create_stores_the_digest_of_what_ran(self, created, root: Path):
        assert created.outs["digest"] == stage_digest(localhost_files(root / "marker.txt"), "provision")

    def test_update_after_create_changes_nothing(self, created, root: Path):
        updated = PlaybookProvider().update(created.id, created.outs, stage_props(root, "provision"))
        assert updated.outs["changed"] == 0

    def test_a_refresh_reads_back_what_the_run_stored_and_plans_nothing(self, created, root: Path):
        """`pulumi refresh` hands read the state the engine kept of create's outputs (JSON): read
        gives all of it back, the digest state/lab.json recorded included, and the next preview
        (the program's digest of the same render) has nothing to run."""
        stored = json.loads(json.dumps(created.outs))
        read = PlaybookProvider().read(created.id, stored)
        assert (read.id, read.outs) == ("lab/provision", stored)
        assert set(OUTPUT_KEYS) <= set(read.outs) and read.outs["changed"] == 1
        assert read.outs["digest"] == applied.load(root, "lab")["provision"].digest
        program = stage_props(root, "provision", stage_digest(localhost_files(root / "marker.txt"), "provision"))
        assert PlaybookProvider().diff(read.id, read.outs, program).changes is False

    def test_a_stage_that_loses_its_only_host_names_it_in_the_last_stage(self, root: Path):
        """fabric fails on localhost, the only host: as `rackform deploy`, the stage itself
        completes for the others (none here), and the chain's last stage fails naming it."""
        with pytest.raises(StageFailed) as failed:
            PlaybookProvider().create(stage_props(root, "fabric") | {"last": True})
        assert "failed hosts (1): localhost" in str(failed.value)
        assert "localhost: Configure PFC: PFC priority 3 not lossless" in str(failed.value)

    def test_a_host_failing_a_middle_stage_is_a_warning_and_marks_the_digest_incomplete(self, root: Path):
        created = PlaybookProvider().create(stage_props(root, "fabric"))
        assert created.outs["failed_hosts"] == ["localhost"]
        assert created.outs["digest"].startswith(INCOMPLETE_PREFIX)
        assert PlaybookProvider().diff(created.id, created.outs, stage_props(root, "fabric", created.outs["digest"]
                                       .removeprefix(INCOMPLETE_PREFIX))).changes is True

    def test_hosts_left_out_by_earlier_stages_are_not_run(self, root: Path):
        with pytest.raises(StageFailed, match="every host failed in an earlier stage"):
            PlaybookProvider().create(stage_props(root, "provision") | {"left_out": ["localhost"]})


# ---------------------------------------------------------------- create with the real render


@pytest.fixture()
def runs(monkeypatch) -> list[tuple[Path, str]]:
    """The run step replaced (the lab's hosts are not reachable from here): records
    which playbook would run where and reports success on one host."""
    calls: list[tuple[Path, str]] = []

    def run_playbook(project_dir: Path, playbook: str, **options) -> RunResult:
        calls.append((project_dir, playbook))
        return RunResult(playbook=playbook, status="successful", rc=0, hosts={"leaf-1": HostStats(ok=3, changed=2)})

    def in_this_process(site, root, stage, *, envvars, left_out, via, cancel_requested):
        """The stage run here, where the stand-in above reaches it (the fresh process the provider
        starts is tested with a real run in tests/unit/test_pulumi_cancel.py)."""
        return rackform.run.stages.run_stages(site, root, [stage], envvars=envvars, left_out=left_out, via=via)

    monkeypatch.setattr(rackform.run.deploy, "run_playbook", run_playbook)
    monkeypatch.setattr(rackform.run.stage_process, "run_stage_in_fresh_process", in_this_process)
    return calls


def test_create_renders_the_real_project_and_runs_the_stage_playbook(site_root: Path, runs):
    PlaybookProvider().create(stage_props(site_root, "fabric"))
    assert runs == [(site_root / "build" / "lab", "validate.yml"), (site_root / "build" / "lab", "fabric.yml")]
    assert (site_root / "build" / "lab" / "fabric.yml").is_file()


def _files(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_delete_of_a_created_stage_runs_nothing_and_changes_no_file(site_root: Path, runs, monkeypatch):
    """Deleting a stage only forgets it: no playbook runs (the stand-in that saw create's runs
    sees none, and ansible-runner is never started), nothing is rendered again, and the
    applied record stays as the run left it."""
    created = PlaybookProvider().create(stage_props(site_root, "fabric"))
    assert [playbook for _, playbook in runs] == ["validate.yml", "fabric.yml"]
    runs.clear()
    monkeypatch.setattr(rackform.run.ansible, "init_runner",
                        lambda *args, **kwargs: pytest.fail("delete started ansible-runner"))
    before = _files(site_root)
    recorded = applied.load(site_root, "lab")["fabric"]

    PlaybookProvider().delete(created.id, created.outs)

    assert runs == []
    assert _files(site_root) == before
    assert applied.load(site_root, "lab")["fabric"] == recorded


def test_digest_after_create_matches_the_programs(site_root: Path, runs):
    """The program and the provider hash the same render: a preview right after
    `pulumi up` shows no stage to run again."""
    site, _ = load_and_check("lab", site_root)
    props = stage_props(site_root, "fabric", digest=stage_digests(site)["fabric"])
    created = PlaybookProvider().create(props)
    assert PlaybookProvider().diff(created.id, created.outs, props).changes is False


# ---------------------------------------------------------------- failure message


def failed_result(failures: int) -> RunResult:
    return RunResult(
        playbook="fabric.yml",
        status="failed",
        rc=2,
        hosts={f"gpu-{n}": HostStats(failed=1) for n in range(failures)},
        failures=[TaskFailure(f"gpu-{n}", "Configure PFC", "timeout") for n in range(failures)],
        run_dir=Path("/srv/build/lab/artifacts/run-1"),
    )


def test_failure_message_points_at_the_artifacts():
    assert "ansible-runner artifacts: /srv/build/lab/artifacts/run-1" in failure_message(
        "lab", "fabric", failed_result(1)
    )


def test_failure_message_stays_short_for_many_hosts():
    message = failure_message("lab", "fabric", failed_result(500))
    assert "failed hosts (500): gpu-0, gpu-1," in message
    assert "... and 480 more failed task(s)" in message
    assert len(message) < 3000


def test_playbook_resource_type_names_the_module():
    assert Playbook._resource_type_name == "dynamic/rackform:Playbook"


# ---------------------------------------------------------------- the kubeconfig output


def test_kubernetes_stage_returns_the_fetched_kubeconfig(site_root: Path, runs):
    artifact = site_root / "build" / "lab" / "artifacts" / "kubeconfig"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("apiVersion: v1\nkind: Config\n")
    assert PlaybookProvider().create(stage_props(site_root, "kubernetes")).outs["kubeconfig"] == (
        "apiVersion: v1\nkind: Config\n")


def test_kubernetes_stage_without_a_fetched_kubeconfig_returns_empty(site_root: Path, runs):
    (site_root / "build" / "lab" / "artifacts" / "kubeconfig").unlink(missing_ok=True)
    assert PlaybookProvider().create(stage_props(site_root, "kubernetes")).outs["kubeconfig"] == ""


def test_other_stages_never_return_the_kubeconfig(site_root: Path, runs, built_bundles):
    artifact = site_root / "build" / "lab" / "artifacts" / "kubeconfig"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("apiVersion: v1\nkind: Config\n")
    assert PlaybookProvider().create(stage_props(site_root, "os")).outs["kubeconfig"] == ""
