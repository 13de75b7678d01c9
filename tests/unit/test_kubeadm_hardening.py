"""The kubeadm role's hardening of the control plane and the nodes (issue 27):

- the join token and the certificate key: every task that handles them hides its output,
  a failure says why with them masked, and the join file is removed after the join;
- the admin kubeconfig is 0600 on the controller, before and after the fetch;
- Secrets encrypted at rest: secretbox keys from the site vault (never the rendered
  project), rendered in the vault's order, the key being rolled out placed as the API
  servers need it; the ClusterConfiguration names the files kube-apiserver reads;
- the audit log: Metadata at most, never a body, probes and events left out;
- cgroup v1: refused outside a lab_only site, before anything changes, naming the nodes.

Templates and expressions are rendered with Ansible's own templating (Templar); the refusals
run through ansible-playbook against localhost (marked slow)."""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from collection_support import ROLES_IN_PROJECT, install_collection
from hang_limit import SUBPROCESS_HANG_S
from rackform import secrets, secrets_cli
from rackform.k8s.kubeadm import ClusterConfiguration, ClusterConfigurationV1beta3, validate_documents
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.run.environment import stage_environment

from trusted_templates import trusted

ROOT = Path(__file__).resolve().parents[2]
ROLE = f"{ROLES_IN_PROJECT}kubeadm"
TOKEN = "abcdef.0123456789abcdef"
CERT_KEY = "e6a2eb8581237ab72a4f494f30285ec12a9694d750b9785706a83bfcbbbd2204"
KEYS = [{"name": "key-new", "secret": base64.b64encode(b"n" * 32).decode()},
        {"name": "key-old", "secret": base64.b64encode(b"o" * 32).decode()}]


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def role_yaml(files, path: str):
    return yaml.safe_load(files[f"{ROLE}/{path}"])


def flat(tasks: list[dict]) -> list[dict]:
    """Every task, those of blocks (block, rescue, always) included, in file order."""
    found = []
    for task in tasks or ():
        found.append(task)
        for part in ("block", "rescue", "always"):
            found += flat(task.get(part, []))
    return found


def role_tasks(files, name: str) -> dict[str, dict]:
    return {task["name"]: task for task in flat(role_yaml(files, f"tasks/{name}"))}


def evaluate(files, value, **variables):
    """`value` as Ansible renders it with the role's defaults and vars, the lab's inventory values
    for the cluster, and `variables`."""
    kube = yaml.safe_load(files["inventory/group_vars/k8s_cluster/kubernetes.yml"])
    mirror = yaml.safe_load(files.get("inventory/group_vars/all/mirror.yml", b"{}"))
    groups_tree = yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]["k8s_cluster"]["children"]
    groups = {name: list((group or {}).get("hosts") or {}) for name, group in groups_tree.items()}
    hostvars = {path.split("/")[-1][:-4]: yaml.safe_load(text) for path, text in files.items()
                if path.startswith("inventory/host_vars/") and path.endswith(".yml")}
    host = variables.get("inventory_hostname", "mgmt-1")
    known = {**role_yaml(files, "defaults/main.yml"), **role_yaml(files, "vars/main.yml"), **mirror, **kube,
             **hostvars[host], "groups": groups, "hostvars": hostvars, "inventory_hostname": host,
             "site_name": "lab", **variables}
    templar = Templar(loader=DataLoader(), variables=trusted(known))
    return templar.template(trusted(value))


def render(files, template: str, **variables) -> str:
    return evaluate(files, files[f"{ROLE}/templates/{template}"].decode(), **variables)


# ---------------------------------------------------------------- the join token and certificate key

SECRET_TASKS = {
    "join_facts.yml": ["Create a join token", "Upload the control-plane certificates", "Read the join parameters"],
    "control_plane.yml": ["Initialise the cluster on the first control-plane node",
                          "Write the control-plane join configuration", "Join the other control-plane nodes one at a time"],
    "worker.yml": ["Write the worker join configuration", "Join the cluster as a worker"],
    "encryption_keys.yml": ["Read the encryption configuration of the first control-plane node",
                            "Note the key the API servers write Secrets with now"],
    "apiserver_pass.yml": ["Write the encryption configuration (its keys from the site vault)"],
    "apiserver.yml": ["Write every Secret again, encrypted with the vault's first key"],
}


@pytest.mark.parametrize(("file", "name"), [(file, name) for file, names in SECRET_TASKS.items() for name in names])
def test_a_task_that_handles_a_token_key_or_secret_shows_nothing_of_it(files, file, name):
    assert role_tasks(files, file)[name].get("no_log") is True


def _task_text(task: dict) -> str:
    return yaml.safe_dump({key: value for key, value in task.items() if key not in ("block", "rescue", "always")})


SECRET_SOURCES = ("kubeadm init --", "kubeadm token create", "upload-certs", "kubeadm join", "kubeadm-join.yaml.j2",
                  "encryption-config.yaml.j2", "kubeadm_join_command.stdout", "kubeadm_upload_certs.stdout",
                  "kubeadm_init_encryption_config", "get secrets")


def test_no_task_of_the_role_handles_a_secret_without_no_log(files):
    """Not only the tasks named above: any task that runs a command printing a token or key, writes a
    file holding one, or reads one out of a result."""
    exposed = []
    for path in files:
        if path.startswith(f"{ROLE}/tasks/"):
            for task in flat(yaml.safe_load(files[path])):
                text = _task_text(task)
                if any(source in text for source in SECRET_SOURCES) and task.get("no_log") is not True:
                    if "regex_replace(kubeadm_secret_pattern" not in text and "block" not in task:
                        exposed.append(f"{path.split('/')[-1]}: {task['name']}")
    assert exposed == []


def test_the_secret_pattern_hides_a_token_and_a_certificate_key(files):
    said = evaluate(files, "{{ output | regex_replace(kubeadm_secret_pattern, '<hidden>') }}",
                    output=f"kubeadm join 10.10.0.5:6443 --token {TOKEN} --certificate-key {CERT_KEY} failed")
    assert said == "kubeadm join 10.10.0.5:6443 --token <hidden> --certificate-key <hidden> failed"


@pytest.mark.parametrize(("file", "block"), [("control_plane.yml", "Join the other control-plane nodes"),
                                             ("worker.yml", "Join the cluster")])
def test_a_failed_join_says_why_with_the_token_and_key_masked(files, file, block):
    rescue = next(task for task in role_yaml(files, f"tasks/{file}") if task["name"] == block)["rescue"][0]
    said = evaluate(files, rescue["ansible.builtin.fail"]["msg"], ansible_failed_task={"name": "kubeadm join"},
                    kubeadm_join={"stderr": f"error: token {TOKEN} rejected; certificate key {CERT_KEY}", "stdout": ""})
    assert "kubeadm join failed on mgmt-1" in said and "token <hidden> rejected" in said
    assert TOKEN not in said and CERT_KEY not in said


@pytest.mark.parametrize(("file", "block", "node_joined_skip"), [
    ("control_plane.yml", "Join the other control-plane nodes", "inventory_hostname != kubeadm_init_host"),
    ("worker.yml", "Join the cluster", None)])
def test_the_join_file_is_removed_whatever_the_join_did_and_made_only_for_a_node_to_join(files, file, block,
                                                                                         node_joined_skip):
    joining = next(task for task in role_yaml(files, f"tasks/{file}") if task["name"] == block)
    assert joining.get("when") == node_joined_skip, "the removal runs on joined nodes too (earlier runs left the file)"
    assert [task["ansible.builtin.file"] for task in joining["always"]] == [
        {"path": "{{ kubeadm_config_dir }}/kubeadm-join.yaml", "state": "absent"}]
    write, join = joining["block"]
    assert write["ansible.builtin.template"]["src"] == "kubeadm-join.yaml.j2"
    assert write["when"] == join["when"] == "not kubeadm_joined | bool", "a second run writes no join file"


def test_token_and_certificate_key_are_made_only_while_a_node_has_to_join(files):
    steps = role_tasks(files, "join_facts.yml")
    assert steps["Create a join token"]["when"] == "kubeadm_waiting | length > 0"
    assert "kubeadm_waiting | length > 0" in steps["Upload the control-plane certificates"]["when"]


def test_a_failed_token_creation_is_reported_masked(files):
    refusal = role_tasks(files, "join_facts.yml")["Refuse to go on without a join token and certificate key (why, masked)"]
    said = evaluate(files, refusal["ansible.builtin.assert"]["fail_msg"],
                    kubeadm_join_command={"rc": 1, "stderr": f"could not print {TOKEN}"}, kubeadm_upload_certs={})
    assert said.startswith("kubeadm token create failed on mgmt-1") and TOKEN not in said


# ---------------------------------------------------------------- the admin kubeconfig


def test_the_fetched_kubeconfig_is_private_before_and_after_the_fetch(files):
    """The kubernetes stage and the certificate renewal fetch it with the same tasks."""
    fetching = next(task for task in role_yaml(files, "tasks/control_plane.yml")
                    if task["name"].startswith("Fetch the admin kubeconfig"))
    assert (fetching["ansible.builtin.import_tasks"], fetching["when"]) == (
        "admin_kubeconfig.yml", "inventory_hostname == kubeadm_init_host")
    folder, before, fetch, after = role_yaml(files, "tasks/admin_kubeconfig.yml")
    assert folder["when"] == "not (playbook_dir ~ '/artifacts') is directory", "ansible-runner's folder left as it is"
    path = "{{ playbook_dir }}/artifacts/kubeconfig"
    assert fetch["ansible.builtin.fetch"]["dest"] == path
    for step in (before, after):
        assert (step["ansible.builtin.file"]["path"], step["ansible.builtin.file"]["mode"]) == (path, "0600")
        assert (step["delegate_to"], step["become"]) == ("localhost", False)
    # Idempotent: the file made private ahead keeps its times, so a second run changes nothing.
    assert before["ansible.builtin.file"]["state"] == "touch"
    assert (before["ansible.builtin.file"]["access_time"], before["ansible.builtin.file"]["modification_time"]) == (
        "preserve", "preserve")


# ---------------------------------------------------------------- Secrets encrypted at rest


def providers(text: str) -> list[tuple[str, list[str]]]:
    document = yaml.safe_load(text)
    assert (document["apiVersion"], document["kind"]) == ("apiserver.config.k8s.io/v1", "EncryptionConfiguration")
    (resources,) = document["resources"]
    assert resources["resources"] == ["secrets"]
    return [(name, [key["name"] for key in (settings or {}).get("keys", [])])
            for provider in resources["providers"] for name, settings in provider.items()]


def test_the_encryption_configuration_has_the_vault_s_keys_in_order_the_first_writes(files):
    text = render(files, "encryption-config.yaml.j2", kubeadm_encryption_keys=KEYS)
    assert providers(text) == [("secretbox", ["key-new", "key-old"]), ("identity", [])]
    secretbox = yaml.safe_load(text)["resources"][0]["providers"][0]["secretbox"]["keys"]
    assert [base64.b64decode(key["secret"]) for key in secretbox] == [b"n" * 32, b"o" * 32]


def test_while_a_new_key_is_learnt_the_key_in_use_still_writes(files):
    text = render(files, "encryption-config.yaml.j2", kubeadm_encryption_keys=KEYS, kubeadm_encryption_write="key-old")
    assert providers(text) == [("secretbox", ["key-old", "key-new"]), ("identity", [])]


def test_a_cluster_that_encrypted_nothing_learns_the_keys_before_it_writes_with_them(files):
    text = render(files, "encryption-config.yaml.j2", kubeadm_encryption_keys=KEYS, kubeadm_encryption_write="identity")
    assert providers(text) == [("identity", []), ("secretbox", ["key-new", "key-old"])]


@pytest.mark.parametrize(("in_use", "passes"), [
    ("none", ["key-new"]),                   # no cluster yet: the files before init, no restart
    ("key-new", ["key-new"]),                # the vault's first key in use: nothing to roll out
    ("key-old", ["key-old", "key-new"]),     # a rotation: learn, then write with the new key
    ("identity", ["identity", "key-new"]),   # a cluster made before encryption
])
def test_the_api_servers_change_keys_in_two_passes_only_when_the_key_in_use_changes(files, in_use, passes):
    steps = {task["name"]: task for task in role_yaml(files, "tasks/apiserver.yml")}
    learn = steps["Teach the running API servers the vault's first key, for reading only"]
    write = steps["Have the API servers write with the vault's first key"]
    variables = {"kubeadm_encryption_in_use": in_use, "kubeadm_encryption_keys": KEYS}
    ran = []
    if evaluate(files, "{{ " + learn["when"] + " }}", **variables):
        ran.append(evaluate(files, learn["vars"]["kubeadm_encryption_write"], **variables))
    ran.append("key-new")  # the second pass always runs, with the template's default: the vault's first key
    assert "when" not in write and ran == passes
    marker = steps["Note that every Secret must be written again with the vault's first key"]
    assert marker["when"] == learn["when"], "every Secret is written again after a change of the key in use"


def test_every_secret_is_written_again_while_the_marker_says_so(files):
    steps = role_tasks(files, "apiserver.yml")
    rewrite = steps["Write every Secret again, encrypted with the vault's first key"]
    assert rewrite["when"] == "kubeadm_rewrite_marker.stat.exists"
    command = " ".join(rewrite["ansible.builtin.shell"]["cmd"].split())
    assert "get secrets --all-namespaces -o json | kubectl --kubeconfig /etc/kubernetes/admin.conf replace -f -" in command
    assert steps["Note that the Secrets are written with the vault's first key"]["when"] == rewrite["when"]


@pytest.mark.parametrize(("in_use", "known"), [("none", True), ("identity", True), ("key-old", True),
                                               ("key-gone", False)])
def test_a_vault_that_lost_the_key_in_use_is_refused(files, in_use, known):
    refusal = role_tasks(files, "encryption_keys.yml")["Refuse a vault that lacks the key the API servers write with"]
    assert evaluate(files, "{{ " + refusal["ansible.builtin.assert"]["that"] + " }}",
                    kubeadm_encryption_in_use=in_use, kubeadm_encryption_keys=KEYS) is known


def manifest(flags: list[str], annotation: str | None) -> str:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "kube-apiserver", "annotations": {"rackform.io/apiserver-config": annotation}
                        if annotation else {}},
           "spec": {"containers": [{"name": "kube-apiserver", "image": "10.10.0.11:5000/kube-apiserver:v1.36.1",
                                    "command": ["kube-apiserver", "--advertise-address=10.10.0.11", *flags]}]}}
    return base64.b64encode(yaml.safe_dump(pod).encode()).decode()


@pytest.mark.parametrize(("api_server", "stale"), [
    (None, False),                                        # no API server on this node yet
    ("all flags, this fingerprint", False),
    ("all flags, another fingerprint", True),             # a file or argument changed
    ("no flags, no fingerprint", True),                   # a cluster made before this
    ("no flags, this fingerprint", True),                 # joined while kubeadm-config lacked the arguments
])
def test_an_api_server_restarts_when_its_files_or_arguments_change(files, api_server, stale):
    flags = evaluate(files, "{{ kubeadm_apiserver_flags }}")
    assert "--encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml" in flags
    note = role_tasks(files, "apiserver_pass.yml")["Note whether this node's API server runs with other files or arguments"]
    content = None if api_server is None else manifest(
        flags if api_server.startswith("all flags") else [],
        None if "no fingerprint" in api_server else "abc" if "another" in api_server else "0123456789abcdef")
    found = evaluate(files, note["ansible.builtin.set_fact"]["kubeadm_apiserver_stale"],
                     kubeadm_apiserver_manifest={} if content is None else {"content": content},
                     kubeadm_apiserver_config_id="0123456789abcdef",
                     kubeadm_apiserver_pod=evaluate(files, note["vars"]["kubeadm_apiserver_pod"],
                                                    kubeadm_apiserver_manifest={} if content is None
                                                    else {"content": content}))
    assert found is stale


def test_api_servers_restart_one_node_at_a_time_waiting_for_each(files):
    restart = role_yaml(files, "tasks/apiserver_restart.yml")[0]
    names = [task["name"] for task in restart["block"]]
    assert names == ["Hand the API's virtual IP to another control-plane node",
                     "Write the API server's manifest again (the kubelet restarts it)",
                     "Wait for the API server to run with its new files and arguments, Ready"]
    assert restart["always"][0]["ansible.builtin.systemd_service"] == {"name": "keepalived", "state": "started"}
    assert " ".join(restart["block"][1]["ansible.builtin.command"]["cmd"].split()) == (
        "kubeadm init phase control-plane apiserver --config {{ kubeadm_config_dir }}/kubeadm-init.yaml")
    including = role_tasks(files, "apiserver_pass.yml")["Restart the API servers that run with other files, one node at a time"]
    assert including["ansible.builtin.include_tasks"] == "apiserver_restart.yml"
    assert including["when"] == "inventory_hostname == ansible_play_hosts | first and not ansible_check_mode", \
        "one loop, over the nodes in turn; none under --check"


def init_documents(files, **variables):
    return validate_documents(render(files, "kubeadm-init.yaml.j2", kubeadm_node_role="control_plane", **variables))


def test_the_cluster_configuration_names_the_encryption_and_audit_files(files):
    cluster = next(document for document in init_documents(files) if isinstance(document, ClusterConfiguration))
    assert {arg.name: arg.value for arg in cluster.apiServer.extraArgs} == {
        "encryption-provider-config": "/etc/kubernetes/enc/encryption-config.yaml",
        "audit-policy-file": "/etc/kubernetes/audit/policy.yaml",
        "audit-log-path": "/var/log/kubernetes/audit/audit.log",
        "audit-log-maxage": "30", "audit-log-maxbackup": "10", "audit-log-maxsize": "100"}
    assert [(volume.hostPath, volume.mountPath, volume.readOnly) for volume in cluster.apiServer.extraVolumes] == [
        ("/etc/kubernetes/enc", "/etc/kubernetes/enc", True), ("/etc/kubernetes/audit", "/etc/kubernetes/audit", True),
        ("/var/log/kubernetes/audit", "/var/log/kubernetes/audit", False)]


def test_every_control_plane_node_gets_its_own_init_configuration_with_the_patches(files):
    documents = init_documents(files, inventory_hostname="mgmt-3")
    assert documents[0].localAPIEndpoint.advertiseAddress == "10.10.0.13"
    assert documents[0].patches.directory == "/etc/kubernetes/rackform/patches"
    write = role_tasks(files, "config.yml")["Write the kubeadm init configuration (cluster, this control-plane node, kubelet)"]
    assert write["when"] == "kubeadm_node_role == 'control_plane'"


def test_a_control_plane_join_applies_the_patches_too(files):
    text = render(files, "kubeadm-join.yaml.j2", kubeadm_node_role="control_plane", inventory_hostname="mgmt-2",
                  kubeadm_join_token=TOKEN, kubeadm_ca_cert_hash="sha256:" + "0" * 64, kubeadm_certificate_key=CERT_KEY)
    assert validate_documents(text)[0].patches.directory == "/etc/kubernetes/rackform/patches"


def test_a_site_below_1_31_writes_the_arguments_as_a_map(files, make_site_files, tmp_path):
    site_files = make_site_files(tmp_path)
    site_files.edit_site("mirror:\n  host: mgmt-1\n", "")
    site_files.pin_lab_kubernetes("1.30.9")
    documents = init_documents(render_files(site_files.load()))
    cluster = next(document for document in documents if isinstance(document, ClusterConfigurationV1beta3))
    assert cluster.apiServer.extraArgs["encryption-provider-config"] == "/etc/kubernetes/enc/encryption-config.yaml"


def test_the_vault_s_keys_never_reach_the_rendered_project(lab_files, tmp_path, monkeypatch):
    """The keys come from the vault at run time (vars_files from RACKFORM_BMC_VAULT), as the BMC
    passwords do: rendering the project cannot put them anywhere in it."""
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(tmp_path / "secrets"))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    site = lab_files.load()
    vault = secrets.ensure_site_vault(site)
    (key,) = vault.encryption_keys()
    rendered = render_files(site)
    assert [path for path, content in rendered.items() if key.secret.encode() in content] == []
    assert not any(b"rackform_kube_encryption_keys:" in content for path, content in rendered.items()
                   if path.startswith("inventory/"))
    for play in yaml.safe_load(rendered["kubernetes.yml"]):
        if play["name"] in ("Refuse what the cluster must not be built on", "Kubernetes control plane"):
            assert play["vars_files"] == [
                "{{ lookup('ansible.builtin.env', 'RACKFORM_BMC_VAULT') or 'RACKFORM_BMC_VAULT-is-not-set' }}"]


def test_the_role_reads_the_keys_from_the_vault_s_variable(files):
    assert role_yaml(files, "defaults/main.yml")["kubeadm_encryption_keys"] == (
        "{{ " + secrets.ENCRYPTION_KEYS_VARIABLE + " | default([]) }}")


# ---------------------------------------------------------------- the audit log


def test_the_audit_policy_never_records_a_body(files):
    policy = yaml.safe_load(render(files, "audit-policy.yaml.j2"))
    assert (policy["apiVersion"], policy["kind"], policy["omitStages"]) == ("audit.k8s.io/v1", "Policy", ["RequestReceived"])
    assert {rule["level"] for rule in policy["rules"]} == {"None", "Metadata"}
    assert policy["rules"][-1] == {"level": "Metadata"}, "everything else: metadata"


def test_the_audit_policy_leaves_out_probes_and_events(files):
    rules = yaml.safe_load(render(files, "audit-policy.yaml.j2"))["rules"]
    ignored = [rule for rule in rules if rule["level"] == "None"]
    assert "/healthz*" in ignored[0]["nonResourceURLs"] and "/readyz*" in ignored[0]["nonResourceURLs"]
    assert {"group": "", "resources": ["events"]} in ignored[1]["resources"]
    secret_rule = next(rule for rule in rules if any("secrets" in item["resources"] for item in rule.get("resources", [])))
    assert secret_rule["level"] == "Metadata" and rules.index(secret_rule) < len(rules) - 1


# ---------------------------------------------------------------- cgroup v1


def test_the_lab_may_run_on_cgroup_v1_and_a_real_site_may_not(files, lab_files):
    assert yaml.safe_load(files["inventory/group_vars/k8s_cluster/kubernetes.yml"])["kubeadm_allow_cgroup_v1"] is True
    lab_files.edit_site("lab_only: true", "lab_only: false")
    real = render_files(lab_files.load())
    assert yaml.safe_load(real["inventory/group_vars/k8s_cluster/kubernetes.yml"])["kubeadm_allow_cgroup_v1"] is False


def test_the_role_refuses_cgroup_v1_unless_told(files):
    assert role_yaml(files, "defaults/main.yml")["kubeadm_allow_cgroup_v1"] is False


def test_the_kubernetes_stage_refuses_before_any_other_play(files):
    first = yaml.safe_load(files["kubernetes.yml"])[0]
    assert (first["hosts"], first["any_errors_fatal"], first["roles"][0]["kubeadm_node_role"]) == (
        "k8s_cluster", True, "preflight")
    assert first["roles"][0]["tags"] == ["always"], "the refusal runs whatever tags a run picks"
    assert role_yaml(files, "tasks/preflight.yml")[0]["ansible.builtin.import_tasks"] == "cgroup.yml"


@pytest.mark.parametrize(("v1_hosts", "allowed", "named"), [
    ([], False, []), (["gpu-2"], False, ["gpu-2"]), (["mgmt-1", "gpu-2"], False, ["gpu-2", "mgmt-1"]),
    (["gpu-2"], True, ["gpu-2"])])
def test_the_cgroup_refusal_names_every_node_on_v1(files, v1_hosts, allowed, named):
    refusal = role_tasks(files, "cgroup.yml")["Refuse nodes on cgroup v1"]
    hosts = ["mgmt-1", "mgmt-2", "gpu-2"]
    variables = {"ansible_play_hosts": hosts, "kubeadm_allow_cgroup_v1": allowed,
                 "hostvars": {host: {"kubeadm_cgroup_v1": host in v1_hosts} for host in hosts}}
    assert evaluate(files, refusal["vars"]["kubeadm_cgroup_v1_hosts"], **variables) == named
    passed = evaluate(files, "{{ " + refusal["ansible.builtin.assert"]["that"] + " }}",
                      kubeadm_cgroup_v1_hosts=named, kubeadm_allow_cgroup_v1=allowed)
    assert passed is (allowed or not named)


# ---------------------------------------------------------------- the vault and its keys


@pytest.fixture()
def vault(tmp_path) -> secrets.SiteVault:
    return secrets.SiteVault("hardtest", tmp_path / "secrets", environ={})


def test_the_first_key_is_32_random_bytes_made_once(vault):
    made = vault.ensure_encryption_key()
    assert len(base64.b64decode(made.secret)) == 32 and made.secret not in repr(made)
    assert vault.ensure_encryption_key() is None and vault.encryption_keys() == [made]


def test_a_rotation_puts_the_new_key_first_and_keeps_the_old_ones_in_order(vault):
    first = vault.ensure_encryption_key()
    second = vault.rotate_encryption_key()
    third = vault.rotate_encryption_key()
    assert [key.name for key in vault.encryption_keys()] == [third.name, second.name, first.name]
    assert len({first.secret, second.secret, third.secret}) == 3
    assert vault.forget_old_encryption_keys() == [second.name, first.name]
    assert vault.encryption_keys() == [third]


def test_the_bmc_passwords_and_the_keys_keep_each_other(vault):
    key = vault.ensure_encryption_key()
    vault.ensure(["node-1"])
    vault.rotate(["node-1"])
    vault.forget_previous(["node-1"])
    assert vault.encryption_keys() == [key]
    password = vault.load()["node-1"].password
    vault.rotate_encryption_key()
    assert vault.load()["node-1"].password == password


def test_the_vault_file_holds_the_keys_encrypted(vault):
    key = vault.ensure_encryption_key()
    assert key.secret.encode() not in vault.vault_file.read_bytes()
    assert vault.vault_file.read_bytes().startswith(b"$ANSIBLE_VAULT;")


def test_key_names_stay_unique_within_one_second():
    from datetime import UTC, datetime

    now = datetime(2026, 11, 28, 10, 30, tzinfo=UTC)
    first = secrets.generate_encryption_key((), now)
    assert first.name == "key-20261128t103000z"
    assert secrets.generate_encryption_key([first.name], now).name == "key-20261128t103000z-2"


def secrets_command(root: Path, capsys, **action) -> tuple[int, str]:
    values = {"rotate": None, "rotate_all": False, "forget_previous": None, "rotate_encryption_key": False,
              "forget_old_encryption_keys": False, **action}
    code = secrets_cli.run(argparse.Namespace(site="lab", root=root, **values))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture()
def secrets_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "secrets"
    monkeypatch.setenv("RACKFORM_SECRETS_DIR", str(folder))
    monkeypatch.delenv("RACKFORM_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("RACKFORM_BMC_VAULT", raising=False)
    monkeypatch.setattr("rackform.lab.state.load", lambda site: None)
    return folder


def test_the_secrets_command_rotates_the_key_and_names_it_never_shows_it(lab_files, secrets_dir, capsys):
    code, said = secrets_command(lab_files.root, capsys)
    (first,) = secrets.SiteVault("lab").encryption_keys()
    assert code == 0 and f"new encryption key {first.name}" in said
    code, said = secrets_command(lab_files.root, capsys, rotate_encryption_key=True)
    keys = secrets.SiteVault("lab").encryption_keys()
    assert code == 0 and [key.name for key in keys][1:] == [first.name]
    assert f"new encryption key {keys[0].name}, first of 2" in said and "--stage kubernetes" in said
    assert not any(key.secret in said for key in keys)
    code, said = secrets_command(lab_files.root, capsys, forget_old_encryption_keys=True)
    assert code == 0 and f"forgot the encryption key(s) {first.name}" in said
    assert secrets.SiteVault("lab").encryption_keys() == keys[:1]


def test_the_kubernetes_stage_is_given_the_site_vault(lab_files, secrets_dir):
    site = lab_files.load()
    env = stage_environment(site, {"kubernetes"})
    assert env.envvars["RACKFORM_BMC_VAULT"] == str(secrets_dir / "lab" / "bmc_vault.yml")
    assert len(secrets.SiteVault("lab").encryption_keys()) == 1
    assert "RACKFORM_BMC_VAULT" not in stage_environment(site, {"os"}).envvars


# ---------------------------------------------------------------- the refusals, run by Ansible

PREFLIGHT = """\
---
- name: Refuse what the cluster must not be built on
  hosts: all
  gather_facts: false
  any_errors_fatal: true
  roles:
    - role: rackform.site.kubeadm
      kubeadm_node_role: preflight

- name: What the stage would change next
  hosts: all
  gather_facts: false
  tasks:
    - name: Leave a mark
      ansible.builtin.file:
        path: "{{ mark_dir }}/{{ inventory_hostname }}"
        state: touch
        mode: "0600"
"""


def running_api_server(tmp_path: Path, writes_with: str) -> None:
    """The first control-plane node's API server as the role finds it: started with an
    encryption configuration whose first key is `writes_with`."""
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "kube-apiserver.yaml").write_bytes(base64.b64decode(manifest(
        ["--encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml"], "0123456789abcdef")))
    (tmp_path / "enc").mkdir()
    keys = [{"name": writes_with, "secret": KEYS[0]["secret"]}]
    (tmp_path / "enc" / "encryption-config.yaml").write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": [{"secretbox": {"keys": keys}}, {"identity": {}}]}]}))


def preflight(tmp_path: Path, v1_hosts: tuple[str, ...], *extra: str, keys=tuple(KEYS)) -> tuple[int, str, list]:
    collections = install_collection(tmp_path / "collections")
    marks = tmp_path / "marks"
    marks.mkdir()
    v2_file = tmp_path / "cgroup.controllers"
    v2_file.write_text("cpu memory\n")
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "mark_dir": str(marks), "kubeadm_manifests_dir": str(tmp_path / "manifests"),
                                  "kubeadm_encryption_config_dir": str(tmp_path / "enc"),
                                  "rackform_kube_encryption_keys": list(keys)},
                         # Workers first: the play's first host is not a control-plane node.
                         "children": {"kube_node": {"hosts": {"w-1": {}, "w-2": {}}},
                                      "kube_control_plane": {"hosts": {"cp-1": {}}}}}}
    for group in inventory["all"]["children"].values():
        for host in group["hosts"]:
            group["hosts"][host] = {"kubeadm_cgroup_v2_file": str(tmp_path / "no-such-file" if host in v1_hosts
                                                                  else v2_file)}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (tmp_path / "preflight.yml").write_text(PREFLIGHT)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".ansible-tmp"),
                "ANSIBLE_NOCOLOR": "1"})
    done = subprocess.run(["ansible-playbook", "-i", "hosts.yml", "preflight.yml", *extra], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    return done.returncode, done.stdout + done.stderr, sorted(path.name for path in marks.iterdir())


@pytest.mark.slow
def test_a_real_site_with_a_node_on_cgroup_v1_stops_before_anything_changes(tmp_path):
    code, output, marked = preflight(tmp_path, ("w-2",))
    assert code != 0 and marked == [], output
    assert "cgroup v1 on w-2: " in output and "systemd.unified_cgroup_hierarchy=1" in output


@pytest.mark.slow
def test_a_lab_runs_on_cgroup_v1_with_a_warning(tmp_path):
    code, output, marked = preflight(tmp_path, ("w-2",), "-e", "kubeadm_allow_cgroup_v1=true")
    assert code == 0 and marked == ["cp-1", "w-1", "w-2"], output
    assert "w-2 runs cgroup v1, which Kubernetes deprecated in 1.35; accepted on this lab" in output


@pytest.mark.slow
def test_a_control_plane_without_encryption_keys_stops_before_anything_changes(tmp_path):
    code, output, marked = preflight(tmp_path, (), keys=())
    assert code != 0 and marked == [], output
    assert "No usable encryption keys for the API servers" in output and "rackform secrets" in output


@pytest.mark.slow
def test_a_vault_that_lost_the_key_the_api_servers_write_with_stops_before_anything_changes(tmp_path):
    running_api_server(tmp_path, "key-gone")
    code, output, marked = preflight(tmp_path, ())
    assert code != 0 and marked == [], output
    assert "The API servers write Secrets with the encryption key key-gone, which the site vault" in output


@pytest.mark.slow
def test_a_vault_that_still_has_the_key_in_use_goes_on(tmp_path):
    running_api_server(tmp_path, "key-old")
    code, output, marked = preflight(tmp_path, ())
    assert code == 0 and marked == ["cp-1", "w-1", "w-2"], output
