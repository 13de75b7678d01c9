"""Fill a bundle from source: one Kubernetes release and everything it runs with.

What is built, from sources/<component>/<version>/ (Go modules holding only go.mod and go.sum):

| artifact | from | as |
|---|---|---|
| kubeadm, kubelet, kubectl | k8s.io/kubernetes cmd/* | .debs `1.36.3-1.1`, kubelet's systemd unit and kubeadm's drop-in |
| kube-apiserver, -controller-manager, -scheduler, -proxy | k8s.io/kubernetes cmd/* | images `<name>:v1.36.3` |
| etcd, etcdctl, etcdutl | go.etcd.io/etcd server/v3, etcdctl/v3, etcdutl/v3 | image `etcd:3.6.8-0` |
| coredns | github.com/coredns/coredns | image `coredns:v1.14.2` |
| pause | pause.c in the k8s.io/kubernetes module, gcc -static | image `pause:3.10.2` |
| bridge, host-local, loopback, portmap | github.com/containernetworking/plugins | .deb `kubernetes-cni 1.10.0-1.1` |
| kube-router | github.com/cloudnativelabs/kube-router/v2 | image `kube-router:v2.1.0` |
| kueue (its manager) | sigs.k8s.io/kueue cmd/kueue | image `kueue:v0.17.0` (`/manager`, user 65532) |
| Kueue's Helm chart | `charts/kueue` of the same module | `charts/kueue-0.17.0.tgz` and `charts/index.yaml` |

Image tags are the ones kubeadm of that release asks for (`kubeadm config images list`), so
kubeadm pulls them from the site mirror by its `imageRepository` alone. kube-proxy and
kube-router carry Debian's nft, iptables and ipset beside their binary (they program the
node's netfilter through those tools). Kueue's image is laid out as upstream's Dockerfile
lays it (distroless static: `/manager`, run as 65532:65532) and its chart is packaged from the
module Go downloaded for the build, so image and chart come from the same checked source.
The node-side Debian packages the debs depend on, and keepalived for the API's virtual IP,
are copied from this machine's apt sources.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rackform.installed_tools import find_tool
from rackform.mirror import MirrorError, apt_repo, charts, debian, debs, gobuild, oci, run
from rackform.mirror.manifest import Artifact, Manifest, file_digest
from rackform.paths import SOURCES_DIR

Progress = Callable[[str], None]
INPUTS_FILE = ".inputs"

NETFILTER_TOOLS = ("iptables", "ipset", "nftables", "iproute2", "busybox-static")
"""Debian packages unpacked into the kube-proxy and kube-router images: the netfilter tools they
call, `ip`, and busybox for the shell and the few commands (sh, cp, mv) an init container runs."""
BUSYBOX_COMMANDS = ("sh", "cp", "mv", "cat", "ls", "mkdir", "rm")
NODE_PACKAGES = ("conntrack", "ebtables", "ethtool", "iproute2", "iptables", "socat", "keepalived",
                 "nfs-ganesha", "nfs-ganesha-vfs", "nfs-kernel-server", "nfs-common", "libnfs-utils")
"""Debian packages nodes install from the mirror: the kubelet's dependencies, the VIP's keepalived,
the storage stage's NFS servers (either one) and NFS client tools."""
KUBELET_DEPENDS = ("conntrack", "ebtables", "ethtool", "iproute2", "iptables (>= 1.4.21)", "mount", "socat",
                   "util-linux", "kubernetes-cni (>= 1.2.0)")

KUBELET_SERVICE = """\
[Unit]
Description=kubelet: The Kubernetes Node Agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUEUE_MODULE = "sigs.k8s.io/kueue"
NONROOT = "65532:65532"
"""uid:gid of distroless' `nonroot` user, which upstream's Kueue image runs as."""
NONROOT_PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
NONROOT_GROUP = "root:x:0:\nnonroot:x:65532:\n"

# How kubeadm starts the kubelet: the flags file and the config it writes at init/join.
KUBEADM_DROP_IN = """\
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""


@dataclass(frozen=True, slots=True)
class ReleasePins:
    """One Kubernetes release and the versions it runs with (topologies/versions.yaml)."""

    kubernetes: str
    etcd: str
    """Image tag, as kubeadm names it: 3.6.8-0 (module version 3.6.8)."""
    coredns: str
    pause: str
    cni_plugins: str
    kube_router: str
    kueue: str | None = None
    """Kueue's image tag (v0.17.0); None: the release's bundle carries no Kueue."""
    kueue_chart: str | None = None
    """The version of Kueue's Helm chart (0.17.0), packaged from the same module as the image."""

    def __post_init__(self) -> None:
        if (self.kueue is None) != (self.kueue_chart is None):
            raise MirrorError(f"Kubernetes {self.kubernetes}: Kueue's image and chart are carried together "
                              f"(image {self.kueue or 'not pinned'}, chart {self.kueue_chart or 'not pinned'})")

    @property
    def kube_tag(self) -> str:
        return f"v{self.kubernetes}"


@dataclass(slots=True)
class FillReport:
    bundle: Path
    manifest: Manifest
    built: list[str]
    cached: list[str]
    seconds: float
    unchanged: bool = False


def source_dir(component: str, version: str, sources: Path = SOURCES_DIR) -> Path:
    folder = sources / component / version.lstrip("v")
    if not (folder / "go.mod").is_file():
        carried = sorted(p.name for p in (sources / component).glob("*") if (p / "go.mod").is_file())
        raise MirrorError(f"sources/{component}/{version.lstrip('v')}/go.mod: missing: rackform builds "
                          f"{component} {', '.join(carried) or '(no version)'} from source here")
    return folder


def go_builds(pins: ReleasePins, sources: Path = SOURCES_DIR) -> dict[str, gobuild.GoBuild]:
    major, minor, _patch = pins.kubernetes.split(".")
    version_vars = {"gitVersion": pins.kube_tag, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
                    "buildDate": oci.CREATED}
    kube_ldflags = ["-s", "-w"] + [f"-X k8s.io/{package}.{name}={value}"
                                   for package in ("component-base/version", "client-go/pkg/version")
                                   for name, value in version_vars.items()]
    kube_commands = ("kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager",
                     "kube-scheduler", "kube-proxy")
    specs = {
        "kubernetes": gobuild.GoBuild("kubernetes", pins.kubernetes, source_dir("kubernetes", pins.kubernetes, sources),
                                      {f"k8s.io/kubernetes/cmd/{name}": name for name in kube_commands},
                                      tuple(kube_ldflags)),
        "etcd": gobuild.GoBuild("etcd", _module_version(pins.etcd), source_dir("etcd", _module_version(pins.etcd), sources),
                                {"go.etcd.io/etcd/server/v3": "etcd", "go.etcd.io/etcd/etcdctl/v3": "etcdctl",
                                 # etcd 3.6 restores a snapshot only with etcdutl (etcdctl lost `snapshot restore`)
                                 "go.etcd.io/etcd/etcdutl/v3": "etcdutl"}),
        "coredns": gobuild.GoBuild("coredns", pins.coredns, source_dir("coredns", pins.coredns, sources),
                                   {"github.com/coredns/coredns": "coredns"}),
        "cni": gobuild.GoBuild("cni", pins.cni_plugins, source_dir("cni", pins.cni_plugins, sources),
                               {f"github.com/containernetworking/plugins/plugins/{path}": path.split("/")[1]
                                for path in ("main/bridge", "ipam/host-local", "main/loopback", "meta/portmap")},
                               ("-s", "-w", "-X github.com/containernetworking/plugins/pkg/utils/buildversion."
                                            f"BuildVersion={pins.cni_plugins}")),
        "kube-router": gobuild.GoBuild("kube-router", pins.kube_router,
                                       source_dir("kube-router", pins.kube_router, sources),
                                       {"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router": "kube-router"},
                                       ("-s", "-w", "-X github.com/cloudnativelabs/kube-router/v2/pkg/version."
                                                    f"Version={pins.kube_router}")),
    }
    if pins.kueue is not None:
        # The manager binary upstream's Makefile builds (`make build`: bin/manager), version stamped as it stamps it.
        specs["kueue"] = gobuild.GoBuild("kueue", pins.kueue, source_dir("kueue", pins.kueue, sources),
                                         {f"{KUEUE_MODULE}/cmd/kueue": "manager"},
                                         ("-s", "-w", f"-X {KUEUE_MODULE}/pkg/version.GitVersion={pins.kueue}",
                                          f"-X {KUEUE_MODULE}/pkg/version.BuildDate={oci.CREATED}"))
    return specs


def _module_version(image_tag: str) -> str:
    """etcd's image tag 3.6.8-0 -> its module version 3.6.8."""
    return image_tag.split("-")[0]


def fill(pins: ReleasePins, bundle: Path, progress: Progress = print, sources: Path = SOURCES_DIR) -> FillReport:
    """Build (or take from the cache) every artifact of `pins` and write the bundle.

    A bundle whose recorded inputs equal this run's is left as it is: nothing is rebuilt or
    rewritten, and the report says so."""
    started = time.monotonic()
    specs = go_builds(pins, sources)
    toolchain = gobuild.go_version()
    inputs = _inputs_key(pins, specs, toolchain)
    if (bundle / INPUTS_FILE).is_file() and (bundle / INPUTS_FILE).read_text().strip() == inputs:
        from rackform.mirror.manifest import read

        manifest = read(bundle)
        return FillReport(bundle, manifest, [], sorted(specs), time.monotonic() - started, unchanged=True)
    built: list[str] = []
    cached: list[str] = []
    binaries: dict[str, dict[str, Path]] = {}
    for name, spec in specs.items():
        result = gobuild.build(spec, progress)
        (cached if result.cached else built).append(name)
        binaries[name] = result.binaries
        if not result.cached:
            progress(f"  {name} {spec.version}: built in {result.seconds:.0f} s")
    pause = _pause_binary(pins, specs["kubernetes"].module_dir, progress)

    bundle.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{bundle.name}.filling-", dir=bundle.parent))
    try:
        manifest = Manifest(pins.kubernetes, "source")
        progress("packaging: images (umoci), .debs (dpkg-deb), the apt index")
        manifest.artifacts += _images(pins, binaries, pause, work, progress)
        manifest.artifacts += _debs(pins, binaries, work / "apt")
        manifest.artifacts += _node_packages(work / "apt")
        apt_repo.write_indexes(work / "apt")
        manifest.artifacts += _charts(pins, specs, work / "charts", progress)
        manifest.write(work)
        (work / INPUTS_FILE).write_text(inputs + "\n")
        _replace(bundle, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return FillReport(bundle, manifest, built, cached, time.monotonic() - started)


def _inputs_key(pins: ReleasePins, specs: dict[str, gobuild.GoBuild], toolchain: str) -> str:
    """Everything the bundle is made of: the Go builds' cache keys, the pins, the packaging code."""
    digest = hashlib.sha256(json.dumps(pins.__repr__()).encode())
    for name in sorted(specs):
        digest.update(f"{name}={gobuild.cache_key(specs[name], toolchain)}".encode())
    for module in (Path(__file__), Path(debs.__file__), Path(oci.__file__), Path(apt_repo.__file__),
                   Path(debian.__file__), Path(charts.__file__)):
        digest.update(module.read_bytes())
    digest.update(run(["apt-cache", "policy", *NODE_PACKAGES, *NETFILTER_TOOLS]).stdout.encode())
    return digest.hexdigest()


def _replace(bundle: Path, work: Path) -> None:
    """Swap the new bundle in: a reader sees the old one or the new one, never half of one."""
    old = bundle.with_name(f".{bundle.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if bundle.exists():
        bundle.rename(old)
    work.rename(bundle)
    shutil.rmtree(old, ignore_errors=True)


def _pause_binary(pins: ReleasePins, kube_module_dir: Path, progress: Progress) -> Path:
    """pause, compiled from the pause.c the pinned k8s.io/kubernetes module carries."""
    listed = json.loads(run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{pins.kube_tag}"],
                            cwd=kube_module_dir).stdout)
    source = Path(listed["Dir"]) / "build/pause/linux/pause.c"
    if not source.is_file():
        raise MirrorError(f"{source}: missing from the k8s.io/kubernetes {pins.kube_tag} module")
    key = hashlib.sha256(source.read_bytes() + pins.pause.encode()
                         + run(["gcc", "--version"]).stdout.encode()).hexdigest()[:16]
    target = gobuild.CACHE_DIR.parent / "pause" / f"pause-{pins.pause}-{key}"
    if not target.exists():
        progress(f"building pause {pins.pause} from {source.name} (gcc -static)")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.building")
        run(["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{pins.pause}", "-o", partial, source])
        run(["strip", partial])
        partial.rename(target)
    return target


def _binary_tree(root: Path, files: dict[str, Path]) -> Path:
    for target, source in files.items():
        path = root / target.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, path)
        path.chmod(0o755)
    return root


def _netfilter_root(work: Path) -> Path:
    """Debian's nft, iptables, ipset, ip and busybox unpacked, with the symlinks their postinst
    would make (iptables -> the nf_tables backend, as Debian's default alternative; sh -> busybox)."""
    root = debian.unpack(debian.download(debian.closure(NETFILTER_TOOLS, skip_required=False)),
                         work / "netfilter-root")
    sbin = root / "usr/sbin"
    for command in BUSYBOX_COMMANDS:
        link = root / "bin" / command
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("busybox")
    for family in ("iptables", "ip6tables"):
        for suffix in ("", "-save", "-restore"):
            link = sbin / f"{family}{suffix}"
            if not link.exists():
                link.symlink_to("xtables-nft-multi")
    return root


def _images(pins: ReleasePins, binaries: dict[str, dict[str, Path]], pause: Path, work: Path,
            progress: Progress) -> list[Artifact]:
    kube = binaries["kubernetes"]
    netfilter = _netfilter_root(work)
    specs = [oci.ImageSpec(name, pins.kube_tag, [_binary_tree(work / f"{name}-root",
                                                              {f"/usr/local/bin/{name}": kube[name]})])
             for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")]
    specs += [
        oci.ImageSpec("kube-proxy", pins.kube_tag, [netfilter, _binary_tree(
            work / "kube-proxy-root", {"/usr/local/bin/kube-proxy": kube["kube-proxy"]})]),
        oci.ImageSpec("etcd", pins.etcd, [_binary_tree(work / "etcd-root", {
            f"/usr/local/bin/{name}": path for name, path in binaries["etcd"].items()})]),
        oci.ImageSpec("coredns", pins.coredns, [_binary_tree(work / "coredns-root",
                                                             {"/coredns": binaries["coredns"]["coredns"]})],
                      entrypoint=("/coredns",)),
        oci.ImageSpec("pause", pins.pause, [_binary_tree(work / "pause-root", {"/pause": pause})],
                      entrypoint=("/pause",)),
        oci.ImageSpec("kube-router", pins.kube_router, [netfilter, _binary_tree(
            work / "kube-router-root", {"/usr/local/bin/kube-router": binaries["kube-router"]["kube-router"]})],
            entrypoint=("/usr/local/bin/kube-router",)),
    ]
    if "kueue" in binaries:
        specs.append(kueue_image(pins.kueue or "", binaries["kueue"]["manager"], work / "kueue-root"))
    artifacts = []
    for spec in specs:
        path = f"images/{spec.name}_{spec.tag}"
        digest = oci.build(spec, work / path)
        artifacts.append(Artifact("image", spec.name, spec.tag, path, digest, "built"))
    for scratch in work.glob("*-root"):
        shutil.rmtree(scratch)
    progress(f"  {len(artifacts)} images")
    return artifacts


def kueue_image(tag: str, manager: Path, root: Path) -> oci.ImageSpec:
    """Kueue's controller as upstream's Dockerfile builds it on distroless static: `/manager` as the
    entrypoint (the chart's Deployment runs `command: [/manager]`), user 65532:65532, an /etc/passwd
    that names it, and a world-writable /tmp."""
    _binary_tree(root, {"/manager": manager})
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/passwd").write_text(NONROOT_PASSWD)
    (root / "etc/group").write_text(NONROOT_GROUP)
    for name in ("passwd", "group"):
        (root / "etc" / name).chmod(0o644)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "home/nonroot").mkdir(parents=True, exist_ok=True)
    return oci.ImageSpec("kueue", tag, [root], entrypoint=("/manager",), user=NONROOT)


def module_dir(module: str, version: str, cwd: Path) -> Path:
    """Where Go's module cache holds `module@version` (downloaded and checked against go.sum of `cwd`)."""
    listed = json.loads(run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=cwd).stdout)
    if listed.get("Error") or not listed.get("Dir"):
        raise MirrorError(f"{module}@{version}: {listed.get('Error') or 'not in the module cache'}")
    return Path(listed["Dir"])


def _charts(pins: ReleasePins, specs: dict[str, gobuild.GoBuild], out: Path, progress: Progress) -> list[Artifact]:
    """Kueue's chart from the module its image is built from, and the repository's index.yaml."""
    out.mkdir()
    if pins.kueue is None or pins.kueue_chart is None:
        return []
    chart_dir = module_dir(KUEUE_MODULE, pins.kueue, specs["kueue"].module_dir) / "charts/kueue"
    meta = charts.metadata(chart_dir)
    if (str(meta["version"]), str(meta.get("appVersion"))) != (pins.kueue_chart, pins.kueue):
        raise MirrorError(f"{chart_dir}/Chart.yaml: version {meta['version']}, appVersion {meta.get('appVersion')}; "
                          f"the matrix pins chart {pins.kueue_chart} for image {pins.kueue}")
    archive = charts.package(chart_dir, out)
    charts.write_index(out)
    progress(f"  chart {archive.name}")
    return [Artifact("chart", str(meta["name"]), pins.kueue_chart, f"charts/{archive.name}", file_digest(archive),
                     "built")]


def _debs(pins: ReleasePins, binaries: dict[str, dict[str, Path]], apt: Path) -> list[Artifact]:
    kube = binaries["kubernetes"]
    version = f"{pins.kubernetes}-{debs.PACKAGE_REVISION}"
    cni_version = f"{pins.cni_plugins.lstrip('v')}-{debs.PACKAGE_REVISION}"
    specs = [
        debs.DebSpec("kubectl", version, "Command-line utility for interacting with a Kubernetes cluster\n"
                     "Built by rackform from the k8s.io/kubernetes Go module.", {"/usr/bin/kubectl": kube["kubectl"]}),
        debs.DebSpec("kubelet", version, "Node agent for Kubernetes clusters\n"
                     "Built by rackform from the k8s.io/kubernetes Go module.",
                     {"/usr/bin/kubelet": kube["kubelet"], "/usr/lib/systemd/system/kubelet.service": KUBELET_SERVICE},
                     depends=KUBELET_DEPENDS, postinst=debs.RELOAD_SYSTEMD),
        debs.DebSpec("kubeadm", version, "Command-line utility for administering a Kubernetes cluster\n"
                     "Built by rackform from the k8s.io/kubernetes Go module.",
                     {"/usr/bin/kubeadm": kube["kubeadm"],
                      "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROP_IN},
                     depends=("kubelet (>= 1.35.0)", "kubectl (>= 1.35.0)", "kubernetes-cni (>= 1.2.0)"),
                     postinst=debs.RELOAD_SYSTEMD),
        debs.DebSpec("kubernetes-cni", cni_version, "Binaries required to provision container networking\n"
                     "The CNI reference plugins, built by rackform from their Go module.",
                     {f"/opt/cni/bin/{name}": path for name, path in binaries["cni"].items()}),
    ]
    artifacts = []
    for spec in specs:
        path = debs.build(spec, apt)
        artifacts.append(Artifact("deb", spec.name, spec.version, f"apt/{path.name}", file_digest(path), "built"))
    return artifacts


def _node_packages(apt: Path) -> list[Artifact]:
    artifacts = []
    for deb in debian.download(debian.closure(NODE_PACKAGES, skip_required=True)):
        name, version, arch = deb.name.replace("%3a", ":").removesuffix(".deb").split("_")
        # The archive's own naming: the epoch is in the version field, not the file name.
        target = apt / f"{name}_{version.split(':')[-1]}_{arch}.deb"
        shutil.copy2(deb, target)
        artifacts.append(Artifact("deb", name, version, f"apt/{target.name}", file_digest(target), "debian"))
    return artifacts


def pins_environment_check() -> list[str]:
    """Tools a build from source needs that this machine lacks (empty when all are there)."""
    return [tool for tool in ("go", "gcc", "umoci", "dpkg-deb", "apt-get") if find_tool(tool) is None]


__all__ = ["ReleasePins", "FillReport", "fill", "go_builds", "source_dir", "pins_environment_check"]
