"""Kueue in the site mirror's bundle: its chart packaged reproducibly from the pinned module and
served as a chart repository helm pulls from, its controller image laid out as upstream's
(`/manager`, non-root 65532), and the helm client built from its own module."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from rackform.installed_tools import find_tool, not_found
from rackform.mirror import MirrorError, charts, oci
from rackform.mirror.bundle import release_pins
from rackform.mirror.manifest import file_digest
from rackform.mirror.source import KUEUE_MODULE, ReleasePins, go_builds, kueue_image, module_dir
from rackform.mirror.tools import helm_build

ROOT = Path(__file__).resolve().parents[2]
PINS = release_pins(ROOT, version="1.36.3")


@functools.cache
def _kueue_chart() -> Path:
    """charts/kueue of the pinned module, from Go's module cache (downloaded once, checked by go.sum)."""
    return module_dir(KUEUE_MODULE, PINS.kueue, go_builds(PINS)["kueue"].module_dir) / "charts/kueue"


def _helm() -> str:
    """The helm `make tools` puts beside rackform (else one on PATH)."""
    helm = find_tool("helm")
    if helm is None:
        pytest.skip(f"needs helm to pull and render the chart: {not_found(['helm'])}; `make tools` builds it "
                    f"from sources/helm")
    return helm


def test_the_matrix_pins_kueue_image_and_chart_together():
    assert (PINS.kueue, PINS.kueue_chart) == ("v0.17.0", "0.17.0")
    spec = go_builds(PINS)["kueue"]
    assert spec.packages == {"sigs.k8s.io/kueue/cmd/kueue": "manager"}
    assert "-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.17.0" in spec.ldflags
    assert spec.module_dir.resolve() == ROOT / "sources/kueue/0.17.0"
    with pytest.raises(MirrorError, match="carried together"):
        ReleasePins("1.36.3", "3.6.8-0", "v1.14.2", "3.10.2", "v1.10.0", "v2.1.0", kueue="v0.17.0")


def test_the_chart_archive_is_reproducible_and_holds_the_module_chart(tmp_path):
    first = charts.package(_kueue_chart(), tmp_path / "a")
    second = charts.package(_kueue_chart(), tmp_path / "b")
    assert first.name == "kueue-0.17.0.tgz"
    assert file_digest(first) == file_digest(second), "the same chart must give the same archive"
    with tarfile.open(first) as archive:
        members = archive.getmembers()
    names = [member.name for member in members]
    assert names == sorted(names) and all(name.startswith("kueue/") for name in names)
    assert {"kueue/Chart.yaml", "kueue/values.yaml", "kueue/templates/manager/manager.yaml"} <= set(names)
    assert {(m.mtime, m.uid, m.gid, m.mode) for m in members} == {(oci.CREATED_EPOCH_S, 0, 0, 0o644)}
    values = next(m for m in members if m.name == "kueue/values.yaml")
    assert values.size == (_kueue_chart() / "values.yaml").stat().st_size, "files are taken as the module holds them"


def test_helmignore_leaves_files_out(tmp_path):
    chart = tmp_path / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.2.3\n")
    (chart / ".helmignore").write_text("# comment\n*.bak\n.git/\n")
    (chart / "templates/a.yaml").write_text("kind: ConfigMap\n")
    (chart / "templates/a.yaml.bak").write_text("old\n")
    (chart / ".git").mkdir()
    (chart / ".git/HEAD").write_text("ref\n")
    assert charts.chart_files(chart) == [Path(".helmignore"), Path("Chart.yaml"), Path("templates/a.yaml")]


def test_the_index_names_the_version_and_the_archive_digest(tmp_path):
    archive = charts.package(_kueue_chart(), tmp_path)
    index = yaml.safe_load(charts.write_index(tmp_path).read_text())
    assert index["apiVersion"] == "v1" and list(index["entries"]) == ["kueue"]
    [entry] = index["entries"]["kueue"]
    assert (entry["name"], entry["version"], entry["appVersion"], entry["apiVersion"]) == (
        "kueue", "0.17.0", "v0.17.0", "v2")
    assert entry["digest"] == hashlib.sha256(archive.read_bytes()).hexdigest() == file_digest(archive).split(":")[1]
    assert entry["urls"] == ["kueue-0.17.0.tgz"]
    again = tmp_path / "again"
    charts.package(_kueue_chart(), again)
    assert charts.write_index(again).read_bytes() == (tmp_path / "index.yaml").read_bytes()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def chart_repository(tmp_path):
    """The bundle's charts/ served over HTTP on loopback, as the mirror's nginx serves it."""
    served = tmp_path / "charts"
    archive = charts.package(_kueue_chart(), served)
    charts.write_index(served)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", archive
    server.shutdown()


def test_helm_pulls_the_chart_and_renders_it_against_the_mirror(chart_repository, tmp_path):
    url, archive = chart_repository
    helm = _helm()
    env = {"HELM_CACHE_HOME": str(tmp_path / "h/cache"), "HELM_CONFIG_HOME": str(tmp_path / "h/config"),
           "HELM_DATA_HOME": str(tmp_path / "h/data"), "PATH": "/usr/bin:/bin"}
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    subprocess.run([helm, "pull", "--repo", url, "kueue", "--version", "0.17.0", "-d", pulled],
                   check=True, capture_output=True, env=env)
    assert file_digest(pulled / "kueue-0.17.0.tgz") == file_digest(archive)
    rendered = subprocess.run(
        [helm, "template", "kueue", pulled / "kueue-0.17.0.tgz", "--namespace", "kueue-system",
         "--set", "controllerManager.manager.image.repository=mirror.lab:5000/kueue",
         "--set", "controllerManager.manager.image.tag=v0.17.0",
         "--set", "controllerManager.manager.image.pullPolicy=IfNotPresent"],
        check=True, capture_output=True, text=True, env=env).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    images = {container["image"] for doc in objects if doc["kind"] == "Deployment"
              for container in doc["spec"]["template"]["spec"]["containers"]}
    assert images == {"mirror.lab:5000/kueue:v0.17.0"}, "one image, the mirror's"
    kinds = {doc["kind"] for doc in objects}
    assert {"CustomResourceDefinition", "Deployment", "Secret", "MutatingWebhookConfiguration"} <= kinds
    assert not {doc["apiVersion"] for doc in objects} & {"cert-manager.io/v1", "monitoring.coreos.com/v1"}


def test_the_kueue_image_runs_manager_as_nonroot(tmp_path):
    manager = tmp_path / "manager"
    source = tmp_path / "manager.c"
    source.write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-static", "-Os", "-o", manager, source], check=True)
    layout = tmp_path / "layout"
    digest = oci.build(kueue_image("v0.17.0", manager, tmp_path / "root"), layout)
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["digest"] == digest
    blob = lambda d: layout / "blobs/sha256" / d.split(":")[1]  # noqa: E731
    image_manifest = json.loads(blob(digest).read_text())
    config = json.loads(blob(image_manifest["config"]["digest"]).read_text())["config"]
    assert (config["User"], config["Entrypoint"]) == ("65532:65532", ["/manager"])
    [layer] = image_manifest["layers"]
    with tarfile.open(blob(layer["digest"])) as tar:
        members = {m.name.removeprefix("./").rstrip("/"): m for m in tar.getmembers()}
        passwd = tar.extractfile(members["etc/passwd"]).read().decode()
    assert members["manager"].mode & 0o777 == 0o755 and members["tmp"].mode & 0o7777 == 0o1777
    assert "nonroot:x:65532:65532:" in passwd


def test_helm_is_built_as_upstream_stamps_it():
    spec = helm_build()
    assert spec.module_dir.resolve() == ROOT / "sources/helm/3.22.0"
    assert spec.packages == {"helm.sh/helm/v3/cmd/helm": "helm"}
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in spec.ldflags
    # The Kubernetes version `helm template` assumes: the client-go it is built with (v0.37 -> 1.37).
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in spec.ldflags
