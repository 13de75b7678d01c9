"""The site mirror against a live lab: its own small site (`mirrortest`: the mirror host
mirror-1 and one client, node-1; 10.68.x only), brought up, rendered, then validate.yml and
os.yml run twice with rackform.run.ansible.run_playbook, then the containerd role twice on
the client, from a small playbook of the test's own.

The bundle is built here, in a temporary folder, with the real tools and rackform's own
bundle code: a .deb made with dpkg-deb (`rackform-mirror-probe`, one file), its flat apt
index, one OCI image made with umoci from a static hello program, one chart file and the
manifest. What it proves: the client installs the package from the mirror with apt; the
registry lists the image under the manifest's digest and containerd pulls it; the charts
are served and nothing is listed; a second run changes nothing; the client's apt sources
and containerd configuration name the mirror and no other host. The lab always goes down
again.
"""

from __future__ import annotations

import json
import re
import shutil
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


def sign_bundle(bundle: Path, keys: Path) -> Path:
    """The bundle's apt repository signed with a key of `mirrortest`'s own, in a vault under `keys`
    (what a deploy does before os.yml: rackform.run.bundle_preflight); returns the signatures' folder."""
    vault = SiteVault(SITE, keys / "secrets", environ={})
    return site_keys.prepare_apt(vault, bundle, "0.0.0", sites_dir=keys / "sites")


def write_site(root: Path, bundle: Path, keys: Path) -> Path:
    """A repo root holding the real catalog and the `mirrortest` site; its inventory names the bundle
    and the site's signature over it (the site has no kubernetes section, so no bundle of its own)."""
    host_vars = {MIRROR: HOST_VARS.format(n=11), CLIENT: HOST_VARS.format(n=12)}
    signatures = sign_bundle(bundle, keys)
    all_vars = (group_vars(SITE, "10.68.0.1", lab_key=True) + f"site_mirror_bundle: {bundle}\n"
                + f"site_mirror_apt_signatures: {signatures}\n"
                + f"site_mirror_apt_key_file: {site_keys.apt_key_file(SITE, keys / 'sites')}\n")
    return build_site(root, SITE, SITE_YAML, host_vars, all_vars)


class Runs:
    def __init__(self, project: Path, manifest: Manifest, first: RunResult, second: RunResult,
                 containerd: tuple[RunResult, RunResult], keys: Path) -> None:
        self.project, self.manifest, self.keys = project, manifest, keys
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
    root = write_site(tmp_path_factory.mktemp("mirrortest-root"), bundle, keys)
    try:
        status = lab.up(SITE, root, progress=lambda line: None)
        assert status.up, "\n".join(status.lines())
        project = build_dir(root, SITE)
        render_project(load_site(SITE, root), project)
        validate = run_playbook(project, "validate.yml")
        assert validate.ok, validate.summary()
        first = run_playbook(project, "os.yml")
        second = run_playbook(project, "os.yml")
        (project / CONTAINERD_PLAYBOOK).write_text(CONTAINERD_PLAY)
        containerd = (run_playbook(project, CONTAINERD_PLAYBOOK), run_playbook(project, CONTAINERD_PLAYBOOK))
        print("\nsite mirror lab: " + "\n  ".join(run.summary() for run in (first, second, *containerd)))
        yield Runs(project, manifest, first, second, containerd, keys)
    finally:
        lab.down(SITE, progress=lambda line: None)


def on_node(host: str, command: str, timeout_s: float = 60.0) -> str:
    lab_state = state.require(SITE)
    return lab.ssh(lab_state, lab_state.node(host), command, timeout_s=timeout_s).stdout


def http(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """Status, headers and body of one request from the controller (no proxy: the lab's own network)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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


def test_the_registry_lists_the_image(runs):
    status, _, body = http(f"http://{REGISTRY}/v2/_catalog")
    assert (status, json.loads(body)["repositories"]) == (200, [IMAGE])


def test_the_registry_serves_the_manifests_digest(runs):
    wanted = next(artifact for artifact in runs.manifest.artifacts if artifact.kind == "image").digest
    status, headers, _ = http(f"http://{REGISTRY}/v2/{IMAGE}/manifests/{TAG}", "HEAD",
                              {"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert (status, headers.get("Docker-Content-Digest")) == (200, wanted)


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
        assert ("Hash Sum mismatch" if tamper == "packages" else "BADSIG") in said, said
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


def test_the_clients_registry_hosts_are_the_mirrors_alone(runs):
    names = on_node(CLIENT, f"find {CERTS_D} -mindepth 1 -maxdepth 1 -type d -printf '%f\\n'").split()
    hosts = on_node(CLIENT, f"cat {CERTS_D}/{REGISTRY}/hosts.toml")
    assert (names, tomllib.loads(hosts)) == (
        [REGISTRY], {"server": f"http://{REGISTRY}", "capabilities": ["pull", "resolve"]})
    assert [host for host in UPSTREAM_HOSTS if host in hosts] == []


def test_containerd_pulls_the_image_from_the_mirror(runs):
    # No --plain-http: the registry's hosts.toml says how to reach it, as it does for the CRI.
    reference = f"{REGISTRY}/{IMAGE}:{TAG}"
    started = time.monotonic()
    on_node(CLIENT, f"ctr -n k8s.io images pull --hosts-dir {CERTS_D} {reference}", timeout_s=120)
    print(f"\nctr pull {reference}: {time.monotonic() - started:.1f} s")
    wanted = next(artifact for artifact in runs.manifest.artifacts if artifact.kind == "image").digest
    assert wanted in on_node(CLIENT, f"ctr -n k8s.io images ls name=={reference}")
