"""State a team shares: the real Pulumi engine (`make pulumi`) on a bucket of a real S3 server.

The server is versitygw 1.8.0 (a gateway that serves a POSIX folder over the S3 API), built
here from its Go module (sources/versitygw/1.8.0/, cached by `rackform.mirror.gobuild`; the
first build takes minutes) and started on 127.0.0.1 with its posix backend on a tmp folder,
so every object the engine writes is a file under `<folder>/<bucket>/`. Each operator is a
project folder of its own with a `PULUMI_HOME` of its own (its own `pulumi login`), as on
separate machines; they share the bucket, the stack file and the passphrase.

- a shipped site's stack (`edge`) is made and previewed with its state in the bucket, and a
  second operator sees it;
- two `pulumi up` of one stack at the same time: the second is refused by the backend's lock
  (an object under `.pulumi/locks/` in the bucket, naming the first run's pid) while the first
  runs, and the next `pulumi up` after the first ends runs.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_stack import REPO_ROOT, EngineProject, engine_missing

pytestmark = [pytest.mark.slow, pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))]

VERSITYGW_VERSION = "1.8.0"
VERSITYGW_PACKAGE = "github.com/versity/versitygw/cmd/versitygw"
ACCESS_KEY = "RACKFORMTEAMKEY"
SECRET_KEY = "rackform-team-secret-4b1e"
START_S = 60
LOCK_WAIT_S = 180
SLOW_CREATE_S = 20
"""How long the lock probe's one resource takes to create: the first `pulumi up` holds the lock
at least this long."""


def versitygw_build():
    """versitygw as its releases are built (goreleaser: CGO off, main.Version stamped, no v)."""
    from rackform.mirror import gobuild
    from rackform.mirror.source import source_dir

    return gobuild.GoBuild("versitygw", VERSITYGW_VERSION, source_dir("versitygw", VERSITYGW_VERSION),
                           {VERSITYGW_PACKAGE: "versitygw"}, ("-s", "-w", f"-X main.Version={VERSITYGW_VERSION}"))


@pytest.fixture(scope="module")
def versitygw() -> Path:
    if shutil.which("go") is None:
        pytest.skip("no `go` on PATH: versitygw is built from its Go module (sources/versitygw/)")
    from rackform.mirror import gobuild

    built = gobuild.build(versitygw_build(), progress=lambda line: print(line, flush=True))
    if not built.cached:
        print(f"versitygw {VERSITYGW_VERSION}: built in {built.seconds:.0f} s")
    return built.binaries["versitygw"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class S3Server:
    binary: Path
    data: Path
    """The posix backend's folder: one folder per bucket, one file per object."""
    port: int
    process: subprocess.Popen
    log: Path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def make_bucket(self, bucket: str) -> Path:
        """A bucket made through the gateway's admin API (`pulumi login` makes none); its folder."""
        subprocess.run([str(self.binary), "admin", "--access", ACCESS_KEY, "--secret", SECRET_KEY,
                        "--endpoint-url", self.endpoint, "create-bucket", "--bucket", bucket, "--owner", ACCESS_KEY],
                       check=True, capture_output=True, text=True, timeout=60)
        folder = self.data / bucket
        assert folder.is_dir(), f"versitygw made no folder for bucket {bucket}:\n{self.log.read_text()[-2000:]}"
        return folder

    def login_url(self, bucket: str) -> str:
        """The URL a user gives `pulumi login`, with the parameter names the s3 guides use: the engine
        turns disableSSL into gocloud.dev's disable_https (and the endpoint into http://...) itself."""
        return f"s3://{bucket}?endpoint=127.0.0.1:{self.port}&s3ForcePathStyle=true&disableSSL=true&region=us-east-1"


def wait_for_port(server: S3Server) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"versitygw exited ({server.process.returncode}):\n{server.log.read_text()[-4000:]}")
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"versitygw not listening on {server.port} after {START_S} s:\n"
                         f"{server.log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def s3_server(versitygw: Path, tmp_path_factory) -> S3Server:
    folder = tmp_path_factory.mktemp("versitygw")
    data = folder / "data"
    data.mkdir()
    log = folder / "versitygw.log"
    for _attempt in range(3):  # the free port may be taken between the probe and the bind
        port = free_port()
        with open(log, "w") as out:
            process = subprocess.Popen([str(versitygw), "--access", ACCESS_KEY, "--secret", SECRET_KEY,
                                        "--port", f"127.0.0.1:{port}", "posix", str(data)],
                                       stdout=out, stderr=subprocess.STDOUT, cwd=folder)
        server = S3Server(versitygw, data, port, process, log)
        try:
            wait_for_port(server)
            break
        except AssertionError:
            if process.poll() is None:
                raise
    else:
        raise AssertionError(f"versitygw could not bind a free port in 3 tries:\n{log.read_text()[-4000:]}")
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def aws_env() -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


def test_the_server_is_the_one_built_here(versitygw: Path):
    answer = subprocess.run([str(versitygw), "--version"], capture_output=True, text=True, timeout=60)
    assert f"Version  : {VERSITYGW_VERSION}" in answer.stdout


def test_a_shipped_sites_stack_lives_in_the_bucket_and_a_second_operator_sees_it(s3_server: S3Server,
                                                                                    tmp_path: Path):
    bucket = s3_server.make_bucket("rackform-state")
    alice = EngineProject.make(tmp_path / "alice", backend_url=s3_server.login_url("rackform-state"), **aws_env())
    assert f"Backend URL: {alice.login_url}" in alice.run("whoami", "--verbose").stdout
    alice.init("edge")
    steps = alice.preview_json("edge")
    assert steps and {step["op"] for step in steps} == {"create"}

    # The stack's state object is a file in the bucket's folder on the server's disk; the local
    # file backend EngineProject would otherwise use holds nothing.
    stack_object = bucket / ".pulumi" / "stacks" / "rackform" / "edge.json"
    assert stack_object.is_file(), sorted(str(p.relative_to(bucket)) for p in bucket.rglob("*"))
    assert json.loads(stack_object.read_text())["checkpoint"]["stack"] == "organization/rackform/edge"
    assert list(alice.backend.iterdir()) == []

    # Another operator: another PULUMI_HOME, logged in to the same bucket, lists the same stack.
    bob = EngineProject.make(tmp_path / "bob", backend_url=s3_server.login_url("rackform-state"), **aws_env())
    stacks = json.loads(bob.run("stack", "ls", "--json").stdout)
    assert [stack["name"] for stack in stacks] == ["edge"]


LOCK_PROBE = f'''\
"""One dynamic resource whose create takes {SLOW_CREATE_S} s: a `pulumi up` that holds the stack's lock that long."""
import time

import pulumi
from pulumi.dynamic import CreateResult, Resource, ResourceProvider


class Slow(ResourceProvider):
    def create(self, props):
        time.sleep({SLOW_CREATE_S})
        return CreateResult(id_="slow", outs=props)


class SlowResource(Resource):
    def __init__(self, name):
        super().__init__(Slow(), name, {{"seconds": {SLOW_CREATE_S}}})


SlowResource("slow")
'''


def lock_probe_operator(folder: Path, backend_url: str) -> EngineProject:
    """An operator's checkout of the lock probe: a Python project of its own (`runtime: python`; the
    engine's launcher, .venv/bin/pulumi, puts the venv's bin first on PATH, so the language host
    and the dynamic-provider host run the venv's python3, which has the pulumi SDK)."""
    project = folder / "project"
    project.mkdir(parents=True)
    (folder / "home").mkdir()
    (folder / "backend").mkdir()
    (project / "Pulumi.yaml").write_text("name: lock-probe\nruntime: python\n")
    (project / "__main__.py").write_text(LOCK_PROBE)
    operator = EngineProject(project, REPO_ROOT, aws_env(), backend_url)
    operator.run("login", backend_url)
    return operator


def lock_objects(bucket: Path) -> list[Path]:
    return sorted((bucket / ".pulumi" / "locks").rglob("*.json"))


def test_two_concurrent_ups_of_one_stack_the_second_is_refused_by_the_backends_lock(s3_server: S3Server,
                                                                                      tmp_path: Path):
    """Not rackform's own stack: a site's `pulumi up` drives its hardware (the lab), and its program
    takes the site's lock (build/.locks/<site>.lock, a file lock on the machine that runs it) for
    the whole run, which on this one machine would be a second lock in play. Operators on separate
    machines each have their own build/ and site lock; what keeps their runs of one stack apart is
    the backend's lock, tested here alone: a probe project whose one resource takes
    SLOW_CREATE_S to create, so the first run still holds the lock when the second asks."""
    bucket = s3_server.make_bucket("team-lock")
    url = s3_server.login_url("team-lock")
    alice = lock_probe_operator(tmp_path / "alice", url)
    bob = lock_probe_operator(tmp_path / "bob", url)
    alice.init("probe")
    # The passphrase provider's salt is in alice's stack file: bob has it as from a shared repository.
    shutil.copyfile(alice.folder / "Pulumi.probe.yaml", bob.folder / "Pulumi.probe.yaml")
    assert "encryptionsalt" in (bob.folder / "Pulumi.probe.yaml").read_text()
    assert lock_objects(bucket) == []

    first = alice.start("up", "--yes", "-s", "probe")
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while not lock_objects(bucket) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        locks = lock_objects(bucket)
        assert len(locks) == 1, f"no lock object in the bucket while alice's pulumi up runs: {locks}"
        assert locks[0].parent == bucket / ".pulumi" / "locks" / "organization" / "lock-probe" / "probe"
        assert json.loads(locks[0].read_text())["pid"] == first.pid

        second = bob.run("up", "--yes", "-s", "probe", check=False)
        assert first.poll() is None, "alice's pulumi up ended before bob's was answered: no overlap was tested"
    finally:
        first_output, _ = first.communicate(timeout=600)
    refusal = second.stdout + second.stderr
    assert second.returncode != 0
    assert ("the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or "
            "delete the lock file with `pulumi cancel`.") in refusal, refusal
    assert f"s3://team-lock/.pulumi/locks/organization/lock-probe/probe/{locks[0].name}" in refusal
    assert f"(pid {first.pid})" in refusal
    assert first.returncode == 0, first_output[-4000:]
    assert "+ 2 created" in first_output, first_output[-4000:]

    # The first run released its lock; bob's next pulumi up runs (nothing left to change).
    assert lock_objects(bucket) == []
    bob.run("up", "--yes", "-s", "probe")
    history = json.loads(bob.run("stack", "history", "--json", "-s", "probe").stdout)
    assert sorted((update["kind"], update["result"]) for update in history) == [("update", "succeeded")] * 2
