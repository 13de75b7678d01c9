"""Signals belong to the whole command (rackform.run.interrupt), with real ansible-runner runs.

Each case runs a deploy in a process of its own, on a localhost project whose `os`
stage writes a marker and then sleeps, and signals it: during a playbook, and
between runs (where ansible-runner's own handlers used to swallow it).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rackform.run import interrupt

pytestmark = pytest.mark.slow

PLAYBOOK = """\
- name: {name} (stand-in)
  hosts: all
  gather_facts: false
  tasks:
{tasks}
"""
MARK = "    - name: Marker\n      ansible.builtin.copy: {{dest: \"{marker}\", content: x, mode: \"0644\"}}\n"
SLEEP = "    - name: Long task\n      ansible.builtin.command: sleep 60\n      changed_when: false\n"
NOTHING = "    - name: Nothing\n      ansible.builtin.debug: {msg: ok}\n"

DRIVER = textwrap.dedent("""\
    import os, signal, sys
    from pathlib import Path
    from rackform.run import interrupt
    from rackform.run.deploy import Step, deploy
    from rackform.run.progress import ProgressDisplay
    from rackform.run.summary import summary_lines

    project, early = Path(sys.argv[1]), sys.argv[2] == "early"
    steps = [Step("validate", "validate.yml", "validate"), Step("os", "os.yml", "os 1/2"),
             Step("verify", "verify.yml", "verify 2/2")]
    with interrupt.owned_signals():
        if early:  # as if the signal came while rendering, before any playbook ran
            os.kill(os.getpid(), signal.SIGTERM)
        report = deploy("local", project, steps, progress=ProgressDisplay(sys.stdout, live=False))
        print("\\n".join(summary_lines(report)), flush=True)
    sys.exit(interrupt.exit_code() if report.interrupted else 0)
""")


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    marker = tmp_path / "os-started"
    files = {
        "ansible.cfg": "[defaults]\ninventory = hosts.yml\n",
        "hosts.yml": f"all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                     f"      ansible_python_interpreter: {sys.executable}\n",
        "validate.yml": PLAYBOOK.format(name="Validate", tasks=NOTHING),
        "os.yml": PLAYBOOK.format(name="OS", tasks=MARK.format(marker=marker) + SLEEP),
        "verify.yml": PLAYBOOK.format(name="Verify", tasks=NOTHING),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run_driver(project: Path, *signums: int, early: bool = False) -> tuple[int, str, float]:
    """(exit status, output, seconds from the first signal to the exit)."""
    process = subprocess.Popen([sys.executable, "-c", DRIVER, str(project), "early" if early else "late"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sent = time.monotonic()
    if signums:
        deadline = time.monotonic() + 60
        while not (project / "os-started").exists():
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
            time.sleep(0.1)
        sent = time.monotonic()
        for signum in signums:
            process.send_signal(signum)
            time.sleep(0.3)
    out, _ = process.communicate(timeout=60)
    return process.returncode, out, time.monotonic() - sent


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_playbook_cuts_it_and_starts_nothing_more(project: Path, signum: int):
    code, out, seconds = run_driver(project, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum, out
    assert f"local: STOPPED: interrupted by {name} during os" in out
    verify_row = next(line for line in out.splitlines() if line.startswith("verify "))
    assert verify_row.split()[1] == "-" and f"not run: interrupted by {name}" in verify_row
    assert seconds < 10, f"{seconds:.1f} s from the signal to the exit"


def test_a_signal_between_runs_is_not_swallowed(project: Path):
    code, out, _ = run_driver(project, early=True)
    assert code == 128 + signal.SIGTERM, out
    assert "not run: interrupted by SIGTERM" in out and not (project / "os-started").exists()


def test_a_second_signal_stops_at_once(project: Path):
    code, out, _ = run_driver(project, signal.SIGTERM, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and "stopping now" in out and "deploy summary" not in out


def test_handlers_are_restored_after_the_command():
    before = signal.getsignal(signal.SIGTERM)
    with interrupt.owned_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_signals_are_left_alone():
    """The Pulumi provider runs stages in gRPC threads: no handlers there, and no error."""
    seen = []

    def body():
        with interrupt.owned_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]
