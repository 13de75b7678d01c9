"""The site mirror against a live lab: its own small site (`mirrortest`: the mirror host
mirror-1 and one client, node-1; 10.68.x only), brought up, rendered, then validate.yml and
os.yml run twice with rackform.run.ansible.run_playbook, then the containerd role twice on
the client, from a small playbook of the test's own.

The bundle is built here, in a temporary folder, with the real tools and rackform's own
bundle code: a .deb made with dpkg-deb (`rackform-mirror-probe`, one file), its flat apt
index, one OCI image made with umoci from a static hello program, one chart file and the
manifest. `mirrortest`'s own mirror keys are made as a deploy makes them (a vault under a
temporary folder): the apt repository signed, the registry's CA, certificate and push
credential. What it proves: the client installs the package from the mirror with apt, which
checks the site's signature and refuses a tampered index or InRelease; the registry speaks
TLS only, lists the image under the manifest's digest, refuses pushes without the credential
and takes them with it, and containerd pulls it over TLS checked against the site's CA (by
tag and by digest) and not over plain HTTP; the charts are served and nothing is listed; a
second run changes nothing; the client's apt sources and containerd configuration name the
mirror and no other host, and the client holds the site's CA. The lab always goes down again.

Run it alone: pytest -p no:xdist -m lab tests/lab/test_site_mirror_lab.py -s
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import ssl
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rackform.k8s.site_mirror import UPSTREAM_HOSTS
from rackform.lab import lab, state
from rackform.mirror import apt_repo, debs, oci, site_keys
from rackform.mirror.manifest import Artifact, Manifest, file_digest
from rackform.model.loader import load_site
from rackform.pipeline import build_dir
from rackform.render.project import render_project
from rackform.run.ansible import RunResult, run_playbook
from rackform.secrets import SiteVault
from labenv import skip_reason
from sitebuilder import ROCE_FABRIC, build_site, group_vars, networks, one_rack_site

pytestmark = pytest.mark.lab

SITE = "mirrortest"
MIRROR, CLIENT = "mirror-1", "node-1"
MIRROR_ADDRESS = "10.68.0.11"
REGISTRY = f"{MIRROR_ADDRESS}:5000"
HTTP = f"http://{MIRROR_ADDRESS}:8080"
PACKAGE, PACKAGE_VERSION, PACKAGE_FILE = "rackform-mirror-probe", "1.0-1", "/usr/share/rackform-mirror-probe/probe.txt"
IMAGE, TAG = "mirror-probe", "v1"
CHART = "mirror-probe-0.1.0.tgz"
CERTS_D = "/etc/containerd/certs.d"
KEYRING = f"/etc/apt/keyrings/{SITE}-mirror.asc"
CONTAINERD_PLAYBOOK = "mirror-containerd.yml"
# Tools the bundle is built and pushed with, beside the lab's (Makefile APT_PACKAGES). gcc,
# where there is one, makes the image's static hello program.
TOOLS = ("dpkg-deb", "umoci", "skopeo")

SITE_YAML = one_rack_site(SITE, "Site mirror tests - the mirror host and one client", """\
- {name: hci-1, block: hci, position_u: 1, hosts: [mirror-1, node-1]}
""", networks("10.68.0.0/24", "10.68.1.0/24", "10.68.128.0/17") + ROCE_FABRIC + """\
cabling: []
mirror:
  host: mirror-1
""")

HOST_VARS = """\
management_address: 10.68.0.{n}
management_mac: "02:44:00:00:00:{n:02x}"
bmc_address: 10.68.1.{n}
bmc_mac: "02:44:01:00:00:{n:02x}"
serial: MIRRORTEST-{n}
"""

# The containerd role alone, on the client: the site has no kubernetes section (so no
# bundle path of its own; the test's bundle is named in the inventory).
CONTAINERD_PLAY = f"""\
---
- name: containerd pointed at the site mirror
  hosts: {CLIENT}
  gather_facts: false
  roles:
    - role: rackform.site.containerd
"""


def build_bundle(bundle: Path) -> Manifest:
    """A tiny bundle in the format `rackform mirror build` writes: one deb, one image, one chart."""
    work = bundle.parent / "bundle-work"
    deb = debs.build(debs.DebSpec(
        name=PACKAGE, version=PACKAGE_VERSION, description="rackform site mirror probe\nOne file, for the lab test.",
        files={PACKAGE_FILE: "served by the site mirror\n"}), bundle / "apt")
    apt_repo.write_indexes(bundle / "apt")
    source = work / "hello.c"
    source.parent.mkdir(parents=True)
    source.write_text('#include <stdio.h>\nint main(void) { puts("hello from the site mirror"); return 0; }\n')
    tree = work / "rootfs"
    tree.mkdir()
    if shutil.which("gcc"):
        subprocess.run(["gcc", "-static", "-Os", "-o", tree / "hello", source], check=True)
    else:  # the image is pulled, never run: any file makes a layer
        (tree / "hello").write_text("#!/bin/sh\necho hello from the site mirror\n")
    layout = bundle / "images" / f"{IMAGE}_{TAG}"
    layout.parent.mkdir()
    digest = oci.build(oci.ImageSpec(name=IMAGE, tag=TAG, layers=[tree], entrypoint=["/hello"]), layout)
    (bundle / "charts").mkdir()
    (bundle / "charts" / CHART).write_bytes(b"not a real chart: served as bytes\n")
    shutil.rmtree(work)
    manifest = Manifest(kubernetes="0.0.0", filled_from="test", artifacts=[
        Artifact("deb", PACKAGE, PACKAGE_VERSION, f"apt/{deb.name}", file_digest(deb), "built"),
        Artifact("image", IMAGE, TAG, f"images/{IMAGE}_{TAG}", digest, "built")])
    manifest.write(bundle)
    return manifest


def site_vault(keys: Path) -> SiteVault:
    return SiteVault(SITE, keys / "secrets", environ={})


def prepare_keys(bundle: Path, keys: Path) -> tuple[Path, dict[str, str]]:
    """`mirrortest`'s own mirror keys, in a vault under `keys` (what a deploy does before os.yml:
    rackform.run.bundle_preflight): the bundle's apt repository signed, the registry's CA,
    certificate and push credential. Returns the signatures' folder and what the runs need to read
    the mirror host's vault file."""
    vault = site_vault(keys)
    signatures = site_keys.prepare_apt(vault, bundle, "0.0.0", sites_dir=keys / "sites")
    return signatures, site_keys.prepare_registry(vault, MIRROR_ADDRESS, (MIRROR,), sites_dir=keys / "sites")


def write_site(root: Path, bundle: Path, keys: Path, signatures: Path) -> Path:
    """A repo root holding the real catalog and the `mirrortest` site; its inventory names the bundle
    and the site's keys for it (the site has no kubernetes section, so no bundle of its own)."""
    host_vars = {MIRROR: HOST_VARS.format(n=11), CLIENT: HOST_VARS.format(n=12)}
    all_vars = (group_vars(SITE, "10.68.0.1", lab_key=True) + f"site_mirror_bundle: {bundle}\n"
                + f"site_mirror_apt_signatures: {signatures}\n"
                + f"site_mirror_apt_key_file: {site_keys.apt_key_file(SITE, keys / 'sites')}\n"
                + f"site_mirror_registry_ca_file: {site_keys.registry_ca_file(SITE, keys / 'sites')}\n")
    return build_site(root, SITE, SITE_YAML, host_vars, all_vars)


class Runs:
    def __init__(self, project: Path, manifest: Manifest, first: RunResult, second: RunResult,
                 containerd: tuple[RunResult, RunResult], keys: Path, bundle: Path) -> None:
        self.project, self.manifest, self.keys, self.bundle = project, manifest, keys, bundle
        self.first, self.second, self.containerd = first, second, containerd


@pytest.fixture(scope="module")
def runs(tmp_path_factory, pytestconfig):
    """`mirrortest` up, a bundle built, validate.yml then os.yml twice, then containerd; down afterwards, always."""
    reason = skip_reason(pytestconfig, extra_tools=TOOLS)
    if reason:
        pytest.skip(reason)
    bundle = tmp_path_factory.mktemp("mirrortest-bundle") / "bundle"
    manifest = build_bundle(bundle)
    keys = tmp_path_factory.mktemp("mirrortest-keys")
    signatures, keys_env = prepare_keys(bundle, keys)
    root = write_site(tmp_path_factory.mktemp("mirrortest-root"), bundle, keys, signatures)
    try:
        status = lab.up(SITE, root, progress=lambda line: None)
        assert status.up, "\n".join(status.lines())
        project = build_dir(root, SITE)
        render_project(load_site(SITE, root), project)
        validate = run_playbook(project, "validate.yml")
        assert validate.ok, validate.summary()
        first = run_playbook(project, "os.yml", envvars=keys_env)
        second = run_playbook(project, "os.yml", envvars=keys_env)
        (project / CONTAINERD_PLAYBOOK).write_text(CONTAINERD_PLAY)
        containerd = (run_playbook(project, CONTAINERD_PLAYBOOK), run_playbook(project, CONTAINERD_PLAYBOOK))
        print("\nsite mirror lab: " + "\n  ".join(run.summary() for run in (first, second, *containerd)))
        yield Runs(project, manifest, first, second, containerd, keys, bundle)
    finally:
        lab.down(SITE, progress=lambda line: None)


def on_node(host: str, command: str, timeout_s: float = 60.0) -> str:
    lab_state = state.require(SITE)
    return lab.ssh(lab_state, lab_state.node(host), command, timeout_s=timeout_s).stdout


def http(url: str, method: str = "GET", headers: dict[str, str] | None = None, ca: Path | None = None
         ) -> tuple[int, dict, bytes]:
    """Status, headers and body of one request from the controller (no proxy: the lab's own network);
    over TLS checked against `ca` alone."""
    handlers = [urllib.request.ProxyHandler({})]
    if ca is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca))))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_os_stage_succeeds(runs):
    assert runs.first.ok, runs.first.summary()


def test_second_run_changes_nothing(runs):
    assert (runs.second.ok, runs.second.changed) == (True, 0), runs.second.summary()


def test_the_client_installs_a_package_from_the_mirror(runs):
    policy = on_node(CLIENT, f"apt-cache policy {PACKAGE}")
    assert f"Candidate: {PACKAGE_VERSION}" in policy and f"{HTTP}/apt ./" in policy, policy
    on_node(CLIENT, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {PACKAGE}", timeout_s=120)
    assert on_node(CLIENT, f"cat {PACKAGE_FILE}") == "served by the site mirror\n"


def ca_file(runs) -> Path:
    return site_keys.registry_ca_file(SITE, runs.keys / "sites")


def test_the_registry_lists_the_image_to_anyone_over_tls(runs):
    status, _, body = http(f"https://{REGISTRY}/v2/_catalog", ca=ca_file(runs))
    assert (status, json.loads(body)["repositories"]) == (200, [IMAGE])


def test_the_registry_serves_the_manifests_digest(runs):
    wanted = next(artifact for artifact in runs.manifest.artifacts if artifact.kind == "image").digest
    status, headers, _ = http(f"https://{REGISTRY}/v2/{IMAGE}/manifests/{TAG}", "HEAD",
                              {"Accept": "application/vnd.oci.image.manifest.v1+json"}, ca=ca_file(runs))
    assert (status, headers.get("Docker-Content-Digest")) == (200, wanted)


def test_the_registry_refuses_plain_http(runs):
    """nginx alone takes the registry's port, TLS only: a plain request gets 400, docker-registry
    itself listens on the mirror host's loopback only."""
    assert http(f"http://{REGISTRY}/v2/{IMAGE}/manifests/{TAG}", "HEAD")[0] == 400
    listening = on_node(MIRROR, "ss -ltnH")
    assert re.search(r"127\.0\.0\.1:5001\s", listening) and not re.search(r"(0\.0\.0\.0|\*|\[::\]):5001\s", listening), listening


def test_the_registry_is_not_trusted_without_the_sites_ca(runs):
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        http(f"https://{REGISTRY}/v2/_catalog")  # this machine's own trust store alone


def test_an_unauthenticated_push_is_refused_and_an_authenticated_one_taken(runs, tmp_path):
    """skopeo from the controller, as the role pushes, checking the site's CA: without the push
    credential (and with a wrong one) the registry refuses; with it the image lands, under its digest."""
    source = f"oci:{runs.bundle}/images/{IMAGE}_{TAG}:{TAG}"
    push = ["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-cert-dir", str(ca_file(runs).parent)]
    refused = subprocess.run([*push, source, f"docker://{REGISTRY}/{IMAGE}:refused"], capture_output=True, text=True)
    assert refused.returncode != 0 and "authentication required" in refused.stderr, refused.stderr
    wrong = subprocess.run([*push, "--dest-creds", "rackform-push:not-the-password", source,
                            f"docker://{REGISTRY}/{IMAGE}:refused"], capture_output=True, text=True)
    assert wrong.returncode != 0, wrong.stderr
    keys = site_keys.ensure_registry(site_vault(runs.keys), MIRROR_ADDRESS, (MIRROR,))
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auths": {REGISTRY: {"auth": base64.b64encode(
        f"{keys.push_user}:{keys.push_password}".encode()).decode()}}}))
    taken = subprocess.run([*push, "--dest-authfile", str(auth), source, f"docker://{REGISTRY}/{IMAGE}:taken"],
                           capture_output=True, text=True)
    assert taken.returncode == 0, taken.stderr
    status, headers, _ = http(f"https://{REGISTRY}/v2/{IMAGE}/manifests/refused", "HEAD",
                              {"Accept": "application/vnd.oci.image.manifest.v1+json"}, ca=ca_file(runs))
    assert status == 404


def test_a_node_cannot_push_without_the_credential(runs):
    said = on_node(CLIENT, f"curl -s -o /dev/null -w '%{{http_code}}' --cacert {CERTS_D}/{REGISTRY}/ca.crt "
                           f"-X POST https://{REGISTRY}/v2/{IMAGE}/blobs/uploads/")
    assert said == "401", said


def test_the_charts_are_served(runs):
    assert http(f"{HTTP}/charts/{CHART}")[::2] == (200, b"not a real chart: served as bytes\n")


@pytest.mark.parametrize("path", ["/apt/", "/charts/", "/", "/images/"])
def test_nothing_is_listed_and_only_apt_and_charts_are_served(runs, path):
    assert http(f"{HTTP}{path}")[0] in (403, 404)


def test_the_clients_apt_sources_name_only_the_mirror(runs):
    sources = on_node(CLIENT, "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true")
    uris = re.findall(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)", sources, flags=re.MULTILINE)
    uris += re.findall(r"^\s*URIs:\s*(.+)$", sources, flags=re.MULTILINE)
    # A lab node's only other source would be the one debootstrap writes into the base image
    # (/etc/apt/sources.list): the lab's node setup (rackform/lab/base.py) must leave it empty.
    assert uris == [f"{HTTP}/apt"], sources


def test_the_clients_apt_source_is_signed_by_the_sites_key_and_never_trusted_blindly(runs):
    sources = on_node(CLIENT, "cat /etc/apt/sources.list.d/rackform-mirror.list")
    assert [line for line in sources.splitlines() if line.startswith("deb")] == [
        f"deb [signed-by={KEYRING}] {HTTP}/apt ./"]
    assert "trusted=yes" not in on_node(CLIENT, "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null || true")
    assert on_node(CLIENT, f"cat {KEYRING}") == site_keys.apt_key_file(SITE, runs.keys / "sites").read_text()
    assert on_node(CLIENT, f"ls /var/lib/apt/lists/ | grep -c '{MIRROR_ADDRESS}:8080_apt_._InRelease$' || true").strip() == "1"


# As a node that reads the mirror afresh: with its lists of the mirror kept, apt would take an
# unchanged InRelease as a hit and fetch no index at all.
APT_UPDATE = (f"rm -f /var/lib/apt/lists/{MIRROR_ADDRESS}:8080_apt_* && "
              "apt-get update --error-on=any -o Dir::Etc::SourceList=/etc/apt/sources.list.d/rackform-mirror.list "
              "-o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0")


@pytest.mark.parametrize("tamper", ["packages", "release"])
def test_apt_refuses_a_tampered_repository(runs, tamper):
    """On the mirror host, the served Packages index (and its .gz, which apt fetches first) or the
    InRelease is changed; the client's apt refuses the repository. Restored afterwards."""
    served = "/srv/rackform-mirror/apt"
    change = {
        "packages": (f"sed -i 's/^Version: {PACKAGE_VERSION}$/Version: 9.9-9/' {served}/Packages && "
                     f"gzip -9nc {served}/Packages > {served}/Packages.gz"),
        "release": f"sed -i 's/^Label: .*/Label: someone else/' {served}/InRelease",
    }[tamper]
    on_node(MIRROR, f"mkdir -p /root/untampered && cp -p {served}/Packages {served}/Packages.gz {served}/InRelease "
                    f"/root/untampered/ && {change}")
    try:
        lab_state = state.require(SITE)
        done = lab.ssh(lab_state, lab_state.node(CLIENT), APT_UPDATE, timeout_s=60, check=False)
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        # A changed index fails the signed Release's hashes, or first its sizes (apt checks those first).
        refusals = ("Hash Sum mismatch", "File has unexpected size") if tamper == "packages" else ("BADSIG",)
        assert any(refusal in said for refusal in refusals), said
    finally:
        on_node(MIRROR, f"cp -p /root/untampered/* {served}/ && rm -r /root/untampered")
    lab_state = state.require(SITE)
    again = lab.ssh(lab_state, lab_state.node(CLIENT), APT_UPDATE, timeout_s=60, check=False)
    assert again.returncode == 0, again.stdout + again.stderr


def test_containerd_pointed_at_the_mirror_changes_nothing_the_second_time(runs):
    assert [(run.ok, run.changed) for run in runs.containerd] == [(True, runs.containerd[0].changed), (True, 0)], [
        run.summary() for run in runs.containerd]


def test_the_clients_containerd_configuration_names_only_the_mirror(runs):
    text = on_node(CLIENT, "cat /etc/containerd/config.toml")
    cri = tomllib.loads(text)["plugins"]["io.containerd.grpc.v1.cri"]
    assert (cri["sandbox_image"], cri["registry"]) == (f"{REGISTRY}/pause:3.10.2", {"config_path": CERTS_D})
    assert [host for host in UPSTREAM_HOSTS if host in text] == []


def test_the_clients_registry_hosts_are_the_mirrors_alone_over_tls(runs):
    names = on_node(CLIENT, f"find {CERTS_D} -mindepth 1 -maxdepth 1 -type d -printf '%f\\n'").split()
    hosts = on_node(CLIENT, f"cat {CERTS_D}/{REGISTRY}/hosts.toml")
    assert (names, tomllib.loads(hosts)) == ([REGISTRY], {
        "server": f"https://{REGISTRY}", "capabilities": ["pull", "resolve"], "ca": f"{CERTS_D}/{REGISTRY}/ca.crt"})
    assert on_node(CLIENT, f"cat {CERTS_D}/{REGISTRY}/ca.crt") == ca_file(runs).read_text()
    assert [host for host in UPSTREAM_HOSTS if host in hosts] == []


def test_a_node_trusts_the_sites_ca(runs):
    """In the system trust store's folder of local CAs (the lab's image has no ca-certificates
    package to rebuild the store from it: a site's nodes do), and for the registry: curl on the
    node, given the CA containerd uses, reaches the registry over TLS; without it, it does not."""
    assert on_node(CLIENT, f"cat /usr/local/share/ca-certificates/{SITE}-mirror-ca.crt") == ca_file(runs).read_text()
    url = f"https://{REGISTRY}/v2/{IMAGE}/manifests/{TAG}"
    accept = "-H 'Accept: application/vnd.oci.image.manifest.v1+json'"
    assert on_node(CLIENT, f"curl -s -o /dev/null -w '%{{http_code}}' {accept} -I --cacert {CERTS_D}/{REGISTRY}/ca.crt {url}") == "200"
    lab_state = state.require(SITE)
    untrusted = lab.ssh(lab_state, lab_state.node(CLIENT), f"curl -s -o /dev/null -I {url}", check=False)
    assert untrusted.returncode != 0


def test_containerd_pulls_the_image_from_the_mirror_over_tls(runs):
    # No --plain-http: the registry's hosts.toml says how to reach it (https, the site's CA), as
    # it does for the CRI.
    reference = f"{REGISTRY}/{IMAGE}:{TAG}"
    started = time.monotonic()
    on_node(CLIENT, f"ctr -n k8s.io images pull --hosts-dir {CERTS_D} {reference}", timeout_s=120)
    print(f"\nctr pull {reference}: {time.monotonic() - started:.1f} s")
    wanted = next(artifact for artifact in runs.manifest.artifacts if artifact.kind == "image").digest
    assert wanted in on_node(CLIENT, f"ctr -n k8s.io images ls name=={reference}")
    pinned = f"{REGISTRY}/{IMAGE}:{TAG}@{wanted}"
    on_node(CLIENT, f"ctr -n k8s.io images pull --hosts-dir {CERTS_D} {pinned}", timeout_s=120)


def test_a_pull_over_plain_http_is_refused(runs):
    lab_state = state.require(SITE)
    done = lab.ssh(lab_state, lab_state.node(CLIENT),
                   f"ctr -n k8s.io images pull --plain-http {REGISTRY}/{IMAGE}:{TAG}", timeout_s=60, check=False)
    assert done.returncode != 0 and "400 Bad Request" in done.stdout + done.stderr, done.stdout + done.stderr
