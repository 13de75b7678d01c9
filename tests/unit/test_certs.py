"""kubeadm's certificates: `rackform certs renew` (rackform.commands.certs), what it runs
(certs-renew.yml, role kubeadm's certs_renew and restart_static_pod), the hourly expiry metrics
the alerts read (role kubeadm's cert_metrics, run here with a stand-in kubeadm), the margin a
site sets for `rackform verify`, and verify's reading of kubeadm's JSON (tests/infra/checklib.py).

The renewal itself runs only on a real control plane: tests/lab/test_certificates_lab.py.
ansible-lint (slow) checks the playbook and the role as the emitted project's settings say.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from collection_support import ROLES_IN_PROJECT
from hang_limit import SUBPROCESS_HANG_S
from rackform.cli import main
from rackform.commands import certs
from rackform.model.loader import load_site
from rackform.paths import INFRA_CHECKS_DIR, ROLES_DIR
from rackform.render.project import render_files
from rackform.render.writer import write_project
from trusted_templates import trusted

ROLE = f"{ROLES_IN_PROJECT}kubeadm"
DAY_S = 86400


def _load_checklib():
    spec = importlib.util.spec_from_file_location("rackform_checklib_certs", INFRA_CHECKS_DIR / "checklib.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


checklib = _load_checklib()


def expiration_info(certificates: dict[str, int | None], authorities: dict[str, int] | None = None) -> dict:
    """kubeadm's `certs check-expiration -o json`: name -> seconds left (None: missing)."""
    def entry(name: str, seconds: int | None, ca: str | None) -> dict:
        if seconds is None:
            return {"name": name, "expirationDate": None, "residualTime": 0, "externallyManaged": False,
                    "missing": True}
        date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
        return {"name": name, "expirationDate": date, "residualTime": seconds, "externallyManaged": False,
                **({"caName": ca} if ca else {}), "missing": False}
    return {"kind": "CertificateExpirationInfo", "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
            "certificates": [entry(name, seconds, "ca") for name, seconds in certificates.items()],
            "certificateAuthorities": [entry(name, seconds, None) for name, seconds in (authorities or {}).items()]}


@pytest.fixture(scope="module")
def files(repo_root) -> dict[str, bytes]:
    return render_files(load_site("lab", repo_root))


def role_yaml(files, path: str):
    return yaml.safe_load(files[f"{ROLE}/{path}"])


def flat(tasks) -> list[dict]:
    found = []
    for task in tasks or ():
        found.append(task)
        for part in ("block", "rescue", "always"):
            found += flat(task.get(part, []))
    return found


def evaluate(files, value, **variables):
    """`value` rendered by Ansible's Templar with the role's defaults and vars and `variables`."""
    known = {**role_yaml(files, "defaults/main.yml"), **role_yaml(files, "vars/main.yml"),
             "inventory_hostname": "mgmt-1", **variables}
    return Templar(loader=DataLoader(), variables=trusted(known)).template(trusted(value))


# ---------------------------------------------------------------- the command's refusals


def _no_playbook_run(monkeypatch) -> None:
    def run_day2_playbook(*_args, **_kwargs):
        raise AssertionError("a refused renewal ran a playbook")

    monkeypatch.setattr("rackform.run.stages.run_day2_playbook", run_day2_playbook)


def test_an_unknown_site_is_refused(site_root, monkeypatch, capsys):
    _no_playbook_run(monkeypatch)
    code = main(["certs", "renew", "nosuch", "--root", str(site_root)])
    err = capsys.readouterr().err
    assert code == 2 and "no such site 'nosuch'" in err and "Traceback" not in err
    assert not (site_root / "build").exists()


def test_a_site_without_kubernetes_is_refused(lab_files, monkeypatch, capsys):
    _no_playbook_run(monkeypatch)
    lab_files.edit_site("extends: [roce, kubernetes]", "extends: [roce]")
    text = (lab_files.root / "topologies/sites/lab.yaml").read_text()
    start = text.index("\nkubernetes:")
    end = text.index("\n\n", start + 1)
    (lab_files.root / "topologies/sites/lab.yaml").write_text(text[:start] + text[end:])
    code = main(["certs", "renew", "lab", "--root", str(lab_files.root)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "site lab has no Kubernetes cluster" in err and "Traceback" not in err


def test_without_a_kubeconfig_nothing_runs_and_the_command_fails(site_root, monkeypatch, capsys):
    """No cluster deployed from this controller: nothing renewed, and that is no success."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = main(["certs", "renew", "lab", "--root", str(site_root)])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    assert "certs-renew.yml not run: no kubeconfig for this site" in captured.err
    assert (site_root / "build" / "lab" / "certs-renew.yml").is_file(), "the project is rendered with the playbook"


# ---------------------------------------------------------------- the playbook and the role's tasks


def test_the_playbook_renews_one_control_plane_node_at_a_time(files):
    (play,) = yaml.safe_load(files["certs-renew.yml"])
    assert (play["hosts"], play["serial"], play["any_errors_fatal"]) == ("kube_control_plane", 1, True)
    (task,) = play["tasks"]
    assert task["ansible.builtin.include_role"] == {"name": "rackform.site.kubeadm", "tasks_from": "certs_renew"}


def test_the_renewal_hands_the_vip_away_renews_restarts_and_takes_it_back(files):
    tasks = role_yaml(files, "tasks/certs_renew.yml")
    names = [task["name"] for task in tasks]
    hand_over = names.index("Hand the API's virtual IP to another control-plane node")
    renewal = tasks[names.index("Renew the certificates and restart the control plane with them")]
    assert names.index("Read the certificates' expiry before the renewal") < hand_over < names.index(renewal["name"])
    renew, restart, served = renewal["block"]
    assert renew["ansible.builtin.command"]["cmd"] == "kubeadm certs renew all"
    assert restart["ansible.builtin.include_tasks"] == "restart_static_pod.yml"
    assert restart["loop"] == "{{ kubeadm_static_pods }}" and restart["loop_control"]["loop_var"] == "kubeadm_static_pod"
    assert "apiserver.crt" in " ".join(served["ansible.builtin.command"]["argv"])
    (give_back,) = renewal["always"]
    assert give_back["ansible.builtin.systemd_service"] == {"name": "keepalived", "state": "started"}
    # Then the node Ready, the expiry read again, checked and reported, the kubeconfig fetched last.
    after = names[names.index(renewal["name"]) + 1:]
    assert after[0] == "Wait for this node to be Ready"
    assert after.index(certs.REPORT_TASK) > after.index("Check that each certificate now expires later than before")
    fetch = tasks[-1]
    assert (fetch["ansible.builtin.import_tasks"], fetch["when"]) == (
        "admin_kubeconfig.yml", "inventory_hostname == kubeadm_init_host")


def test_every_static_pod_is_restarted_etcd_first(files):
    pods = evaluate(files, role_yaml(files, "vars/main.yml")["kubeadm_static_pods"])
    assert [pod["name"] for pod in pods] == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    assert {pod["name"]: int(pod["port"]) for pod in pods} == {
        "etcd": 2381, "kube-apiserver": 6443, "kube-controller-manager": 10257, "kube-scheduler": 10259}
    assert all(pod["health"].startswith(("http://127.0.0.1:", "https://127.0.0.1:")) for pod in pods)


def test_a_static_pod_s_manifest_goes_back_whatever_happens(files):
    block, wait_healthy = role_yaml(files, "tasks/restart_static_pod.yml")
    move_out, wait_stopped = block["block"]
    (move_back,) = block["always"]
    manifest = "{{ kubeadm_manifests_dir }}/{{ kubeadm_static_pod.name }}.yaml"
    held = "{{ kubeadm_held_manifests_dir }}/{{ kubeadm_static_pod.name }}.yaml"
    assert move_out["ansible.builtin.command"] == {"argv": ["mv", manifest, held], "removes": manifest}
    assert move_back["ansible.builtin.command"] == {"argv": ["mv", held, manifest], "removes": held}
    assert wait_stopped["ansible.builtin.wait_for"]["state"] == "stopped"
    assert wait_healthy["ansible.builtin.uri"]["url"] == "{{ kubeadm_static_pod.health }}"
    assert wait_healthy["until"] == "kubeadm_static_pod_health.status == 200"
    # The held folder lies outside the kubelet's: a manifest there is no static pod.
    held_dir = evaluate(files, "{{ kubeadm_held_manifests_dir }}")
    assert not held_dir.startswith(evaluate(files, "{{ kubeadm_manifests_dir }}"))


def _renewal_check(files, before: dict, after: dict) -> list[bool]:
    """The role's check that each certificate now expires later, for each certificate it checks."""
    check = next(task for task in role_yaml(files, "tasks/certs_renew.yml")
                 if task["name"] == "Check that each certificate now expires later than before")
    variables = {"kubeadm_certs_before": {"stdout": json.dumps(before)},
                 "kubeadm_certs_after": {"stdout": "[certs] reading\n" + json.dumps(after)}}
    variables.update({name: evaluate(files, value, **variables) for name, value in check["vars"].items()})
    items = evaluate(files, check["loop"], **variables)
    return [evaluate(files, "{{ " + check["ansible.builtin.assert"]["that"] + " }}", item=item, **variables)
            for item in items]


def test_the_renewal_fails_a_certificate_that_did_not_move_later(files):
    before = expiration_info({"apiserver": 10 * DAY_S, "admin.conf": 10 * DAY_S, "super-admin.conf": None},
                             {"ca": 3000 * DAY_S})
    renewed = expiration_info({"apiserver": 365 * DAY_S, "admin.conf": 365 * DAY_S, "super-admin.conf": None},
                              {"ca": 3000 * DAY_S})
    assert _renewal_check(files, before, renewed) == [True, True], "the missing one and the CA are not checked"
    half = expiration_info({"apiserver": 365 * DAY_S, "admin.conf": 10 * DAY_S - 60, "super-admin.conf": None})
    assert _renewal_check(files, before, half) == [True, False]


def test_each_node_reports_its_certificates_new_expiry(files):
    """The message `rackform certs renew` prints per node: {certificate: new expiry}, missing ones left out."""
    report = next(task for task in role_yaml(files, "tasks/certs_renew.yml") if task["name"] == certs.REPORT_TASK)
    after = expiration_info({"apiserver": 365 * DAY_S, "super-admin.conf": None}, {"ca": 3000 * DAY_S})
    said = evaluate(files, report["ansible.builtin.debug"]["msg"],
                    kubeadm_certs_after={"stdout": "[certs] reading\n" + json.dumps(after)})
    assert said == {"apiserver": after["certificates"][0]["expirationDate"]}


def test_the_new_expiry_is_read_from_the_run_s_events(tmp_path):
    events = tmp_path / "artifacts" / "ident" / "job_events"
    events.mkdir(parents=True)
    for counter, (host, task, message) in enumerate([
            ("mgmt-2", certs.REPORT_TASK, {"apiserver": "2027-11-28T10:00:00Z", "admin.conf": "2027-11-28T10:00:01Z"}),
            ("mgmt-1", "Wait for this node to be Ready", "True"),
            ("mgmt-1", certs.REPORT_TASK, {"apiserver": "2027-11-28T09:58:00Z"})]):
        event = {"counter": counter, "event": "runner_on_ok",
                 "event_data": {"host": host, "task": task, "res": {"msg": message}}}
        (events / f"{counter}-x.json").write_text(json.dumps(event))
    (events / "9-partial.json").write_text("{")
    expiry = certs.renewed_expiry(tmp_path)
    assert list(expiry) == ["mgmt-2", "mgmt-1"]
    assert certs.expiry_lines(expiry) == ["mgmt-2: apiserver 2027-11-28, admin.conf 2027-11-28",
                                          "mgmt-1: apiserver 2027-11-28"]
    assert certs.expiry_lines(certs.renewed_expiry(None)) == ["no node reported its certificates' new expiry"]


# ---------------------------------------------------------------- the kubelet rotates its own


def test_the_kubelet_configuration_kubeadm_gets_leaves_rotation_on(files):
    """kubeadm sets rotateCertificates: true itself; rackform's KubeletConfiguration must not turn it off."""
    template = files[f"{ROLE}/templates/kubeadm-init.yaml.j2"].decode()
    kubelet = template[template.index("kind: KubeletConfiguration"):]
    assert "rotateCertificates: false" not in kubelet


# ---------------------------------------------------------------- the hourly expiry metrics


def _metrics_script(files, tmp_path: Path, kubeadm_output: str, kubeadm_rc: int = 0) -> subprocess.CompletedProcess:
    """The rendered script, run with a stand-in kubeadm on PATH that prints `kubeadm_output`."""
    folder = tmp_path / "textfile"
    folder.mkdir(exist_ok=True)
    source = files[f"{ROLE}/templates/kubeadm-cert-metrics.py.j2"].decode()
    script = tmp_path / "kubeadm-cert-metrics"
    script.write_text(jinja2.Template(source).render(kubeadm_cert_metrics_dir=str(folder), inventory_hostname="mgmt-1",
                                                     kubeadm_cert_metrics_unit="rackform-kubeadm-cert-metrics"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "output.json").write_text(kubeadm_output)
    kubeadm = bin_dir / "kubeadm"
    kubeadm.write_text(f"#!/bin/sh\n[ \"$*\" = 'certs check-expiration -o json' ] || exit 9\n"
                       f"cat {bin_dir / 'output.json'}\nexit {kubeadm_rc}\n")
    kubeadm.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          timeout=SUBPROCESS_HANG_S)


def test_the_timer_writes_each_certificate_s_expiry_for_node_exporter(files, tmp_path):
    info = expiration_info({"apiserver": 20 * DAY_S, "super-admin.conf": None}, {"ca": 3650 * DAY_S})
    result = _metrics_script(files, tmp_path, json.dumps(info))
    assert result.returncode == 0, result.stderr
    written = tmp_path / "textfile" / "kubeadm_certificates.prom"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644, "node-exporter runs as nobody"
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in written.read_text().splitlines() if not line.startswith("#")}
    expiry = "rackform_kubeadm_certificate_expiry_timestamp_seconds"
    assert set(samples) == {f'{expiry}{{node="mgmt-1",certificate="apiserver",kind="certificate"}}',
                            f'{expiry}{{node="mgmt-1",certificate="ca",kind="authority"}}',
                            'rackform_kubeadm_certificate_check_timestamp_seconds{node="mgmt-1"}'}
    now = time.time()
    assert abs(samples[f'{expiry}{{node="mgmt-1",certificate="apiserver",kind="certificate"}}'] - (now + 20 * DAY_S)) < 120
    assert abs(samples['rackform_kubeadm_certificate_check_timestamp_seconds{node="mgmt-1"}'] - now) < 120
    assert [path.name for path in (tmp_path / "textfile").iterdir()] == ["kubeadm_certificates.prom"]


def test_the_timer_keeps_the_last_reading_when_kubeadm_fails(files, tmp_path):
    assert _metrics_script(files, tmp_path, json.dumps(expiration_info({"apiserver": DAY_S}))).returncode == 0
    written = (tmp_path / "textfile" / "kubeadm_certificates.prom").read_text()
    result = _metrics_script(files, tmp_path, "cannot read /etc/kubernetes/pki", kubeadm_rc=1)
    assert result.returncode != 0 and "kubeadm certs check-expiration" in result.stderr
    assert (tmp_path / "textfile" / "kubeadm_certificates.prom").read_text() == written


def test_the_timer_is_installed_on_every_control_plane_node(files):
    control_plane = role_yaml(files, "tasks/control_plane.yml")
    assert control_plane[-1]["ansible.builtin.import_tasks"] == "cert_metrics.yml"
    tasks = {task["name"]: task for task in role_yaml(files, "tasks/cert_metrics.yml")}
    start = tasks["Start the hourly timer"]["ansible.builtin.systemd_service"]
    assert (start["name"], start["state"], start["enabled"]) == ("{{ kubeadm_cert_metrics_unit }}.timer", "started", True)
    handlers = {task["name"] for task in role_yaml(files, "handlers/main.yml")}
    assert {task["notify"] for task in tasks.values() if "notify" in task} <= handlers


# ---------------------------------------------------------------- the site's margin and verify's reading


def test_the_site_s_margin_reaches_the_inventory(lab_files):
    kube = yaml.safe_load(render_files(lab_files.load())["inventory/group_vars/k8s_cluster/kubernetes.yml"])
    assert kube["kubeadm_cert_expiry_margin_days"] == 30
    lab_files.edit_site('  version: "1.36.1"\n', '  version: "1.36.1"\n  cert_expiry_margin_days: 60\n')
    kube = yaml.safe_load(render_files(lab_files.load())["inventory/group_vars/k8s_cluster/kubernetes.yml"])
    assert kube["kubeadm_cert_expiry_margin_days"] == 60


def test_verify_reads_kubeadm_s_json_and_names_what_is_inside_the_margin():
    info = expiration_info({"apiserver": 400 * DAY_S, "admin.conf": 29 * DAY_S + 3600, "etcd-server": -DAY_S,
                            "super-admin.conf": None}, {"ca": 3650 * DAY_S})
    found = checklib.kubeadm_certificates("[check-expiration] Reading configuration\n" + json.dumps(info))
    assert [(cert.name, cert.days_left, cert.authority, cert.missing) for cert in found] == [
        ("apiserver", 400, False, False), ("admin.conf", 29, False, False), ("etcd-server", -1, False, False),
        ("super-admin.conf", 0, False, True), ("ca", 3650, True, False)]
    inside = checklib.certificates_inside(found, 30)
    assert [line.split(":")[0] for line in inside] == ["admin.conf", "etcd-server"]
    assert inside[0].startswith("admin.conf: 29 days left (expires ")
    assert checklib.certificates_inside(found, 1) == [inside[1]]
    summary = checklib.certificate_summary(found)
    assert "apiserver 20" in summary and "(400 d)" in summary and "super-admin.conf missing" in summary
    assert "ca (CA) " in summary


# ---------------------------------------------------------------- ansible-lint


@pytest.mark.slow
def test_the_playbook_and_the_role_pass_ansible_lint_production_profile(tmp_path, files):
    project = tmp_path / "lab"
    write_project(files, project)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(["ansible-lint", "--offline", "--profile", "production", "--nocolor", "certs-renew.yml",
                             f"{ROLES_IN_PROJECT}kubeadm"],
                            cwd=project, env=env, capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_role_s_files_are_where_the_tests_read_them():
    for name in ("certs_renew.yml", "restart_static_pod.yml", "cert_metrics.yml", "admin_kubeconfig.yml"):
        assert (ROLES_DIR / "kubeadm" / "tasks" / name).is_file(), name
