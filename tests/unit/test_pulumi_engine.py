"""The shipped stacks under the real Pulumi engine (`make pulumi`), before any hardware is touched.

`pulumi preview` of every shipped stack, as a new user makes it (`pulumi stack init`, nothing
set): the program runs under the engine's language host, every resource is checked by its
provider (the dynamic providers in the engine's provider host), and no plugin is needed beyond
what the engine carries. The stack configuration's rules, as the engine enforces them: a
password set in plaintext is refused, one set with --secret is stored encrypted.

`pulumi up` of the lab, with its cluster: tests/lab/test_pulumi_lab.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_stack import REPO_ROOT, EngineProject, engine_missing

pytestmark = [pytest.mark.slow, pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))]

SHIPPED_STACKS = sorted(path.name.removeprefix("Pulumi.").removesuffix(".yaml")
                        for path in REPO_ROOT.glob("Pulumi.*.yaml"))
PASSWORD = "switch-Pw-6d1f"


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProject:
    project = EngineProject.make(tmp_path_factory.mktemp("engine"))
    for stack in SHIPPED_STACKS:
        project.init(stack)
    return project


def test_the_engine_is_the_pinned_one(engine: EngineProject):
    from rackform.mirror.pulumi_engine import CLI_VERSION

    assert engine.run("version").stdout.strip() == f"v{CLI_VERSION}"


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_a_preview_of_every_shipped_stack_succeeds_with_no_secret_set(engine: EngineProject, stack: str):
    steps = engine.preview_json(stack)
    ops = {step["op"] for step in steps}
    types = {step["newState"]["type"] for step in steps}
    assert ops == {"create"}, ops
    assert f"pulumi-python:dynamic/rackform:Playbook" in types
    # every resource is the program's own or a dynamic one: no provider plugin to download
    assert [t for t in types if not t.startswith(("rackform:index:", "pulumi-python:dynamic/", "pulumi:pulumi:Stack"))] \
        == []


def test_a_password_set_in_plaintext_is_refused_and_named(engine: EngineProject):
    """The CLI asks for --secret on its own (the value looks like one); with --plaintext, or a
    value written into the stack file by hand, the program refuses it."""
    engine.run("config", "set", "--plaintext", "rackform:switchPassword", PASSWORD, "-s", "edge")
    try:
        refused = engine.run("preview", "-s", "edge", check=False)
    finally:
        engine.run("config", "rm", "rackform:switchPassword", "-s", "edge")
    assert refused.returncode != 0
    assert ("stack config rackform:switchPassword is set in plaintext in Pulumi.edge.yaml; set it with "
            "`pulumi config set --secret rackform:switchPassword -s edge`") in refused.stdout + refused.stderr


def test_a_password_set_with_secret_is_stored_encrypted_and_the_preview_passes(engine: EngineProject):
    engine.run("config", "set", "--secret", "rackform:switchPassword", PASSWORD, "-s", "campus")
    stack_file = (engine.folder / "Pulumi.campus.yaml").read_text()
    assert "rackform:switchPassword:\n    secure: " in stack_file and PASSWORD not in stack_file
    preview = engine.run("preview", "-s", "campus")
    assert PASSWORD not in preview.stdout + preview.stderr + engine.state_text()


def test_a_second_stack_of_a_site_is_refused_by_the_program(engine: EngineProject):
    engine.init("lab-staging")
    engine.run("config", "set", "rackform:site", "lab", "-s", "lab-staging")
    refused = engine.run("preview", "-s", "lab-staging", check=False)
    assert refused.returncode != 0
    assert "site 'lab' already has the stack lab (Pulumi.lab.yaml)" in refused.stdout + refused.stderr


def test_the_committed_stack_files_are_untouched(engine: EngineProject):
    """The engine wrote salts and secrets into the project's copies only."""
    for stack in SHIPPED_STACKS:
        assert "encryptionsalt" not in (REPO_ROOT / f"Pulumi.{stack}.yaml").read_text()
        assert "encryptionsalt" in (engine.folder / f"Pulumi.{stack}.yaml").read_text()


def test_a_stack_without_a_stack_file_deploys_the_site_named_like_it(tmp_path: Path):
    """A user's `pulumi stack init edge` with no Pulumi.edge.yaml: every key has its default."""
    engine = EngineProject.make(tmp_path)
    (engine.folder / "Pulumi.edge.yaml").unlink()
    engine.init("edge")
    outputs = engine.run("preview", "-s", "edge").stdout
    assert 'site      : "edge"' in outputs


def test_an_up_without_the_site_mirrors_bundle_is_refused_before_anything_runs(tmp_path: Path):
    """As `rackform deploy` refuses it: the stack stops before registering a resource (else
    provision and fabric would change every host and the os stage fail on every node)."""
    engine = EngineProject.make(tmp_path, RACKFORM_MIRROR_BUNDLES=str(tmp_path / "no-bundles"))
    engine.init("lab")
    preview = engine.run("preview", "-s", "lab")
    assert "`pulumi up` will refuse this site" in preview.stdout and "rackform mirror build lab" in preview.stdout
    refused = engine.run("up", "-s", "lab", "--yes", "--skip-preview", check=False)
    assert refused.returncode != 0
    assert "site 'lab' cannot be deployed yet" in refused.stdout and "rackform mirror build lab" in refused.stdout
    resources = json.loads(engine.run("stack", "export", "-s", "lab").stdout)["deployment"].get("resources") or []
    assert [r["type"] for r in resources if r["type"].startswith("pulumi-python:dynamic")] == []
