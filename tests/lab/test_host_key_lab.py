"""A changed SSH host key stops a real deploy of that machine, and only of that machine.

The `labtest` site (tests/lab/conftest.py: node-1, node-2, leaf-1) with host key checking
ON, as on a real site: its group_vars lose `ansible_host_key_checking: false` and
`rackform ssh-keys --collect` records the keys the lab's machines present. Then node-1 gets
new host keys (as a reinstalled or impersonated machine would) and the os stage is deployed
through `run_stages`, the function both front doors call: node-1 is refused at the SSH
handshake (unreachable, host key named), node-2 is reached, and the recorded key is kept.

Needs root and the lab's tools (docs/lab.md). Run alone, on one worker:
pytest -p no:xdist -m lab tests/lab/test_host_key_lab.py
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from rackform import cli
from rackform.lab import lab, state
from rackform.run import applied
from rackform.run.ansible import TaskFailure
from rackform.run.stages import SiteRun, run_stages

pytestmark = pytest.mark.lab

SITE = "labtest"
CHANGED, KEPT = "node-1", "node-2"
CHECKING_OFF = "ansible_host_key_checking: false\n"
NEW_HOST_KEYS = ("rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub && ssh-keygen -A && "
                 "(systemctl restart ssh || systemctl restart sshd)")


def quiet(line: str) -> None:
    pass


def ed25519_key(address: str) -> str:
    """The ed25519 host key `address` presents now (`TYPE BASE64`)."""
    scanned = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", address], capture_output=True, text=True,
                             timeout=30)
    line = next(line for line in scanned.stdout.splitlines() if line and not line.startswith("#"))
    return " ".join(line.split()[1:3])


@pytest.fixture(scope="module")
def checking_root(labtest_root: Path, tmp_path_factory) -> Path:
    """A copy of the labtest repo root with host key checking left on (the default)."""
    root = tmp_path_factory.mktemp("host-keys") / "root"
    shutil.copytree(labtest_root, root)
    all_yml = root / "inventories" / SITE / "group_vars" / "all.yml"
    text = all_yml.read_text()
    assert CHECKING_OFF in text
    all_yml.write_text(text.replace(CHECKING_OFF, ""))
    return root


@pytest.fixture(scope="module")
def lab_up(checking_root: Path):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(applied.STATE_DIR_ENV, str(checking_root / "state"))
        lab.down(SITE, progress=quiet)  # a run that died earlier may have left some
        lab.up(SITE, checking_root, progress=quiet)
        yield state.require(SITE)
        lab.down(SITE, progress=quiet)


@pytest.fixture(scope="module")
def recorded(lab_up: state.LabState, checking_root: Path) -> str:
    """`rackform ssh-keys labtest --collect`: the keys every machine presents, into host_vars.
    Returns node-1's ed25519 key as recorded."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["ssh-keys", SITE, "--root", str(checking_root), "--collect"])
    assert code == 0, out.getvalue()
    assert "host key checking ON" in out.getvalue()
    host_vars = (checking_root / "inventories" / SITE / "host_vars" / f"{CHANGED}.yml").read_text()
    key = ed25519_key(lab_up.node(CHANGED).address)
    assert key in host_vars
    return key


@pytest.fixture(scope="module")
def deployed_after_the_change(lab_up: state.LabState, recorded: str, checking_root: Path) -> SiteRun:
    node = lab_up.node(CHANGED)
    lab.ssh(lab_up, node, NEW_HOST_KEYS, timeout_s=60, check=False)
    assert ed25519_key(node.address) != recorded, "node-1 still presents its old key: nothing was tested"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(applied.STATE_DIR_ENV, str(checking_root / "state"))
        return run_stages(SITE, checking_root, ["os"], say=print)


def failures(site_run: SiteRun) -> list[TaskFailure]:
    return [failure for run in site_run.report.runs if run.result is not None for failure in run.result.failures]


def test_the_rendered_project_checks_host_keys(deployed_after_the_change: SiteRun):
    config = (deployed_after_the_change.project_dir / "ansible.cfg").read_text()
    assert "host_key_checking = True" in config and "StrictHostKeyChecking=yes" in config


def test_the_machine_with_a_changed_key_is_refused(deployed_after_the_change: SiteRun):
    refused = [failure for failure in failures(deployed_after_the_change) if failure.host == CHANGED]
    assert refused and all(failure.unreachable for failure in refused), refused
    assert any("host key" in failure.message.lower() or "host identification has changed" in failure.message.lower()
               for failure in refused), refused
    assert not deployed_after_the_change.ok


def test_the_other_machine_is_reached(deployed_after_the_change: SiteRun):
    assert not [failure for failure in failures(deployed_after_the_change)
                if failure.host == KEPT and failure.unreachable]
    assert any(KEPT in run.result.hosts for run in deployed_after_the_change.report.runs if run.result is not None)


def test_the_recorded_key_is_kept(deployed_after_the_change: SiteRun, recorded: str, lab_up: state.LabState):
    known_hosts = (deployed_after_the_change.project_dir / "known_hosts").read_text()
    assert recorded in known_hosts
    assert ed25519_key(lab_up.node(CHANGED).address) not in known_hosts
