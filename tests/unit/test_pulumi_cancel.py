"""Ctrl-C on `pulumi up` while a stage runs, reproduced at the engine's boundary (no Pulumi CLI here).

What the engine does (pulumi/pulumi, pkg/backend cancellation scope and the deployment executor):
the first Ctrl-C (or SIGTERM) to `pulumi` cancels the update's context, the executor calls
`SignalCancellation` on every provider, which is the provider's `Cancel` RPC, starts no new
step and waits for those in flight; the second terminates, closing the plugins, which kills
each provider's process group (plugins are started with their own process group, `Setpgid`, so
the terminal's SIGINT never reaches them).

So the tests start the dynamic-provider host as the engine does (`python -m pulumi.dynamic` in
stacks/), Create a stage whose playbook sleeps, and then: call `Cancel` over gRPC (the first
Ctrl-C), or SIGKILL the host's process group (the engine shutting its plugins down). The stage's project is the localhost
stand-in of test_providers: only `render_files` is replaced, in every Python process that imports
it (tests/stand_in_render.py), since the provider runs each stage in a fresh process
(rackform.run.stage_process). The host runs without GRPC_ENABLE_FORK_SUPPORT=0: the
stage process is what keeps ansible-runner's fork out of the gRPC process.

The same Ctrl-C under the real engine: tests/lab/test_pulumi_lab.py.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import grpc
import pytest
from stand_in_render import stand_in_environment
from google.protobuf import empty_pb2

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
if str(STACKS) not in sys.path:
    sys.path.insert(0, str(STACKS))

from providers.playbook import PlaybookProvider, listen_for_engine_cancel  # noqa: E402
from pulumi.dynamic.dynamic import serialize_provider  # noqa: E402
from pulumi.runtime import proto, rpc  # noqa: E402
from pulumi.runtime._serialization import _serialize  # noqa: E402
from pulumi.runtime.proto import provider_pb2_grpc  # noqa: E402

from rackform.run import applied  # noqa: E402
from rackform.run.sitelock import SiteLocked, site_lock  # noqa: E402

pytestmark = pytest.mark.slow

SLEEP_S = 97
"""The stage's long task: a run that ends by itself takes at least this long."""

PLAYBOOK = "- name: {name} (stand-in)\n  hosts: all\n  gather_facts: false\n  tasks:\n{tasks}"
STAND_IN = {
    "ansible.cfg": "[defaults]\ninventory = inventory\n",
    "inventory/hosts.yml": (f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                            f"      ansible_python_interpreter: {sys.executable}\n"),
    "validate.yml": PLAYBOOK.format(name="Validate", tasks="    - name: Checked\n      ansible.builtin.debug: {msg: ok}\n"),
    "os.yml": PLAYBOOK.format(name="OS", tasks=(
        "    - name: Started\n      ansible.builtin.copy: {dest: \"STARTED\", content: x, mode: \"0644\"}\n"
        f"    - name: Long task\n      ansible.builtin.command: sleep {SLEEP_S}\n      changed_when: false\n"
        "    - name: Finished\n      ansible.builtin.copy: {dest: \"FINISHED\", content: x, mode: \"0644\"}\n")),
}

# The engine runs `python -u -m pulumi.dynamic`; the host runs that module as __main__ the same way.
HOST = 'import runpy; runpy.run_module("pulumi.dynamic", run_name="__main__", alter_sys=True)'



class ProviderHost:
    """The provider process, its gRPC stub, and a Create of the os stage running in a thread."""

    def __init__(self, root: Path):
        self.root = root
        files = {path: text.replace("STARTED", str(root / "os-started")).replace("FINISHED", str(root / "os-finished"))
                 for path, text in STAND_IN.items()}
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "RACKFORM_STATE_DIR")}
        env |= {**stand_in_environment(root / "stand-in", files), "PULUMI_PROJECT": "rackform", "PULUMI_CONFIG": "{}",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        self.stderr = (root / "host-stderr").open("w")
        # A process group of its own, as the engine gives its plugins.
        self.process = subprocess.Popen([sys.executable, "-u", "-c", HOST], cwd=STACKS, env=env,
                                        stdout=subprocess.PIPE, stderr=self.stderr, text=True, start_new_session=True)
        port = int(self.process.stdout.readline().strip() or 0)
        assert port, (root / "host-stderr").read_text()
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.stub.Configure(proto.ConfigureRequest(args=asyncio.run(rpc.serialize_properties({}, {}))))
        self.outcome: dict = {}

    def create_os_stage(self, timeout_s: float) -> threading.Thread:
        props = {"__provider": _serialize(True, serialize_provider, PlaybookProvider())[0], "site": "lab",
                 "stage": "os", "root": str(self.root), "digest": "sha256:program"}
        request = proto.CreateRequest(urn="urn:pulumi:lab::rackform::pulumi-python:dynamic/rackform:Playbook::lab-os",
                                      properties=asyncio.run(rpc.serialize_properties(props, {})))

        def create() -> None:
            started = time.monotonic()
            try:
                self.outcome["response"] = self.stub.Create(request, timeout=timeout_s)
            except grpc.RpcError as error:
                self.outcome["error"] = error
            self.outcome["ended"] = time.monotonic()
            self.outcome["took_s"] = self.outcome["ended"] - started

        thread = threading.Thread(target=create, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not (self.root / "os-started").exists():
            assert thread.is_alive() and time.monotonic() < deadline, (
                self.outcome["error"].details() if "error" in self.outcome else self.stderr_text())
            time.sleep(0.2)
        return thread

    def stderr_text(self) -> str:
        self.stderr.flush()
        return (self.root / "host-stderr").read_text()

    def close(self) -> None:
        self.channel.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.stderr.close()


@pytest.fixture()
def host(tmp_path: Path):
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    provider_host = ProviderHost(tmp_path)
    try:
        yield provider_host
    finally:
        provider_host.close()
        for pid in sleeps_left():  # a task of this test's stage that outlived its playbook
            os.kill(pid, signal.SIGKILL)


def sleeps_left() -> list[int]:
    """Processes still running the stage's long task."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [
                    b"sleep", str(SLEEP_S).encode()]:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def test_the_engines_cancel_stops_the_running_stage_and_the_resource_fails_saying_so(host: ProviderHost):
    """The first Ctrl-C: Cancel reaches the provider, ansible-runner cancels the playbook within
    seconds, nothing is recorded for the stage, and Create fails naming the cancel."""
    create = host.create_os_stage(timeout_s=SLEEP_S - 30)
    cancelled_at = time.monotonic()
    host.stub.Cancel(empty_pb2.Empty(), timeout=10)
    create.join(timeout=SLEEP_S)
    assert "error" in host.outcome, host.outcome
    details = host.outcome["error"].details()
    assert "StageFailed: stage 'os' of site 'lab' interrupted by Pulumi's cancel (Ctrl-C or SIGTERM to pulumi): " \
           "ansible-runner cancelled the playbook" in details, details
    assert "nothing was recorded for it in state/lab.json" in details
    assert host.outcome["ended"] - cancelled_at < 20
    assert not (host.root / "os-finished").exists()
    assert "os" not in applied.load(host.root, "lab")
    with site_lock(host.root, "lab"):  # released: the next `pulumi up` or deploy may run
        pass


def test_when_the_engine_kills_the_provider_nothing_is_recorded_and_the_lock_is_freed(host: ProviderHost):
    """The engine shuts its plugins down after a Ctrl-C (SIGINT to the provider's process group,
    SIGKILL 5 s later; here SIGKILL at once). The stage process, in a session of its own, is not
    killed with the provider: it ends without recording the stage and the site's lock is released.
    What its ansible-playbook had started may run on (seen here: the playbook outlived it; the
    engine's Cancel, which comes first, is what stops it: the test above, and the lab test)."""
    host.create_os_stage(timeout_s=SLEEP_S - 30)
    assert wait_until(sleeps_left, 30), "the stage's long task never started"
    os.killpg(host.process.pid, signal.SIGKILL)
    host.process.wait(timeout=30)
    assert wait_until(lambda: lock_is_free(host.root), 60)
    assert not (host.root / "os-finished").exists()
    assert "os" not in applied.load(host.root, "lab")


def lock_is_free(root: Path) -> bool:
    try:
        with site_lock(root, "lab"):
            return True
    except SiteLocked:
        return False


def test_outside_the_provider_host_nothing_is_replaced():
    """The program and these tests have no provider server: the hook finds nothing to change."""
    assert listen_for_engine_cancel() is False


def test_the_provider_is_pickled_without_the_hook():
    """The hook lives in the provider process, never in the state: the pickled provider is a reference."""
    payload = base64.b64decode(_serialize(True, serialize_provider, PlaybookProvider())[0])
    assert b"_engine_cancel" not in payload and len(payload) < 200
