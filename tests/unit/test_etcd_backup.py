"""`rackform backup` and `rackform restore` (rackform.commands.backup, .restore, rackform.day2.etcd_backup)
and what they run: etcd-backup.yml, etcd-restore.yml and the role etcd_backup.

What the controller refuses before anything changes (a name that is no snapshot's, a missing
snapshot, one that fails its sha256, a site without a cluster to run on), where snapshots are
kept, the retention script every place prunes with (run here with bash), the order of the
restore's plays and steps, and (slow) ansible-lint's production profile on the playbooks and
the role. The restore itself runs only on a real control plane: tests/lab/test_etcd_recovery_lab.py.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collection_support import ROLES_IN_PROJECT
from hang_limit import SUBPROCESS_HANG_S
from rackform.cli import main
from rackform.day2 import etcd_backup
from rackform.model.loader import load_site
from rackform.paths import ROLES_DIR
from rackform.render.project import render_files
from rackform.render.writer import write_project

ROLE = ROLES_DIR / "etcd_backup"
PRUNE = ROLE / "files" / "etcd-snapshot-prune.sh"
SNAPSHOT = "etcd-snapshot-20260101T020000Z-mgmt-1.db"


@pytest.fixture(scope="module")
def lab_files(repo_root) -> dict[str, bytes]:
    return render_files(load_site("lab", repo_root))


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / f"{name}.yml").read_text())


def _argv(task: dict) -> list[str]:
    return task["ansible.builtin.command"]["argv"]


def _refuse_any_run(monkeypatch) -> None:
    """Any playbook run fails the test: a refusal must come before the stage runner."""
    def run_day2_playbook(*_args, **_kwargs):
        raise AssertionError("a refused restore ran a playbook")

    monkeypatch.setattr("rackform.run.stages.run_day2_playbook", run_day2_playbook)


def _snapshot_in(folder: Path, name: str = SNAPSHOT, content: bytes = b"etcd snapshot bytes",
                 recorded: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(content)
    (folder / f"{name}.sha256").write_text(f"{recorded or hashlib.sha256(content).hexdigest()}  {name}\n")
    return folder / name


def _tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


# ---------------------------------------------------------------- where snapshots are kept


def test_a_site_with_a_storage_host_keeps_snapshots_on_its_first_one(repo_root):
    site = load_site("lab", repo_root)
    place = etcd_backup.backup_place(site, repo_root / "build" / "lab")
    assert (place.host, place.directory) == ("stor-1", Path(etcd_backup.STORE_DIR))
    assert place.envvars(Path("/t"))["RACKFORM_ETCD_BACKUP_HOST"] == "stor-1"


def test_a_site_without_a_storage_host_keeps_them_on_the_controller(repo_root, tmp_path):
    site = load_site("edge", repo_root)
    assert not [host for host in site.hosts.values() if host.role == "storage"]
    place = etcd_backup.backup_place(site, tmp_path / "build" / "edge")
    assert place.host is None and place.directory == (tmp_path / "build" / "edge" / "backups").resolve()
    assert place.envvars(tmp_path)["RACKFORM_ETCD_BACKUP_HOST"] == "localhost"


def test_the_backup_host_s_folder_is_the_role_s_default():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["etcd_backup_store_dir"] == etcd_backup.STORE_DIR
    assert defaults["etcd_backup_keep"] == 7 and defaults["etcd_backup_schedule"] == "daily"


# ---------------------------------------------------------------- refusals that change nothing


@pytest.mark.parametrize("name", ["../" + SNAPSHOT, f"backups/{SNAPSHOT}", "snapshot.db", "etcd-snapshot-x.db", ""])
def test_restore_refuses_a_name_that_is_no_snapshot_s(site_root, monkeypatch, capsys, name):
    _refuse_any_run(monkeypatch)
    before = _tree(site_root)
    assert main(["restore", "edge", "--root", str(site_root), "--from", name]) == 2
    err = capsys.readouterr().err
    assert "--from" in err and "no snapshot's file name" in err and "nothing was changed" in err
    assert _tree(site_root) == before


def test_restore_refuses_a_missing_snapshot(site_root, monkeypatch, capsys):
    _refuse_any_run(monkeypatch)
    backups = site_root / "build" / "edge" / "backups"
    _snapshot_in(backups, "etcd-snapshot-20251231T020000Z-mgmt-1.db")
    before = _tree(site_root)
    assert main(["restore", "edge", "--root", str(site_root), "--from", SNAPSHOT]) == 2
    err = capsys.readouterr().err
    assert f"{backups.resolve() / SNAPSHOT} does not exist" in err
    assert "etcd-snapshot-20251231T020000Z-mgmt-1.db" in err  # what is there, to choose from
    assert _tree(site_root) == before


def test_restore_refuses_a_snapshot_whose_sha256_does_not_match(site_root, monkeypatch, capsys):
    _refuse_any_run(monkeypatch)
    backups = site_root / "build" / "edge" / "backups"
    _snapshot_in(backups, recorded=hashlib.sha256(b"what was saved").hexdigest())
    before = _tree(site_root)
    assert main(["restore", "edge", "--root", str(site_root), "--from", SNAPSHOT]) == 2
    err = capsys.readouterr().err
    assert "does not match" in err and "damaged" in err
    assert _tree(site_root) == before


def test_restore_refuses_a_snapshot_without_its_checksum(site_root, monkeypatch, capsys):
    _refuse_any_run(monkeypatch)
    backups = site_root / "build" / "edge" / "backups"
    _snapshot_in(backups).with_name(f"{SNAPSHOT}.sha256").unlink()
    assert main(["restore", "edge", "--root", str(site_root), "--from", SNAPSHOT]) == 2
    assert "checksum is missing" in capsys.readouterr().err


def test_a_matching_snapshot_passes_the_check(repo_root, tmp_path):
    site = load_site("edge", repo_root)
    content = b"\x00etcd\x01" * 1000
    _snapshot_in(tmp_path, content=content)
    snapshot = etcd_backup.check_snapshot(site, tmp_path, SNAPSHOT)
    assert snapshot == etcd_backup.Snapshot(SNAPSHOT, len(content), hashlib.sha256(content).hexdigest())


@pytest.mark.parametrize("command", [["backup"], ["restore", "--from", SNAPSHOT]])
def test_without_a_kubeconfig_nothing_runs_and_the_command_fails(site_root, monkeypatch, capsys, command):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    _snapshot_in(site_root / "build" / "edge" / "backups")
    code = main([command[0], "edge", "--root", str(site_root), *command[1:]])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    assert "not run: no kubeconfig for this site" in captured.err
    assert not (site_root / "build" / "edge" / "backups" / ".transit").exists()


def test_the_snapshot_that_came_back_is_read_and_checked(tmp_path):
    assert etcd_backup.taken(tmp_path) is None
    _snapshot_in(tmp_path, content=b"abc")
    assert etcd_backup.taken(tmp_path) == etcd_backup.Snapshot(SNAPSHOT, 3, hashlib.sha256(b"abc").hexdigest())
    (tmp_path / SNAPSHOT).write_bytes(b"abd")  # damaged on the way
    assert etcd_backup.taken(tmp_path) is None


# ---------------------------------------------------------------- retention: the one prune script


def _prune(folder: Path, keep: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PRUNE), str(folder), keep], capture_output=True, text=True,
                          timeout=SUBPROCESS_HANG_S, check=False)


def test_retention_keeps_the_newest_by_name_with_their_checksums(tmp_path):
    names = [f"etcd-snapshot-202601{day:02d}T020000Z-mgmt-{1 + day % 3}.db" for day in range(1, 11)]
    for index, name in enumerate(reversed(names)):  # mtimes the other way round: names decide
        _snapshot_in(tmp_path, name)
        os.utime(tmp_path / name, (1_000_000 + index, 1_000_000 + index))
    (tmp_path / "notes.txt").write_text("not a snapshot")
    (tmp_path / "etcd-snapshot-20260201T020000Z-mgmt-1.db.part").write_text("being written")
    result = _prune(tmp_path, "7")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"removed {name}" for name in names[:3]]
    left = sorted(path.name for path in tmp_path.iterdir())
    assert left == sorted([*names[3:], *(f"{name}.sha256" for name in names[3:]), "notes.txt",
                           "etcd-snapshot-20260201T020000Z-mgmt-1.db.part"])
    assert _prune(tmp_path, "7").stdout == ""  # again: nothing more to do


def test_retention_with_fewer_snapshots_than_kept_removes_nothing(tmp_path):
    _snapshot_in(tmp_path)
    assert _prune(tmp_path, "7").stdout == "" and (tmp_path / SNAPSHOT).exists()
    assert _prune(tmp_path / "absent", "7").returncode == 0


@pytest.mark.parametrize("keep", ["0", "-1", "seven", ""])
def test_retention_refuses_a_count_that_would_remove_everything_or_is_no_number(tmp_path, keep):
    _snapshot_in(tmp_path)
    result = _prune(tmp_path, keep)
    assert result.returncode == 2 and "usage" in result.stderr
    assert (tmp_path / SNAPSHOT).exists()


def test_the_timer_s_snapshot_script_prunes_with_the_same_script_and_keep():
    script = (ROLE / "templates" / "rackform-etcd-snapshot.sh.j2").read_text()
    assert '/usr/local/sbin/etcd-snapshot-prune "$dir" {{ etcd_backup_keep }}' in script
    assert "etcd-snapshot-$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s).db" in script
    assert 'sha256sum -- "$name" > "$name.sha256"' in script
    store = _tasks("store")
    assert [task for task in store if "ansible.builtin.script" in task][0]["ansible.builtin.script"]["cmd"] == (
        "etcd-snapshot-prune.sh {{ etcd_backup_store_dir | quote }} {{ etcd_backup_keep | int }}")


def test_snapshot_names_the_scripts_make_are_the_names_restore_accepts():
    assert etcd_backup.SNAPSHOT_NAME.match(SNAPSHOT)
    assert not etcd_backup.SNAPSHOT_NAME.match(SNAPSHOT + ".sha256")


def test_running_containers_are_found_by_their_kubernetes_name_through_ctr(tmp_path):
    """rackform-cri-running against a stand-in ctr: containers of that name with a RUNNING task only."""
    fake = tmp_path / "ctr"
    fake.write_text("""#!/bin/bash
case "$*" in
  '-n k8s.io containers ls -q labels."io.kubernetes.container.name"==etcd') printf 'aaa\\nbbb\\n' ;;
  '-n k8s.io containers ls -q labels."io.kubernetes.container.name"==kube-apiserver') printf 'ccc\\n' ;;
  '-n k8s.io containers ls -q '*) ;;
  '-n k8s.io tasks ls') printf 'TASK PID STATUS\\naaa 10 STOPPED\\nbbb 11 RUNNING\\nzzz 12 RUNNING\\nccc 13 STOPPED\\n' ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
""")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}

    def running(name: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(ROLE / "files" / "rackform-cri-running.sh"), name], env=env,
                              capture_output=True, text=True, timeout=SUBPROCESS_HANG_S, check=False)

    assert (running("etcd").returncode, running("etcd").stdout) == (0, "bbb\n")
    assert (running("kube-apiserver").returncode, running("kube-apiserver").stdout) == (0, "")  # stopped
    assert (running("coredns").returncode, running("coredns").stdout) == (0, "")  # no such container
    assert running("").returncode == 2


# ---------------------------------------------------------------- the playbooks and the role


def test_the_kubernetes_stage_installs_the_timer_on_the_control_plane(lab_files):
    plays = yaml.safe_load(lab_files["kubernetes.yml"])
    control_plane = next(play for play in plays if play["name"] == "Kubernetes control plane")
    roles = [role["role"] for role in control_plane["roles"]]
    assert roles.index("rackform.site.etcd_backup") > roles.index("rackform.site.kubeadm")
    timer = (ROLE / "templates" / "rackform-etcd-snapshot.timer.j2").read_text()
    assert "OnCalendar={{ etcd_backup_schedule }}" in timer and "Persistent=true" in timer
    started = _tasks("main")[-1]["ansible.builtin.systemd_service"]
    assert started["name"] == "rackform-etcd-snapshot.timer" and started["enabled"] is True


def test_backup_snapshots_on_the_control_plane_then_keeps_it_on_the_backup_host(lab_files):
    plays = yaml.safe_load(lab_files["etcd-backup.yml"])
    assert [play["hosts"] for play in plays] == [
        "kube_control_plane", "{{ lookup('ansible.builtin.env', 'RACKFORM_ETCD_BACKUP_HOST') or 'localhost' }}"]
    assert plays[0]["any_errors_fatal"] is True
    assert [task["ansible.builtin.include_role"]["tasks_from"] for play in plays for task in play["tasks"]
            if "ansible.builtin.include_role" in task] == ["snapshot", "store"]
    local = plays[1]["tasks"][0]
    assert local["when"] == "inventory_hostname == 'localhost'"
    assert local["ansible.builtin.set_fact"]["ansible_become"] is False  # never sudo on the controller


def test_the_snapshot_is_taken_once_on_a_healthy_member(lab_files):
    tasks = _tasks("snapshot")
    health = next(task for task in tasks if task["name"].startswith("Ask this node"))
    assert _argv(health)[-2:] == ["endpoint", "health"] and health["failed_when"] is False
    take = next(task for task in tasks if task["name"] == "Take the snapshot")
    assert take["when"] == "inventory_hostname == etcd_backup_node"
    refuse = next(task for task in tasks if "ansible.builtin.fail" in task)
    assert refuse["when"] == "etcd_backup_node == ''"


def test_restore_checks_the_snapshot_before_any_control_plane_play(lab_files):
    plays = yaml.safe_load(lab_files["etcd-restore.yml"])
    first = plays[0]
    assert "RACKFORM_ETCD_BACKUP_HOST" in first["hosts"] and first["any_errors_fatal"] is True
    assert first["tasks"][-1]["ansible.builtin.include_role"]["tasks_from"] == "check_snapshot"
    steps = [(play["hosts"], play["tasks"][0]["vars"]["etcd_backup_restore_step"]) for play in plays[1:]]
    assert steps == [("kube_control_plane", "prepare"), ("kube_control_plane", "stop"),
                     ("kube_control_plane", "start_etcd"), ("kube_control_plane", "start_apiserver"),
                     ("kube_control_plane[0]", "wait")]
    assert all(play["any_errors_fatal"] for play in plays[1:5])
    check = _tasks("check_snapshot")
    missing = next(task for task in check if task["name"] == "Refuse a snapshot that is not there")
    assert missing["when"] == "not item.stat.exists"
    assert _argv(next(task for task in check if "sha256" in task["name"]))[:3] == ["sha256sum", "--check", "--strict"]
    assert next(task for task in check if task["name"] == "Stop on a checksum mismatch")["when"] == (
        "etcd_backup_checked.rc != 0")
    # the fetch, the first thing that writes anywhere, comes after both refusals
    assert "ansible.builtin.fetch" in check[-1]


def test_every_restore_step_has_its_tasks_file():
    choices = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())[
        "argument_specs"]["restore"]["options"]["etcd_backup_restore_step"]["choices"]
    assert choices == ["prepare", "stop", "start_etcd", "start_apiserver", "wait"]
    assert all((ROLE / "tasks" / f"restore_{step}.yml").is_file() for step in choices)


def test_a_node_stops_the_api_server_and_etcd_before_its_data_dir_is_replaced():
    tasks = _tasks("restore_stop")
    names = [task["name"] for task in tasks]
    order = ["Move the API server's and etcd's manifests aside", "Wait for the API server's and etcd's containers to stop",
             "Move etcd's old member folder aside (kept, never deleted)", "Restore the snapshot into a fresh data dir",
             "Put the restored member folder in place"]
    assert [names.index(name) for name in order] == sorted(names.index(name) for name in order)
    moved = tasks[0]
    assert moved["loop"] == ["kube-apiserver.yaml", "etcd.yaml"]
    assert moved["ansible.builtin.command"]["removes"] == "{{ etcd_backup_manifests_dir }}/{{ item }}"
    assert _argv(tasks[1]) == ["/usr/local/sbin/rackform-cri-running", "{{ item }}"]
    assert tasks[1]["until"] == "etcd_backup_running.rc == 0 and etcd_backup_running.stdout | trim | length == 0"
    restore = _argv(next(task for task in tasks if task["name"] == "Restore the snapshot into a fresh data dir"))
    assert restore[:4] == ["/usr/local/sbin/rackform-etcd", "etcdutl", "snapshot", "restore"]
    flags = {argument.split("=")[0] for argument in restore[5:]}
    assert flags == {"--data-dir", "--name", "--initial-advertise-peer-urls", "--initial-cluster", "--bump-revision",
                     "--mark-compacted"}


def test_the_tools_run_from_the_etcd_image_the_node_runs():
    wrapper = (ROLE / "templates" / "rackform-etcd.sh.j2").read_text()
    assert "etcdctl|etcdutl" in wrapper and "ctr -n k8s.io run --rm --net-host" in wrapper
    assert "{{ etcd_backup_manifests_dir }}/etcd.yaml {{ etcd_backup_restore_dir }}/manifests/etcd.yaml" in wrapper
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    # the wrapper mounts /var/lib/rackform alone: every folder the tools write in lies under it
    for key in ("etcd_backup_local_dir", "etcd_backup_restore_dir"):
        assert defaults[key].startswith("/var/lib/rackform/")


def test_the_etcd_image_carries_etcdutl():
    from rackform.mirror import source

    text = Path(source.__file__).read_text()
    assert '"go.etcd.io/etcd/etcdutl/v3": "etcdutl"' in text
    go_mod = (Path(source.__file__).parents[2] / "sources" / "etcd" / "3.6.8" / "go.mod").read_text()
    assert "\tgo.etcd.io/etcd/etcdutl/v3\n" in go_mod


@pytest.mark.slow
def test_the_playbooks_and_the_role_pass_ansible_lint_production_profile(tmp_path, lab_files):
    project = tmp_path / "lab"
    write_project(lab_files, project)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(["ansible-lint", "--offline", "--profile", "production", "--nocolor", "etcd-backup.yml",
                             "etcd-restore.yml", f"{ROLES_IN_PROJECT}etcd_backup"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_role_s_expressions_choose_a_healthy_member_and_name_every_member(tmp_path, lab_files):
    """The role's own expressions, run by ansible-playbook on three stand-in hosts: the first
    healthy member snapshots, the play after reads its snapshot's name, every member is named
    with its peer URL in --initial-cluster, and a kubeadm etcd manifest gives name and peer URL."""
    snapshot_tasks = _tasks("snapshot")
    choose = next(task for task in snapshot_tasks if task["name"].startswith("Choose"))["ansible.builtin.set_fact"]
    initial_cluster = next(task for task in _tasks("restore_stop") if task["name"].startswith("Restore the snapshot")
                           )["vars"]["etcd_backup_initial_cluster"]
    member = next(task for task in _tasks("restore_prepare") if task["name"].startswith("Take this member"))
    keep_play = yaml.safe_load(lab_files["etcd-backup.yml"])[1]
    manifest = {"spec": {"containers": [{"command": [
        "etcd", "--advertise-client-urls=https://10.10.0.11:2379", "--name={{ inventory_hostname }}",
        "--initial-advertise-peer-urls=https://{{ address }}:2380", "--initial-cluster-state=existing"]}]}}
    hosts = {"h1": {"rc_value": 1, "address": "10.0.0.1"}, "h2": {"rc_value": 0, "address": "10.0.0.2"},
             "h3": {"rc_value": 0, "address": "10.0.0.3"}}
    inventory = {"all": {"children": {"kube_control_plane": {"hosts": hosts}}, "vars": {"ansible_connection": "local"}}}
    plays = [
        {"hosts": "kube_control_plane", "gather_facts": False, "tasks": [
            {"name": "Health", "ansible.builtin.set_fact": {"etcd_backup_health": {"rc": "{{ rc_value | int }}"}}},
            {"name": "Choose", "ansible.builtin.set_fact": {"etcd_backup_node": choose["etcd_backup_node"]}},
            {"name": "Taken", "ansible.builtin.set_fact": {"etcd_backup_taken": {
                "stdout": "etcd-snapshot-20260101T020000Z-{{ inventory_hostname }}.db 12 ab /d"}},
             "when": "inventory_hostname == etcd_backup_node"},
            {"name": "Manifest", "ansible.builtin.set_fact": {"etcd_backup_manifest": {
                "content": "{{ manifest | to_yaml | b64encode }}"}}, "vars": {"manifest": manifest}},
            {"name": member["name"], "ansible.builtin.set_fact": member["ansible.builtin.set_fact"],
             "vars": member["vars"]},
            {"name": "Say", "ansible.builtin.debug": {"msg": "CHOSEN {{ etcd_backup_node }} CLUSTER {{ cluster }}"},
             "vars": {"cluster": initial_cluster}, "run_once": True}]},
        {"hosts": "localhost", "gather_facts": False, "vars": {"etcd_backup_snapshot": keep_play["vars"][
            "etcd_backup_snapshot"]}, "tasks": [{"name": "Say", "ansible.builtin.debug": {
                "msg": "SNAPSHOT {{ etcd_backup_snapshot }}"}}]},
    ]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    result = subprocess.run(["ansible-playbook", "-i", "inventory.yml", "play.yml"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("CHOSEN h2 CLUSTER h1=https://10.0.0.1:2380,h2=https://10.0.0.2:2380,h3=https://10.0.0.3:2380"
            in result.stdout), result.stdout
    assert "SNAPSHOT etcd-snapshot-20260101T020000Z-h2.db" in result.stdout


def test_prepare_refuses_an_etcd_image_without_etcdutl_before_anything_stops():
    """A node deployed from a bundle older than etcdutl in the etcd image: pulled again, else refused
    in the prepare step, while etcd and the API server still run."""
    tasks = _tasks("restore_prepare")
    names = [task["name"] for task in tasks]
    check, pull, refuse = (names.index(name) for name in (
        "Check that the etcd image carries etcdutl", "Pull the etcd image again where the node's copy lacks etcdutl",
        "Refuse a restore without etcdutl"))
    assert check < pull < refuse
    assert _argv(tasks[pull]) == ["/usr/local/sbin/rackform-etcd", "etcdutl", "version"]
    assert tasks[pull]["environment"] == {"RACKFORM_ETCD_PULL": "1"}
    assert tasks[refuse]["when"] == "etcd_backup_etcdutl.rc != 0 and etcd_backup_etcdutl_pulled.rc != 0"
    assert all("mv" not in str(task.get("ansible.builtin.command", "")) for task in tasks)  # nothing moves here
    wrapper = (ROLE / "templates" / "rackform-etcd.sh.j2").read_text()
    assert '[ "${RACKFORM_ETCD_PULL:-}" = 1 ] ||' in wrapper
