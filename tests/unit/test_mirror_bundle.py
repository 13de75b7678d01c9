"""The site mirror's bundle with the real tools: dpkg-deb builds the packages and apt reads
the repository, umoci builds images that skopeo reads, go builds a pinned module once, and a
fill from upstream copies from a stand-in upstream on loopback (Debian's docker-registry and
an HTTP server) with every digest kept."""

from __future__ import annotations

import gzip
import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hang_limit import SUBPROCESS_HANG_S
from rackform.cli import main
from rackform.mirror import MirrorError, apt_repo, debs, gobuild, oci, upstream
from rackform.mirror.manifest import Artifact, Manifest, file_digest, read, verify
from rackform.mirror.source import ReleasePins

pytestmark = pytest.mark.slow
PINS = ReleasePins("1.36.3", "3.6.8-0", "v1.14.2", "3.10.2", "v1.10.0", "v2.1.0")


def _static_binary(tmp_path: Path, name: str, message: str) -> Path:
    source = tmp_path / f"{name}.c"
    source.write_text(f'#include <stdio.h>\nint main(void) {{ puts("{message}"); return 0; }}\n')
    binary = tmp_path / name
    subprocess.run(["gcc", "-static", "-Os", "-o", binary, source], check=True)
    return binary


def _apt_candidate(repo: Path, package: str, tmp_path: Path) -> str:
    """What apt, pointed at `repo` alone, would install for `package` (no root, no system state)."""
    state = tmp_path / "apt-state"
    for folder in ("lists/partial", "cache/archives/partial", "etc/preferences.d", "etc/apt.conf.d"):
        (state / folder).mkdir(parents=True, exist_ok=True)
    (state / "etc/sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    options = ["-o", f"Dir::Etc::sourcelist={state / 'etc/sources.list'}", "-o", "Dir::Etc::sourceparts=-",
               "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::Cache={state / 'cache'}",
               "-o", f"Dir::Etc::preferencesparts={state / 'etc/preferences.d'}", "-o", "Dir::State::status=/dev/null"]
    subprocess.run(["apt-get", *options, "update"], check=True, capture_output=True)
    policy = subprocess.run(["apt-cache", *options, "policy", package], check=True, capture_output=True, text=True)
    return next(line.split()[-1] for line in policy.stdout.splitlines() if "Candidate:" in line)


def test_debs_form_a_repository_apt_installs_from(tmp_path):
    binary = _static_binary(tmp_path, "hello", "hello")
    repo = tmp_path / "apt"
    built = debs.build(debs.DebSpec("kubeadm", "1.36.3-1.1", "probe\nA test package.", {"/usr/bin/kubeadm": binary},
                                    depends=("kubelet (>= 1.35.0)",)), repo)
    debs.build(debs.DebSpec("kubelet", "1.36.3-1.1", "probe\nA test package.", {"/usr/bin/kubelet": binary}), repo)
    apt_repo.write_indexes(repo)
    assert built.name == "kubeadm_1.36.3-1.1_amd64.deb"
    assert _apt_candidate(repo, "kubeadm", tmp_path) == "1.36.3-1.1"
    contents = subprocess.run(["dpkg-deb", "--contents", built], check=True, capture_output=True, text=True).stdout
    assert "root/root" in contents and "./usr/bin/kubeadm" in contents
    packages = (repo / "Packages").read_text()
    assert f"SHA256: {file_digest(built).split(':')[1]}" in packages
    assert gzip.decompress((repo / "Packages.gz").read_bytes()).decode() == packages


def test_images_are_readable_and_reproducible(tmp_path):
    binary = _static_binary(tmp_path, "pause", "paused")
    digests = []
    for attempt in ("a", "b"):
        tree = tmp_path / f"root-{attempt}"
        (tree / "bin").mkdir(parents=True)
        shutil.copy2(binary, tree / "bin/pause")
        spec = oci.ImageSpec("pause", "3.10.2", [tree], entrypoint=("/bin/pause",))
        digests.append(oci.build(spec, tmp_path / f"layout-{attempt}"))
    assert digests[0] == digests[1], "the same files must give the same image digest"
    inspected = subprocess.run(["skopeo", "inspect", "--config", f"oci:{tmp_path / 'layout-a'}:3.10.2"],
                               check=True, capture_output=True, text=True).stdout
    assert '"/bin/pause"' in inspected


def test_manifest_round_trip_and_tamper_check(tmp_path):
    deb = tmp_path / "apt" / "x.deb"
    deb.parent.mkdir()
    deb.write_bytes(b"package")
    manifest = Manifest("1.36.3", "source", [Artifact("deb", "x", "1", "apt/x.deb", file_digest(deb), "built")])
    manifest.write(tmp_path)
    assert read(tmp_path) == manifest
    assert verify(tmp_path, manifest) == []
    deb.write_bytes(b"tampered")
    assert verify(tmp_path, manifest) == [f"apt/x.deb: digest {file_digest(deb)}, manifest says "
                                          f"{manifest.artifacts[0].digest}"]


def _tiny_module(folder: Path) -> gobuild.GoBuild:
    """A Go module of one command and no dependencies: the cache is under test, not a real
    component (building one, CNI's plugins, meant a download and minutes of Go mid-run)."""
    folder.mkdir()
    (folder / "go.mod").write_text("module example.com/tiny\n\ngo 1.22\n")
    (folder / "go.sum").write_text("")
    (folder / "main.go").write_text('package main\n\nvar version = "unset"\n\nfunc main() { println(version) }\n')
    return gobuild.GoBuild("tiny", "v1.0.0", folder, {"example.com/tiny": "tiny"},
                           ("-s", "-w", "-X main.version=v1.0.0"))


@pytest.mark.skipif(shutil.which("go") is None, reason="needs Go to build a module (docs/mirror.md)")
def test_go_build_is_cached_by_version_and_digest(tmp_path):
    spec = _tiny_module(tmp_path / "tiny")
    first = gobuild.build(spec, progress=lambda _line: None, cache_dir=tmp_path / "cache")
    second = gobuild.build(spec, progress=lambda _line: None, cache_dir=tmp_path / "cache")
    assert (first.cached, second.cached) == (False, True)
    assert second.binaries == first.binaries
    about = subprocess.run([first.binaries["tiny"]], capture_output=True, text=True, timeout=SUBPROCESS_HANG_S)
    assert "v1.0.0" in about.stdout + about.stderr, "the binary reports the version its linker flags set"
    (spec.module_dir / "go.sum").write_text("\n")  # another input: another key, built anew
    assert gobuild.build(spec, progress=lambda _line: None, cache_dir=tmp_path / "cache").cached is False


def test_a_release_the_mirror_does_not_carry_is_bad_input(capsys, tmp_path):
    code = main(["mirror", "build", "--kubernetes", "1.30.0", "--bundles", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "versions.yaml:" in err and "does not carry Kubernetes 1.30.0" in err
    assert not any(tmp_path.iterdir()), "nothing is written"


# --------------------------------------------------------------- from upstream, via a stand-in


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def stand_in_upstream(tmp_path):
    """Kubernetes' package repository (an HTTP server over a flat repository) and its registry
    (Debian's docker-registry) on loopback, holding small packages and images of the release."""
    binary = _static_binary(tmp_path, "tool", "tool")
    repo = tmp_path / "upstream-apt"
    for name, version in upstream.wanted_debs(PINS).items():
        debs.build(debs.DebSpec(name, version, "stand-in\nUpstream stand-in.", {f"/usr/bin/{name}": binary}), repo)
    apt_repo.write_indexes(repo)
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(repo), **k)  # noqa: E731
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    registry_port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'registry'}\n"
                      f"http:\n  addr: 127.0.0.1:{registry_port}\n")
    registry = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while subprocess.run(["curl", "-sf", f"http://127.0.0.1:{registry_port}/v2/"], capture_output=True).returncode:
        assert time.monotonic() < deadline, "the stand-in registry did not start"
        time.sleep(0.2)
    host = f"127.0.0.1:{registry_port}"
    published = {}
    stand_in = upstream.Upstream.for_release(PINS, registry=host, plain_http=True)
    tags = {name: PINS.kube_tag for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                            "kube-proxy")}
    tags.update({"etcd": PINS.etcd, "coredns": PINS.coredns, "pause": PINS.pause, "kube-router": PINS.kube_router})
    for name, tag in tags.items():
        tree = tmp_path / f"{name}-root"
        (tree / "usr/local/bin").mkdir(parents=True)
        shutil.copy2(binary, tree / "usr/local/bin" / name)
        layout = tmp_path / "built" / name
        published[name] = oci.build(oci.ImageSpec(name, tag, [tree]), layout)
        subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}",
                        f"docker://{stand_in.image_source(name)}:{tag}"], check=True)
    yield f"http://127.0.0.1:{server.server_address[1]}/", host, published, repo
    server.shutdown()
    registry.terminate()
    registry.wait(timeout=10)


def test_fill_from_upstream_copies_what_the_indexes_promise(stand_in_upstream, tmp_path):
    apt_url, registry, published, upstream_repo = stand_in_upstream
    bundle = tmp_path / "bundles" / "kubernetes-1.36.3"
    report = upstream.fill(PINS, bundle, upstream.Upstream.for_release(PINS, apt_url, registry, plain_http=True),
                           progress=lambda _line: None)
    manifest = read(bundle)
    assert report.manifest == manifest and manifest.filled_from == "upstream"
    images = {a.name: a.digest for a in manifest.of_kind("image")}
    assert images == published, "every image keeps the digest the registry published"
    kube_debs = {a.name: a.version for a in manifest.of_kind("deb") if a.source == "upstream"}
    assert kube_debs == upstream.wanted_debs(PINS)
    for name in kube_debs:
        copied = next(a for a in manifest.of_kind("deb") if a.name == name)
        assert copied.digest == file_digest(upstream_repo / Path(copied.path).name)
    assert verify(bundle, manifest) == []
    assert _apt_candidate(bundle / "apt", "kubeadm", tmp_path) == "1.36.3-1.1"
    assert "keepalived" in {a.name for a in manifest.of_kind("deb") if a.source == "debian"}


def test_a_deb_whose_digest_differs_from_the_index_is_not_copied(stand_in_upstream, tmp_path):
    apt_url, registry, _published, upstream_repo = stand_in_upstream
    deb = next(upstream_repo.glob("kubelet_*.deb"))
    deb.write_bytes(deb.read_bytes() + b"tampered")
    bundle = tmp_path / "bundles" / "kubernetes-1.36.3"
    with pytest.raises(MirrorError, match="kubelet_1.36.3-1.1_amd64.deb: SHA256 differs"):
        upstream.fill(PINS, bundle, upstream.Upstream.for_release(PINS, apt_url, registry, plain_http=True),
                      progress=lambda _line: None)
    assert not bundle.exists() and not list(bundle.parent.glob(".*filling*")), "nothing half-filled is left"


def test_upstream_addresses_default_to_kubernetes_own(tmp_path):
    source = upstream.Upstream.for_release(PINS)
    assert source.apt_url == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/"
    assert source.image_source("coredns") == "registry.k8s.io/coredns/coredns"
    assert os.path.basename(source.image_source("kube-router")) == "kube-router"


def test_every_release_bundle_names_its_apt_source_the_same(tmp_path):
    """apt refuses a source whose Release changes its Label: an upgrade serves the next release's
    bundle from the same source, so the Release fields apt compares may not name the release."""
    releases = {}
    for name in ("a", "b"):
        repo = tmp_path / name
        repo.mkdir()
        apt_repo.write_indexes(repo)
        releases[name] = {line.split(":")[0]: line for line in (repo / "Release").read_text().splitlines()
                          if line.split(":")[0] in ("Origin", "Label", "Suite", "Codename")}
    assert releases["a"] == releases["b"] and releases["a"]["Label"] == f"Label: {apt_repo.LABEL}"
