"""The site mirror's roles as rendered into the lab project: `site_mirror` on the mirror host
and `mirror_client` on every server (os stage), and the containerd settings that point at the
mirror (kubernetes stage).

Templates and the Jinja that decides what is copied and pushed are evaluated with Ansible's
own templating (ansible.template.Templar) against given inventory values, so these tests
see what a run would write, without a host. The lab test (tests/lab/test_site_mirror_lab.py)
runs them for real."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar

from rackform.collection import short_name
from rackform.k8s.site_mirror import UPSTREAM_HOSTS
from rackform.model.loader import load_site
from rackform.render.project import render_files
from rackform.render.digest import stage_files
from collection_support import ROLES_IN_PROJECT

from trusted_templates import trusted

init_plugin_loader()  # lookups (the roles read files on the controller) need Ansible's plugins
ROOT = Path(__file__).resolve().parents[2]
MIRROR_ROLES = ("site_mirror", "mirror_client")
BUNDLE = "/var/lib/rackform/mirror/bundles/kubernetes-1.36.3"
ROOT_DIR = "/srv/rackform-mirror"
REGISTRY = "10.1.0.11:5000"
CERTS_D = "/etc/containerd/certs.d"
NAMES_HEADER = "# Written by rackform (role containerd): the registry names configured in this folder.\n"
SIGNATURES = "/var/lib/rackform/mirror/sites/lab/kubernetes-1.36.3"
MIRROR = {
    "site_mirror_host": "mgmt-1", "site_mirror_address": "10.1.0.11",
    "site_mirror_apt_url": "http://10.1.0.11:8080/apt", "site_mirror_registry": REGISTRY,
    "site_mirror_air_gapped": True, "site_mirror_bundle": BUNDLE, "site_mirror_apt_signatures": SIGNATURES,
    "site_name": "lab",
}
PUBLIC_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEstandin\n-----END PGP PUBLIC KEY BLOCK-----\n"
CA_FILE = "/var/lib/rackform/mirror/sites/lab/registry-ca.crt"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBstandin\n-----END CERTIFICATE-----\n"
TLS = {**MIRROR, "site_mirror_registry_ca_file": CA_FILE}
"""The registry over TLS: what rackform renders for a mirror it serves with the site's keys."""
HOST_SECRETS = {"rackform_mirror_host": {"tls_cert": "CERT", "tls_key": "KEY", "push_user": "rackform-push",
                                         "push_password": "pw", "push_htpasswd": "rackform-push:$6$hash"}}


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return render_files(load_site("lab", ROOT))


def role_file(files, role: str, path: str) -> str:
    return files[f"{ROLES_IN_PROJECT}{role}/{path}"].decode()


def role_yaml(files, role: str, path: str) -> Any:
    return yaml.safe_load(role_file(files, role, path))


def evaluate(files, role: str, value, **variables):
    """`value` (a template string or a structure of them) as Ansible renders it with the role's
    defaults and `variables` (the inventory's and registered results)."""
    defaults = role_yaml(files, role, "defaults/main.yml")
    templar = Templar(loader=DataLoader(), variables=trusted({**defaults, **variables}))
    return templar.template(trusted(value))


def render(files, role: str, template: str, **variables) -> str:
    return evaluate(files, role, role_file(files, role, f"templates/{template}"), **variables)


def all_tasks(files, role: str) -> list[dict]:
    """Every task of the role's task files, those inside blocks included."""
    found = []
    pending = [task for path in files if path.startswith(f"{ROLES_IN_PROJECT}{role}/tasks/")
               for task in yaml.safe_load(files[path])]
    while pending:
        task = pending.pop()
        found.append(task)
        pending += task.get("block", [])
    return found


def task(files, role: str, name: str) -> dict:
    return next(task for task in all_tasks(files, role) if task.get("name") == name)


# --- where the os stage runs them


def test_os_stage_serves_the_mirror_first_then_every_server_uses_it(files):
    plays = yaml.safe_load(files["os.yml"])
    assert [(play["hosts"], [short_name(role["role"]) for role in play["roles"]]) for play in plays] == [
        ("servers", ["site_mirror"]), ("servers", ["base_os", "mirror_client"])]


def test_the_mirror_play_ends_for_every_host_but_the_mirror_host(files):
    leave = yaml.safe_load(files["os.yml"])[0]["pre_tasks"][0]
    assert (leave["ansible.builtin.meta"], leave["when"]) == (
        "end_host", "inventory_hostname != site_mirror_host | default('')")


def test_the_mirror_roles_count_in_the_os_stage_digest_only(files):
    def roles(stage):
        return {path[len(ROLES_IN_PROJECT):].split("/")[0] for path in stage_files(files, stage)
                if path.startswith(ROLES_IN_PROJECT)}
    assert (set(MIRROR_ROLES) <= roles("os"), set(MIRROR_ROLES) & roles("kubernetes")) == (True, set())


@pytest.mark.parametrize("role", MIRROR_ROLES)
def test_role_defaults_are_prefixed_with_the_role_name(files, role):
    assert [name for name in role_yaml(files, role, "defaults/main.yml") if not name.startswith(f"{role}_")] == []


@pytest.mark.parametrize("role", MIRROR_ROLES)
def test_every_task_is_named(files, role):
    assert [task for task in all_tasks(files, role) if "name" not in task] == []


@pytest.mark.parametrize("role", [*MIRROR_ROLES, "containerd"])
def test_the_roles_name_no_upstream_host(files, role):
    texts = {path: content.decode() for path, content in files.items() if path.startswith(f"{ROLES_IN_PROJECT}{role}/")}
    assert [(path, host) for path, text in texts.items() for host in UPSTREAM_HOSTS if host in text] == []


# --- site_mirror: nginx and the registry


def test_nginx_serves_apt_and_charts_on_the_apt_urls_port_without_listings(files):
    site = render(files, "site_mirror", "rackform-mirror.nginx.j2", **MIRROR)
    assert re.findall(r"^\s*(listen|root|autoindex) (\S+);", site, flags=re.MULTILINE) == [
        ("listen", "8080"), ("root", ROOT_DIR), ("autoindex", "off")]
    assert re.findall(r"location (\S+) \{", site) == ["/apt/", "/charts/", "/"]


def test_the_http_port_follows_the_apt_url(files):
    site = render(files, "site_mirror", "rackform-mirror.nginx.j2", **{**MIRROR, "site_mirror_apt_url": "http://10.1.0.11:8081/apt"})
    assert "listen 8081;" in site


def test_without_the_sites_ca_the_registry_listens_on_the_registrys_port_over_plain_http(files):
    config = yaml.safe_load(render(files, "site_mirror", "registry-config.yml.j2", **MIRROR))
    assert (config["http"]["addr"], config["storage"]["filesystem"]["rootdirectory"], "auth" in config) == (
        ":5000", "/var/lib/docker-registry", False)


def test_with_the_sites_ca_the_registry_listens_on_loopback_behind_nginx(files):
    config = yaml.safe_load(render(files, "site_mirror", "registry-config.yml.j2", **TLS))
    assert (config["http"]["addr"], config["http"]["relativeurls"], "auth" in config) == ("127.0.0.1:5001", True, False)


def registry_site(files) -> str:
    return render(files, "site_mirror", "rackform-registry.nginx.j2", **TLS)


def test_nginx_takes_the_registrys_port_over_tls_only(files):
    site = registry_site(files)
    assert re.findall(r"^\s*(listen|ssl_certificate|ssl_certificate_key|ssl_protocols) ([^;]+);", site, flags=re.MULTILINE) == [
        ("listen", "5000 ssl"), ("ssl_certificate", "/etc/nginx/rackform-registry/tls.crt"),
        ("ssl_certificate_key", "/etc/nginx/rackform-registry/tls.key"), ("ssl_protocols", "TLSv1.2 TLSv1.3")]
    assert set(re.findall(r"proxy_pass (\S+);", site)) == {"http://127.0.0.1:5001"}


def locations(site: str) -> dict[str, str]:
    """nginx location -> its block's text (one level of nested braces)."""
    return {match.group(1): match.group(2)
            for match in re.finditer(r"location ([^{]+?) \{((?:[^{}]|\{[^{}]*\})*)\}", site)}


def test_pushes_and_the_version_check_need_the_push_credential_pulls_do_not(files):
    found = locations(registry_site(files))
    assert set(found) == {"= /v2/", "/v2/", "/"}
    assert "auth_basic_user_file /etc/nginx/rackform-registry/push.htpasswd;" in found["= /v2/"]
    limited = re.search(r"limit_except GET \{([^}]*)\}", found["/v2/"])
    assert limited and "auth_basic_user_file /etc/nginx/rackform-registry/push.htpasswd;" in limited.group(1)
    # outside limit_except nothing asks GET (and HEAD) for a credential
    assert "auth_basic" not in found["/v2/"].replace(limited.group(0), "")
    assert "return 404;" in found["/"]


def test_only_missing_servers_are_installed_and_only_ever_present(files):
    install = task(files, "site_mirror", "Install the mirror's servers where missing (nginx, docker-registry)")
    assert (install["ansible.builtin.apt"]["state"], "rejectattr('stat.exists')" in install["ansible.builtin.apt"]["name"]) == (
        "present", True)


def test_server_changes_reload_nginx_and_restart_the_registry(files):
    notified = {task["name"]: task.get("notify") for task in all_tasks(files, "site_mirror") if "notify" in task}
    assert notified == {"Serve the apt repository and charts with nginx": "Reload nginx",
                        "Configure the registry": "Restart docker-registry",
                        "Install the registry's certificate": "Reload nginx",
                        "Install the registry's key": "Reload nginx",
                        "Serve the registry over TLS with nginx": "Reload nginx"}


def test_the_registry_leaves_its_port_before_nginx_takes_it(files):
    """A mirror host moved to TLS: docker-registry, on :5000 until now, restarts on loopback
    (flushed right after its configuration) before nginx's site for :5000 is even written."""
    names = [task["name"] for task in role_yaml(files, "site_mirror", "tasks/server.yml")]
    assert (names.index("Configure the registry") < names.index("Apply a changed registry configuration before nginx takes its port")
            < names.index("Serve the apt repository and charts with nginx")
            < names.index("The registry's TLS and push credential for nginx"))
    handlers = [handler["name"] for handler in role_yaml(files, "site_mirror", "handlers/main.yml")]
    assert handlers == ["Restart docker-registry", "Reload nginx"]


def test_the_registrys_key_and_push_credential_never_reach_a_log(files):
    for name in ("Install the registry's key", "Install the push credential (a SHA-512 crypt hash)",
                 "Read the mirror host's keys (the registry's certificate and key, the push credential)",
                 "Write the push credential for skopeo", "Check that the push credential is taken"):
        assert task(files, "site_mirror", name)["no_log"] is True, name
    look = task(files, "site_mirror", "Compare the host with what this role sets (changes nothing)")
    assert (evaluate(files, "site_mirror", look["no_log"], **TLS), evaluate(files, "site_mirror", look["no_log"], **MIRROR)) == (
        True, False)


def test_the_mirror_hosts_keys_are_read_from_the_vault_file_the_run_names(files, monkeypatch):
    monkeypatch.setenv("RACKFORM_MIRROR_HOST_VAULT", "/secrets/lab/mirror_host_vault.yml")
    read = task(files, "site_mirror", "Read the mirror host's keys (the registry's certificate and key, the push credential)")
    assert evaluate(files, "site_mirror", read["ansible.builtin.include_vars"]["file"], **TLS) == (
        "/secrets/lab/mirror_host_vault.yml")
    check = task(files, "site_mirror", "Check that the mirror host's keys are given (the registry over TLS)")
    assert (check["when"], "rackform mirror sign" in check["ansible.builtin.assert"]["fail_msg"]) == (
        "site_mirror_tls | bool", True)


# --- site_mirror: what is copied


def found(prefix: str, entries: dict[str, str]) -> dict:
    """An ansible.builtin.find result: paths under `prefix` with their checksums."""
    return {"files": [{"path": f"{prefix}/{path}", "checksum": checksum} for path, checksum in entries.items()]}


def copy_decision(files, bundle: dict[str, str], served: dict[str, str],
                  signed: dict[str, str] | None = None, **variables) -> tuple[list[str], list[str]]:
    decide = task(files, "site_mirror", "Decide which files to copy and which to remove")
    facts = evaluate(files, "site_mirror", decide["ansible.builtin.set_fact"], **{**MIRROR, **variables}, **decide["vars"],
                     site_mirror_bundle_files=found(BUNDLE, bundle), site_mirror_served_files=found(ROOT_DIR, served),
                     site_mirror_signature_files=found(SIGNATURES, SIGNED if signed is None else signed))
    return facts["site_mirror_to_copy"], facts["site_mirror_to_remove"]


BUNDLE_FILES = {"apt/kubeadm.deb": "k1", "apt/kubelet.deb": "l1", "apt/Packages": "p1", "apt/Packages.gz": "z1",
                "apt/Release": "r1", "charts/gpu-operator.tgz": "g1"}
SIGNED = {"InRelease": "i1", "Release.gpg": "s1"}
SERVED = {**BUNDLE_FILES, "apt/InRelease": "i1", "apt/Release.gpg": "s1"}


def test_a_fresh_mirror_gets_everything_the_indexes_last_inrelease_at_the_very_end(files):
    assert copy_decision(files, BUNDLE_FILES, {}) == (
        ["apt/kubeadm.deb", "apt/kubelet.deb", "charts/gpu-operator.tgz", "apt/Packages", "apt/Packages.gz",
         "apt/Release", "apt/Release.gpg", "apt/InRelease"], [])


def test_a_mirror_that_holds_the_bundle_and_its_signature_gets_nothing(files):
    assert copy_decision(files, BUNDLE_FILES, SERVED) == ([], [])


def test_only_changed_and_new_files_are_copied_and_files_gone_from_the_bundle_removed(files):
    served = {**SERVED, "apt/kubeadm.deb": "k0", "apt/Packages": "p0", "apt/Release": "r0", "apt/InRelease": "i0",
              "apt/kubectl.deb": "c0"}
    del served["apt/kubelet.deb"]
    assert copy_decision(files, BUNDLE_FILES, served) == (
        ["apt/kubeadm.deb", "apt/kubelet.deb", "apt/Packages", "apt/Release", "apt/InRelease"], ["apt/kubectl.deb"])


def test_an_unsigned_mirror_serves_no_signature_and_keeps_none(files):
    assert copy_decision(files, BUNDLE_FILES, SERVED, signed={}, site_mirror_apt_signatures="") == (
        [], ["apt/InRelease", "apt/Release.gpg"])


def test_the_signature_is_copied_from_the_sites_folder_the_rest_from_the_bundle(files):
    copy = task(files, "site_mirror", "Copy the bundle's new and changed files to the mirror")
    sources = {item: evaluate(files, "site_mirror", copy["ansible.builtin.copy"]["src"], **MIRROR, item=item)
               for item in ("apt/InRelease", "apt/Release.gpg", "apt/Release", "apt/kubeadm.deb")}
    assert sources == {"apt/InRelease": f"{SIGNATURES}/InRelease", "apt/Release.gpg": f"{SIGNATURES}/Release.gpg",
                       "apt/Release": f"{BUNDLE}/apt/Release", "apt/kubeadm.deb": f"{BUNDLE}/apt/kubeadm.deb"}


@pytest.mark.parametrize(("present", "passes"), [(("InRelease", "Release.gpg"), True), (("Release.gpg",), False), ((), False)])
def test_the_role_stops_before_serving_without_the_sites_signature(files, tmp_path, present, passes):
    check = task(files, "site_mirror", "Check that the site's signature over the bundle is on the controller")
    for name in present:
        (tmp_path / name).write_text("signed\n")
    condition = "{{ " + check["ansible.builtin.assert"]["that"][0] + " }}"
    assert evaluate(files, "site_mirror", condition, **{**MIRROR, "site_mirror_apt_signatures": str(tmp_path)}) is passes
    assert "rackform mirror sign" in check["ansible.builtin.assert"]["fail_msg"]


# --- site_mirror: what is pushed


IMAGE = {"kind": "image", "name": "kube-apiserver", "version": "v1.36.3", "path": "images/kube-apiserver_v1.36.3",
         "digest": "sha256:aaaa", "source": "built"}


@pytest.mark.parametrize(("answer", "pushed"), [
    ({"status": 200, "docker_content_digest": "sha256:aaaa"}, False),
    ({"status": 200, "docker_content_digest": "sha256:bbbb"}, True),
    ({"status": 404}, True),
])
def test_an_image_is_pushed_only_where_the_registry_lacks_its_digest(files, answer, pushed):
    push = task(files, "site_mirror", "Push the images the registry lacks (skopeo, from the controller)")
    condition = "{{ " + push["when"] + " }}"
    assert evaluate(files, "site_mirror", condition, **MIRROR, item={**answer, "item": IMAGE}) is pushed


def test_skopeo_pushes_the_oci_layout_to_the_registry_keeping_its_digest(files):
    push = task(files, "site_mirror", "Push the images the registry lacks (skopeo, from the controller)")
    argv = evaluate(files, "site_mirror", push["ansible.builtin.command"]["argv"], **MIRROR, **push["vars"], item={"item": IMAGE})
    assert argv == ["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                    f"oci:{BUNDLE}/images/kube-apiserver_v1.36.3:v1.36.3", f"docker://{REGISTRY}/kube-apiserver:v1.36.3"]
    assert (push["delegate_to"], push["changed_when"]) == ("localhost", True)


def test_over_tls_skopeo_checks_the_sites_ca_and_logs_in_from_a_file_of_this_run(files):
    push = task(files, "site_mirror", "Push the images the registry lacks (skopeo, from the controller)")
    argv = evaluate(files, "site_mirror", push["ansible.builtin.command"]["argv"], **TLS, **push["vars"], item={"item": IMAGE},
                    site_mirror_auth_file={"path": "/tmp/ansible.auth.json"})
    assert argv == ["skopeo", "copy", "--quiet", "--preserve-digests",
                    "--dest-cert-dir", "/var/lib/rackform/mirror/sites/lab", "--dest-authfile", "/tmp/ansible.auth.json",
                    f"oci:{BUNDLE}/images/kube-apiserver_v1.36.3:v1.36.3", f"docker://{REGISTRY}/kube-apiserver:v1.36.3"]
    auth = task(files, "site_mirror", "Write the push credential for skopeo")["ansible.builtin.copy"]
    written = json.loads(evaluate(files, "site_mirror", auth["content"], **TLS, site_mirror_host_secrets=HOST_SECRETS))
    assert (written, auth["mode"]) == ({"auths": {REGISTRY: {"auth": "cmFja2Zvcm0tcHVzaDpwdw=="}}}, "0600")
    block = next(task for task in role_yaml(files, "site_mirror", "tasks/images.yml") if "block" in task)
    assert [step["name"] for step in block["always"]] == ["Remove the push credential's file"]


@pytest.mark.parametrize(("answers", "any_pushed"), [
    ([{"docker_content_digest": "sha256:aaaa", "item": IMAGE}], False),
    ([{"docker_content_digest": "sha256:aaaa", "item": IMAGE}, {"item": {**IMAGE, "digest": "sha256:cccc"}}], True),
    ([{"docker_content_digest": "sha256:bbbb", "item": IMAGE}], True),
])
def test_the_push_credential_is_written_only_where_an_image_is_pushed(files, answers, any_pushed):
    decide = task(files, "site_mirror", "Decide whether any image is to be pushed")
    assert evaluate(files, "site_mirror", decide["ansible.builtin.set_fact"]["site_mirror_push_any"], **TLS,
                    site_mirror_registry_answers={"results": answers}) is any_pushed


@pytest.mark.parametrize(("given", "url", "ca"), [
    (MIRROR, f"http://{REGISTRY}/v2/kube-apiserver/manifests/v1.36.3", None),
    (TLS, f"https://{REGISTRY}/v2/kube-apiserver/manifests/v1.36.3", CA_FILE),
])
def test_the_registry_is_asked_by_name_and_tag_from_the_controller(files, given, url, ca):
    ask = task(files, "site_mirror", "Ask the registry for the digest of each image of the bundle")
    uri = evaluate(files, "site_mirror", {key: ask["ansible.builtin.uri"][key] for key in ("url", "ca_path")}, **given,
                   item=IMAGE, omit=None)
    assert (uri["url"], uri["ca_path"], ask["ansible.builtin.uri"]["method"], ask["delegate_to"]) == (url, ca, "HEAD", "localhost")


def test_the_role_ends_by_asking_for_the_apt_index_and_its_signature(files):
    check = task(files, "site_mirror", "Check that the mirror answers (apt index and signature)")
    assert evaluate(files, "site_mirror", check["loop"], **MIRROR) == [
        "http://10.1.0.11:8080/apt/Packages", "http://10.1.0.11:8080/apt/InRelease"]


@pytest.mark.parametrize(("given", "url", "status"), [(MIRROR, f"http://{REGISTRY}/v2/", 200),
                                                      (TLS, f"https://{REGISTRY}/v2/", 401)])
def test_the_role_ends_by_asking_the_registry_which_over_tls_wants_the_push_credential(files, given, url, status):
    check = task(files, "site_mirror", "Check that the registry answers, and over TLS asks for the push credential")
    uri = evaluate(files, "site_mirror", {key: check["ansible.builtin.uri"][key] for key in ("url", "status_code")}, **given)
    assert (uri["url"], int(uri["status_code"])) == (url, status)


# --- mirror_client


def source_lines(files, **variables) -> list[str]:
    source = render(files, "mirror_client", "rackform-mirror.list.j2", **variables)
    return [line for line in source.splitlines() if not line.startswith("#")]


def test_the_apt_source_is_the_mirrors_flat_repository_signed_by_the_sites_key(files):
    source = render(files, "mirror_client", "rackform-mirror.list.j2", **MIRROR, mirror_client_apt_key=PUBLIC_KEY)
    assert source_lines(files, **MIRROR, mirror_client_apt_key=PUBLIC_KEY) == [
        "deb [signed-by=/etc/apt/keyrings/lab-mirror.asc] http://10.1.0.11:8080/apt ./"]
    assert "trusted=yes" not in source


def test_the_rendered_lab_project_gives_the_client_the_sites_key(files, tmp_path):
    told = yaml.safe_load(files["inventory/group_vars/all/mirror.yml"])
    key = tmp_path / "apt-signing-key.asc"
    key.write_text(PUBLIC_KEY)
    given = {**told, "site_mirror_apt_key_file": str(key), "site_name": "lab"}
    assert evaluate(files, "mirror_client", "{{ mirror_client_apt_key }}", **given) == PUBLIC_KEY
    assert source_lines(files, **given) == [
        f"deb [signed-by=/etc/apt/keyrings/lab-mirror.asc] {told['site_mirror_apt_url']} ./"]


def test_a_mirror_rackform_does_not_serve_is_trusted_by_its_place(files):
    unserved = {key: value for key, value in MIRROR.items() if key not in ("site_mirror_host", "site_mirror_apt_signatures")}
    assert source_lines(files, **unserved) == ["deb [trusted=yes] http://10.1.0.11:8080/apt ./"]


def test_the_key_is_installed_before_the_source_names_it(files):
    names = [task["name"] for task in role_yaml(files, "mirror_client", "tasks/main.yml")[0]["block"]]
    assert names.index("Install the key the mirror's Release is signed with") < names.index("Add the site mirror to apt's sources")
    install = task(files, "mirror_client", "Install the key the mirror's Release is signed with")["ansible.builtin.copy"]
    assert evaluate(files, "mirror_client", install["dest"], **MIRROR) == "/etc/apt/keyrings/lab-mirror.asc"


@pytest.mark.parametrize(("key", "lists_file"), [(PUBLIC_KEY, "InRelease"), ("", "Release")])
def test_the_client_compares_apts_copy_of_the_mirrors_release(files, key, lists_file):
    assert evaluate(files, "mirror_client", "{{ mirror_client_lists_release }}", **MIRROR, mirror_client_apt_key=key) == (
        f"/var/lib/apt/lists/10.1.0.11:8080_apt_._{lists_file}")


def test_the_client_compares_the_signed_release_the_mirror_serves(files, tmp_path):
    (tmp_path / "InRelease").write_text("-----BEGIN PGP SIGNED MESSAGE-----\nsigned\n")
    assert evaluate(files, "mirror_client", "{{ mirror_client_release }}",
                    **{**MIRROR, "site_mirror_apt_signatures": str(tmp_path)}) == "-----BEGIN PGP SIGNED MESSAGE-----\nsigned\n"


def test_every_server_trusts_the_sites_ca_system_wide(files, tmp_path):
    (tmp_path / "registry-ca.crt").write_text(CA_PEM)
    given = {**MIRROR, "site_mirror_registry_ca_file": str(tmp_path / "registry-ca.crt")}
    install = task(files, "mirror_client", "Install the site mirror's CA certificate")["ansible.builtin.copy"]
    assert evaluate(files, "mirror_client", {"content": install["content"], "dest": install["dest"]}, **given) == {
        "content": CA_PEM, "dest": "/usr/local/share/ca-certificates/lab-mirror-ca.crt"}
    assert task(files, "mirror_client", "Install the site mirror's CA certificate")["notify"] == "Rebuild the system trust store"
    rebuild = role_yaml(files, "mirror_client", "handlers/main.yml")[0]
    assert (rebuild["name"], rebuild["ansible.builtin.command"]) == ("Rebuild the system trust store", {
        "argv": ["{{ mirror_client_update_ca }}"], "removes": "{{ mirror_client_update_ca }}"})


def test_the_client_does_nothing_without_a_mirror(files):
    block = role_yaml(files, "mirror_client", "tasks/main.yml")[0]
    assert (block["when"], evaluate(files, "mirror_client", "{{ " + block["when"] + " }}")) == (
        "mirror_client_apt_url | length > 0", False)


def test_the_client_reads_the_mirror_only_leaving_the_nodes_other_sources_alone(files):
    update = task(files, "mirror_client", "Read the site mirror's package index (this source only)")
    assert evaluate(files, "mirror_client", update["ansible.builtin.command"]["argv"], **MIRROR) == [
        "apt-get", "update", "--error-on=any", "-o", "Dir::Etc::SourceList=/etc/apt/sources.list.d/rackform-mirror.list",
        "-o", "Dir::Etc::SourceParts=-", "-o", "APT::Get::List-Cleanup=0"]


# --- containerd


def containerd(files, **variables) -> dict:
    text = render(files, "containerd", "config.toml.j2", group_names=["k8s_cluster"], **variables)
    return tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]


def registry_hosts(files, **variables) -> dict[str, str]:
    """The files the containerd role keeps under /etc/containerd/certs.d: path -> content."""
    text = render(files, "containerd", "registry-hosts.j2", group_names=["k8s_cluster"], **variables)
    return {entry["path"]: entry["content"] for entry in json.loads(text)}


def hosts_toml(files, name: str, **variables) -> dict:
    return tomllib.loads(registry_hosts(files, **variables)[f"{CERTS_D}/{name}/hosts.toml"])


def test_without_a_mirror_containerd_keeps_its_own_sandbox_image_and_reads_registries_from_certs_d(files):
    cri = containerd(files)
    assert ("sandbox_image" in cri, cri["registry"]) == (False, {"config_path": CERTS_D})
    assert registry_hosts(files) == {f"{CERTS_D}/.rackform-registries": NAMES_HEADER}


def test_containerd_names_no_registry_mirrors_table_containerd_2_removed(files):
    cri = containerd(files, **{**MIRROR, "site_mirror_air_gapped": False},
                     site_mirror_upstream_registries=["registry.example"])
    assert (cri["registry"], "mirrors" in cri["registry"], "configs" in cri["registry"]) == (
        {"config_path": CERTS_D}, False, False)


def test_an_air_gapped_node_pulls_the_sandbox_image_from_the_mirror_over_plain_http(files):
    cri = containerd(files, **MIRROR, site_mirror_upstream_registries=["registry.example"])
    assert cri["sandbox_image"] == f"{REGISTRY}/pause:3.10.2"
    assert registry_hosts(files, **MIRROR, site_mirror_upstream_registries=["registry.example"]).keys() == {
        f"{CERTS_D}/{REGISTRY}/hosts.toml", f"{CERTS_D}/.rackform-registries"}
    assert hosts_toml(files, REGISTRY, **MIRROR) == {"server": f"http://{REGISTRY}", "capabilities": ["pull", "resolve"]}


def test_a_connected_site_sends_pulls_of_upstream_names_to_the_mirror_for_pulls_only(files):
    connected = {**MIRROR, "site_mirror_air_gapped": False,
                 "site_mirror_upstream_registries": ["registry.example", "images.example"]}
    written = registry_hosts(files, **connected)
    assert list(written) == [f"{CERTS_D}/{name}/hosts.toml" for name in (REGISTRY, "registry.example", "images.example")] + [
        f"{CERTS_D}/.rackform-registries"]
    for name in ("registry.example", "images.example"):
        # No `server`: containerd asks the upstream name itself only after the mirror.
        assert hosts_toml(files, name, **connected) == {
            "host": {f"http://{REGISTRY}": {"capabilities": ["pull", "resolve"]}}}
    assert written[f"{CERTS_D}/.rackform-registries"] == NAMES_HEADER + f"{REGISTRY}\nregistry.example\nimages.example\n"


def test_every_registry_file_is_marked_as_the_roles_so_only_those_are_ever_removed(files):
    written = registry_hosts(files, **{**MIRROR, "site_mirror_air_gapped": False},
                             site_mirror_upstream_registries=["registry.example"])
    assert [path for path, content in written.items()
            if path.endswith("/hosts.toml") and not content.startswith("# Written by rackform (role containerd)")] == []
    find = task(files, "containerd", "Find the registry folders this role wrote before")["ansible.builtin.find"]
    assert re.search(find["contains"], next(iter(written.values())))


def test_over_tls_containerd_checks_the_mirror_against_the_sites_ca_alone(files):
    connected = {**TLS, "site_mirror_air_gapped": False, "site_mirror_upstream_registries": ["registry.example"]}
    written = registry_hosts(files, **connected, containerd_mirror_ca=CA_PEM)
    ca = f"{CERTS_D}/{REGISTRY}/ca.crt"
    assert written[ca] == CA_PEM
    assert hosts_toml(files, REGISTRY, **connected, containerd_mirror_ca=CA_PEM) == {
        "server": f"https://{REGISTRY}", "capabilities": ["pull", "resolve"], "ca": ca}
    assert hosts_toml(files, "registry.example", **connected, containerd_mirror_ca=CA_PEM) == {
        "host": {f"https://{REGISTRY}": {"capabilities": ["pull", "resolve"], "ca": ca}}}


def test_containerd_reads_the_sites_ca_on_the_controller(files, tmp_path):
    (tmp_path / "registry-ca.crt").write_text(CA_PEM)
    given = {**MIRROR, "site_mirror_registry_ca_file": str(tmp_path / "registry-ca.crt")}
    assert evaluate(files, "containerd", "{{ containerd_mirror_ca }}", group_names=["k8s_cluster"], **given) == CA_PEM
    assert evaluate(files, "containerd", "{{ containerd_mirror_ca }}", group_names=["k8s_cluster"], **MIRROR) == ""


def test_the_sandbox_images_tag_follows_pod_infra_version(files):
    assert containerd(files, **MIRROR, pod_infra_version="3.10.9")["sandbox_image"] == f"{REGISTRY}/pause:3.10.9"


def test_the_containerd_fast_path_compares_the_mirror_settings_and_every_registry_file_too(files):
    look = role_yaml(files, "containerd", "tasks/main.yml")[0]["rackform.site.host_state"]
    assert ("config.toml.j2" in look["files"], "containerd_registry_files" in look["files"],
            "containerd_directories" in look["directories"]) == (True, True, True)


def test_make_installs_skopeo_umoci_and_gnupg():
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("APT_PACKAGES"))
    assert {"skopeo", "umoci", "gnupg"} <= set(line.split(":=", 1)[1].split())
