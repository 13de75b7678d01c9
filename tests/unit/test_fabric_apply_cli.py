"""`rackform fabric apply`: the fabric stage through the pipeline's stage runner, check mode
with --diff first, then for real (not with --dry-run); exit codes and messages.

The wiring is checked with a recording stand-in for `run_stages`; the slow tests run the
real runner and the real fabric stage on the lab with leaf-2 running Onyx, against the
Onyx CLI emulator (a rackform stand-in, not Onyx) on 127.0.0.1, reached through the
onyx_switch role's own variables in the inventory (onyx_switch_host, onyx_switch_port).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from rackform.fabric import apply_cli
from rackform.lab.onyx_emulator import OnyxEmulator

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "lab-only-password-52be"


def apply(capsys, *argv: str, root: Path = REPO) -> tuple[int, str, str]:
    code = apply_cli.main(["lab", "--root", str(root), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_unknown_switch_is_bad_input(capsys):
    code, _, err = apply(capsys, "--switch", "leaf-9")
    assert (code, err.strip()) == (2, "rackform: --switch: site lab has no managed switch leaf-9; "
                                      "managed switches: leaf-1, leaf-2, spine-1")


def test_design_error_is_bad_input_with_file_and_line(capsys, tmp_path):
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    profile = tmp_path / "topologies" / "profiles" / "roce.yaml"  # the lab's fabric settings
    profile.write_text(profile.read_text().replace("pfc_priorities: [3]\n    roce_tos", "pfc_priorities: [4]\n    roce_tos"))
    code, _, err = apply(capsys, root=tmp_path)
    assert code == 2 and "topologies/profiles/roce.yaml:" in err


@pytest.mark.parametrize("option", ["--dry-run", "--private-key", "--user", "--switch"])
def test_help_names_the_option(option, capsys):
    with pytest.raises(SystemExit):
        apply_cli.main(["--help"])
    assert option in capsys.readouterr().out


def test_endpoint_option_is_gone(capsys):
    """Switches are reached at their inventory address (or the role's onyx_switch_host)."""
    with pytest.raises(SystemExit) as exited:
        apply_cli.main(["lab", "--endpoint", "leaf-1=127.0.0.1:2222"])
    assert exited.value.code == 2 and "unrecognized arguments: --endpoint" in capsys.readouterr().err


# ---------------------------------------------------------------- the wiring, with a recording runner


@dataclass
class FakeReport:
    site: str = "lab"
    changed_per_host: dict[str, int] = field(default_factory=dict)
    failed: tuple[str, ...] = ()
    interrupted: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed_hosts(self) -> dict[str, str]:
        return dict.fromkeys(self.failed, "failed")

    @property
    def runs(self) -> list:
        hosts = {host: SimpleNamespace(changed=changed) for host, changed in self.changed_per_host.items()}
        return [SimpleNamespace(step=SimpleNamespace(name="fabric"), result=SimpleNamespace(hosts=hosts))]


class RecordingRunner:
    """Stands in for run_stages: records each call, answers with the next report."""

    def __init__(self, *reports: FakeReport):
        self.reports = list(reports)
        self.calls: list[dict] = []

    def __call__(self, site_name, root, stages, **options):
        self.calls.append({"site": site_name, "stages": stages, **options})
        return SimpleNamespace(report=self.reports.pop(0))


@pytest.fixture
def recording(monkeypatch):
    def install(*reports: FakeReport) -> RecordingRunner:
        runner = RecordingRunner(*reports)
        monkeypatch.setattr("rackform.run.stages.run_stages", runner)
        monkeypatch.setattr(apply_cli, "_failed", lambda report, stream: 1)  # the summary needs real runs
        return runner

    return install


def test_check_with_diff_first_then_the_real_run_on_the_switches(recording, capsys):
    runner = recording(FakeReport(changed_per_host={"leaf-1": 2, "spine-1": 0}),
                       FakeReport(changed_per_host={"leaf-1": 2, "spine-1": 0}))
    code, out, _ = apply(capsys)
    assert code == 0
    assert [(call["stages"], call["check"], call["diff"], call["limit"]) for call in runner.calls] == [
        (["fabric"], True, True, "switches"), (["fabric"], False, False, "switches")]
    assert "spine-1: runs its designed configuration; nothing to change" in out
    assert "lab: 1 switch(es) configured and saved: leaf-1" in out


def test_dry_run_stops_after_the_check(recording, capsys):
    runner = recording(FakeReport(changed_per_host={"leaf-1": 2}))
    code, out, _ = apply(capsys, "--dry-run", "--switch", "leaf-1")
    assert code == 0 and len(runner.calls) == 1 and runner.calls[0]["limit"] == "leaf-1"
    assert "lab: 1 switch(es) would change: leaf-1 (--dry-run: nothing applied)" in out


def test_a_failed_check_applies_nothing(recording, capsys):
    runner = recording(FakeReport(failed=("leaf-1",)))
    code, _, _ = apply(capsys)
    assert code == 1 and len(runner.calls) == 1


def test_user_reaches_the_onyx_role_as_its_variable(recording, capsys):
    runner = recording(FakeReport(), FakeReport())
    apply(capsys, "--user", "admin", "--switch", "leaf-2", "--switch", "spine-1")
    assert runner.calls[0]["envvars"] == {"RACKFORM_SWITCH_USER": "admin"}
    assert runner.calls[0]["limit"] == "leaf-2,spine-1"


def test_diff_text_shows_a_modules_prepared_diff_and_a_files_unified_diff():
    assert apply_cli.diff_text({"prepared": "- mtu 9000\n+ mtu 9216\n"}) == "- mtu 9000\n+ mtu 9216"
    files = apply_cli.diff_text([{"before": "a\n", "after": "b\n", "before_header": "/etc/x", "after_header": "/etc/x"}])
    assert files.splitlines() == ["--- before: /etc/x", "+++ after: /etc/x", "@@ -1 +1 @@", "-a", "+b"]


# ---------------------------------------------------------------- the real stage on an Onyx switch (slow)


def onyx_root(root: Path, emulator: OnyxEmulator) -> Path:
    """The lab with leaf-2 running Onyx, reached at the emulator through the role's variables."""
    for folder in ("topologies", "inventories"):
        shutil.copytree(REPO / folder, root / folder, dirs_exist_ok=True)
    design = root / "topologies" / "sites" / "lab.yaml"
    text = design.read_text().replace("os: cumulus, fabric: compute, asn: 65102", "os: onyx, fabric: compute, asn: 65102")
    # rackform renders no BGP for Onyx (validate refuses an AS on it): a layer-2 fabric, no AS anywhere.
    text = re.sub(r", asn: \d+", "", text)
    design.write_text(text.replace("leaf-2:swp", "leaf-2:Eth1/"))
    host_vars = root / "inventories" / "lab" / "host_vars" / "leaf-2.yml"
    known_hosts = emulator.scanned_known_hosts()  # the emulator's real key: the role checks host keys
    host_vars.write_text(host_vars.read_text() + f"onyx_switch_host: 127.0.0.1\nonyx_switch_port: {emulator.port}\n"
                         f"onyx_switch_known_hosts: {known_hosts}\n")
    return root


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    running = OnyxEmulator("leaf-2", 32, tmp_path_factory.mktemp("onyx-state"), password=PASSWORD).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def applied(tmp_path_factory, emulator):
    """fabric apply twice on leaf-2: (exit code, stdout, stderr) of each, and whether the second touched the switch."""
    root = onyx_root(tmp_path_factory.mktemp("onyx-root"), emulator)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RACKFORM_SWITCH_PASSWORD", PASSWORD)
        first = _main(root, "--switch", "leaf-2", "--user", "admin")
        stamp = emulator.running_config_path.stat().st_mtime_ns
        second = _main(root, "--switch", "leaf-2", "--user", "admin")
    return first, second, emulator.running_config_path.stat().st_mtime_ns != stamp


def _main(root: Path, *argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = apply_cli.main(["lab", "--root", str(root), *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_apply_shows_the_diff_then_configures_and_saves_the_onyx_switch(applied, emulator):
    (code, out, err), _, _ = applied
    assert code == 0, out + err
    assert "+ interface ethernet 1/5 mtu 9216 force" in out
    assert "lab: 1 switch(es) configured and saved: leaf-2" in out
    assert "   interface ethernet 1/5 mtu 9216 force\n" in emulator.saved_config_path.read_text()


@pytest.mark.slow
def test_second_apply_changes_nothing(applied):
    _, (code, out, err), touched = applied
    assert code == 0, out + err
    assert "leaf-2: runs its designed configuration; nothing to change" in out and not touched


@pytest.mark.slow
def test_password_is_never_shown(applied):
    assert all(PASSWORD not in out + err for _, out, err in applied[:2])
