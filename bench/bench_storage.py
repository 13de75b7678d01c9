"""Benchmark a data set read over NFS against a local read of it (docs/benchmarks.md, "Storage").

    sudo .venv/bin/python bench/bench_storage.py                      # 1 GiB, 3 rounds (about 20 s)
    sudo .venv/bin/python bench/bench_storage.py --size-mib 64        # a quick look (seconds)

Needs root (network and mount namespaces), ganesha.nfsd with its VFS FSAL (nfs-ganesha,
nfs-ganesha-vfs), nfs-cat (libnfs-utils), ip, nsenter, unshare and dd. Issue 20's
benchmark, without the lab:

- a "storage node" and a "GPU node": two network namespaces of this benchmark's own
  (rfbench.stor, rfbench.gpu) joined by a veth pair at the fabric host MTU (9000), on a
  private /30;
- in the storage namespace, NFS-Ganesha serving a folder under --workdir (it must be ext4
  or another file system the VFS FSAL can export, not overlayfs) NFSv4-only, read-only, to
  the GPU namespace's address alone, as the storage role serves a data set;
- the data set: one file of --size-mib MiB of random bytes.

Each round times, side by side and taking turns to go first:

- local: `dd if=FILE of=/dev/null bs=1M` in the storage namespace: the storage node reading
  its own file;
- NFS:   `nfs-cat 'nfs://ADDR/bench/FILE?version=4' > /dev/null` in the GPU namespace, as
  the verify stage reads a data set (libnfs' user-space client: this kernel has none). It
  asks for 1 MiB at a time, as dd does, and both write to /dev/null: the same consumer.

once with the file in the page cache (warm: the best case for both) and once with the
file's pages evicted before each read (cold: POSIX_FADV_DONTNEED on the file alone, so
the rest of a shared machine's page cache stays). Wall time runs from the process start
to its exit (the NFS figure includes libnfs' connect and NFSv4 mount, a few ms). CPU
seconds: the reader's own (user + system), and ganesha.nfsd's, all threads, over the
same read. Before the timed reads, the file is read once over NFS and its SHA-256 checked
against the local one (untimed), so a read that returns the wrong bytes cannot pass as fast.

Everything is removed afterwards (Ganesha, both namespaces and the veths, the temp
folder), also on failure, Ctrl-C or SIGTERM. A run refuses to start while either
namespace or veth name exists (another run, or the leftovers of one killed with SIGKILL).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

STORAGE_NS = "rfbench.stor"
GPU_NS = "rfbench.gpu"
STORAGE_LINK = "rfbench-stor"  # interface names: 15 characters at most
GPU_LINK = "rfbench-gpu"
STORAGE_ADDRESS = "10.255.20.1"  # a private /30 of the benchmark's own; it lives only in the two namespaces
GPU_ADDRESS = "10.255.20.2"
PREFIX_LENGTH = 30
FABRIC_HOST_MTU = 9000  # the roce profile's host MTU, as on the storage network
PSEUDO = "/bench"
FILE_NAME = "data-set.bin"
CHUNK_BYTES = 1 << 20
TOOLS = ("ganesha.nfsd", "nfs-cat", "ip", "nsenter", "unshare", "dd", "mount")
GANESHA_READY_LINE = "NFS SERVER INITIALIZED"
GANESHA_START_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 600.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- arguments and figures (pure)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the data set file (default 1024)")
    parser.add_argument("--rounds", type=int, default=3, help="timed reads of each kind (default 3)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache reads")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"),
                        help="where the temp folder goes; ext4 or another file system Ganesha's VFS FSAL can "
                             "export (default /var/tmp)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.size_mib < 1:
        parser.error("--size-mib: at least 1")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    return args


@dataclass(frozen=True)
class Read:
    """One timed read of the whole file."""

    round: int
    kind: str  # "local" or "nfs"
    cache: str  # "warm" or "cold"
    wall_s: float
    reader_cpu_s: float
    ganesha_cpu_s: float  # 0 for a local read
    size_mib: int
    cached_before: float | None = None  # share of the file in the page cache when the read started (fincore)

    @property
    def mib_per_s(self) -> float:
        return self.size_mib / self.wall_s


def summarize(reads: list[Read]) -> dict[str, dict]:
    """Per cache state: the median and best MiB/s of each kind, and NFS / local of the medians."""
    summary: dict[str, dict] = {}
    for cache in ("warm", "cold"):
        by_kind = {kind: [read for read in reads if read.kind == kind and read.cache == cache]
                   for kind in ("local", "nfs")}
        if not by_kind["local"] or not by_kind["nfs"]:
            continue
        figures = {}
        for kind, samples in by_kind.items():
            figures[kind] = {
                "median_mib_s": statistics.median(read.mib_per_s for read in samples),
                "best_mib_s": max(read.mib_per_s for read in samples),
                "reader_cpu_median_s": statistics.median(read.reader_cpu_s for read in samples),
                "ganesha_cpu_median_s": statistics.median(read.ganesha_cpu_s for read in samples),
            }
        figures["nfs_over_local"] = figures["nfs"]["median_mib_s"] / figures["local"]["median_mib_s"]
        summary[cache] = figures
    return summary


def report(reads: list[Read], summary: dict[str, dict]) -> list[str]:
    header = (f"{'round':>5} {'cache':<5} {'read':<6} {'MiB/s':>9} {'wall s':>8} {'reader CPU s':>13} "
              f"{'ganesha CPU s':>14} {'cached before':>14}")
    lines = [header, "-" * len(header)]
    for read in reads:
        ganesha = f"{read.ganesha_cpu_s:14.2f}" if read.kind == "nfs" else f"{'-':>14}"
        cached = f"{read.cached_before:14.0%}" if read.cached_before is not None else f"{'?':>14}"
        lines.append(f"{read.round:>5} {read.cache:<5} {read.kind:<6} {read.mib_per_s:9.0f} "
                     f"{read.wall_s:8.3f} {read.reader_cpu_s:13.2f} {ganesha} {cached}")
    lines.append("")
    for cache, figures in summary.items():
        local, nfs = figures["local"], figures["nfs"]
        lines.append(f"{cache}: NFS {nfs['median_mib_s']:.0f} MiB/s (best {nfs['best_mib_s']:.0f}), local "
                     f"{local['median_mib_s']:.0f} MiB/s (best {local['best_mib_s']:.0f}): "
                     f"NFS / local = {figures['nfs_over_local']:.2f} (medians)")
    return lines


# ---------------------------------------------------------------- the two nodes


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


def names_in_use() -> list[str]:
    """This benchmark's namespace and veth names that exist already."""
    namespaces = {line.split()[0] for line in run(["ip", "netns", "list"]).stdout.splitlines() if line.strip()}
    links = {link for link in (STORAGE_LINK, GPU_LINK)
             if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0}
    return sorted(({STORAGE_NS, GPU_NS} & namespaces) | links)


def in_namespace(namespace: str, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{namespace}", *argv]


class Bench:
    """The namespaces, Ganesha and the temp folder of one run; `close` removes what was made."""

    def __init__(self, workdir: Path):
        self.created_namespaces: list[str] = []
        self.created_links: list[str] = []
        self.ganesha: subprocess.Popen | None = None
        self.folder = Path(tempfile.mkdtemp(prefix="rfbench-storage-", dir=workdir))
        self.export = self.folder / "export"
        self.data_file = self.export / FILE_NAME
        self.log = self.folder / "ganesha.log"

    # -- plumbing

    def make_nodes(self) -> None:
        for namespace in (STORAGE_NS, GPU_NS):
            run(["ip", "netns", "add", namespace])  # fails if the name exists: never ours to remove then
            self.created_namespaces.append(namespace)
        run(["ip", "link", "add", STORAGE_LINK, "mtu", str(FABRIC_HOST_MTU), "type", "veth",
             "peer", "name", GPU_LINK, "mtu", str(FABRIC_HOST_MTU)])
        self.created_links.append(STORAGE_LINK)
        for link, namespace, address in ((STORAGE_LINK, STORAGE_NS, STORAGE_ADDRESS), (GPU_LINK, GPU_NS, GPU_ADDRESS)):
            run(["ip", "link", "set", link, "netns", namespace])
            run(["ip", "-n", namespace, "address", "add", f"{address}/{PREFIX_LENGTH}", "dev", link])
            run(["ip", "-n", namespace, "link", "set", link, "up"])
            run(["ip", "-n", namespace, "link", "set", "lo", "up"])

    def write_data_set(self, size_mib: int) -> str:
        """SIZE_MIB MiB of random bytes, flushed to disk; returns its SHA-256."""
        self.export.mkdir()
        # Root is squashed to the anonymous user on the export: the path and file must be world-readable.
        for folder in (self.folder, self.export):
            folder.chmod(0o755)
        digest = hashlib.sha256()
        with open(self.data_file, "wb") as out:
            for _ in range(size_mib):
                chunk = os.urandom(CHUNK_BYTES)
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())  # clean pages only: the cold reads can evict them
        self.data_file.chmod(0o644)
        return digest.hexdigest()

    def ganesha_config(self) -> str:
        recovery = self.folder / "recovery"
        recovery.mkdir()
        return (
            "NFS_CORE_PARAM {\n"
            f"  Protocols = 4; NFS_Port = 2049; Bind_Addr = {STORAGE_ADDRESS};\n"
            "  Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false;\n"
            "}\n"
            f"NFSV4 {{ Graceless = true; RecoveryRoot = {recovery}; }}\n"
            "EXPORT {\n"
            f"  Export_Id = 1; Path = {self.export}; Pseudo = {PSEUDO};\n"
            "  Protocols = 4; Transports = TCP; SecType = sys; Squash = root_squash; Access_Type = None;\n"
            "  FSAL { Name = VFS; }\n"
            f"  CLIENT {{ Clients = {GPU_ADDRESS}; Access_Type = RO; }}\n"
            "}\n"
        )

    def start_ganesha(self) -> None:
        """Ganesha in the storage namespace, in a mount namespace of its own whose /run is the
        temp folder's run/: its pid, sockets and callback files stay there, and it cannot reach
        (and register with, or unregister from) the machine's rpcbind. NFSv4 needs none: the
        client goes straight to port 2049."""
        config = self.folder / "ganesha.conf"
        config.write_text(self.ganesha_config())
        private_run = self.folder / "run"
        private_run.mkdir()
        command = (f"mount --bind {private_run} /run && exec ganesha.nfsd -F -f {config} -L {self.log} "
                   f"-N NIV_EVENT -p {private_run / 'ganesha.pid'}")
        with open(self.folder / "ganesha.out", "w") as output:
            # A session of its own: Ctrl-C reaches only this script, which then stops Ganesha in order.
            self.ganesha = subprocess.Popen(
                in_namespace(STORAGE_NS, ["unshare", "--mount", "--propagation", "private", "sh", "-c", command]),
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + GANESHA_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.ganesha.poll() is not None:
                raise RuntimeError(f"ganesha.nfsd exited ({self.ganesha.returncode}) while starting:\n{self.tail()}")
            if self.log.exists() and GANESHA_READY_LINE in self.log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"ganesha.nfsd not ready after {GANESHA_START_TIMEOUT_S:.0f} s:\n{self.tail()}")

    def tail(self) -> str:
        texts = [path.read_text(errors="replace") for path in (self.folder / "ganesha.out", self.log) if path.exists()]
        return "\n".join(text[-3000:] for text in texts)

    def ganesha_cpu_s(self) -> float:
        """User + system seconds of ganesha.nfsd so far, all its threads (the Popen'd process is
        ganesha itself: nsenter, unshare and sh each exec the next)."""
        fields = Path(f"/proc/{self.ganesha.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def close(self) -> list[str]:
        """Remove what this run made; returns what could not be removed."""
        problems = []
        if self.ganesha is not None and self.ganesha.poll() is None:
            self.ganesha.terminate()
            try:
                self.ganesha.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.ganesha.kill()
                self.ganesha.wait()
        for namespace in reversed(self.created_namespaces):  # deleting a namespace deletes the veth end in it
            done = subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, text=True)
            if done.returncode != 0:
                problems.append(f"ip netns delete {namespace}: {done.stderr.strip()}")
        for link in self.created_links:  # only still here if it was never moved into its namespace
            if subprocess.run(["ip", "link", "show", link], capture_output=True).returncode == 0:
                subprocess.run(["ip", "link", "delete", link], capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.folder.exists():
            problems.append(f"could not remove {self.folder}")
        return problems

    # -- reading

    def evict(self) -> None:
        """Drop the file's pages from the page cache (only this file's: the machine is shared)."""
        fd = os.open(self.data_file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def resident_fraction(self) -> float | None:
        """How much of the file is in the page cache (fincore), or None without fincore."""
        if shutil.which("fincore") is None:
            return None
        done = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(self.data_file)],
                              capture_output=True, text=True)
        if done.returncode != 0 or not done.stdout.strip():
            return None
        return int(done.stdout.split()[0]) / self.data_file.stat().st_size

    def url(self) -> str:
        return f"nfs://{STORAGE_ADDRESS}{PSEUDO}/{FILE_NAME}?version=4"

    def nfs_sha256(self) -> str:
        process = subprocess.Popen(in_namespace(GPU_NS, ["nfs-cat", self.url()]), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        digest = hashlib.sha256()
        while chunk := process.stdout.read(CHUNK_BYTES):
            digest.update(chunk)
        stderr = process.stderr.read().decode(errors="replace")
        if process.wait() != 0:
            raise RuntimeError(f"nfs-cat {self.url()} failed ({process.returncode}): {stderr.strip()}\n{self.tail()}")
        return digest.hexdigest()

    def read(self, round_number: int, kind: str, cache: str, size_mib: int) -> Read:
        if cache == "cold":
            self.evict()
        cached_before = self.resident_fraction()
        if kind == "local":
            argv = in_namespace(STORAGE_NS, ["dd", f"if={self.data_file}", "of=/dev/null", "bs=1M"])
        else:
            argv = in_namespace(GPU_NS, ["nfs-cat", self.url()])
        ganesha_before = self.ganesha_cpu_s()
        wall_s, cpu_s, stderr = timed(argv)
        ganesha_s = self.ganesha_cpu_s() - ganesha_before if kind == "nfs" else 0.0
        if kind == "local" and f"{size_mib * CHUNK_BYTES} bytes" not in stderr:
            raise RuntimeError(f"dd did not read {size_mib * CHUNK_BYTES} bytes: {stderr.strip()}")
        return Read(round_number, kind, cache, wall_s, cpu_s, ganesha_s, size_mib, cached_before)


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the process, its stderr) of one run with stdout to /dev/null; any failure raises."""
    with tempfile.TemporaryFile("w+") as errors, open(os.devnull, "w") as null:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=null, stderr=errors)
        watchdog = threading.Timer(READ_TIMEOUT_S, process.kill)
        watchdog.start()
        try:
            _pid, status, usage = os.wait4(process.pid, 0)  # wait4: the child's own CPU time
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            watchdog.cancel()
        wall_s = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        stderr = errors.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({process.returncode}): {stderr.strip()}")
    return wall_s, usage.ru_utime + usage.ru_stime, stderr


# ---------------------------------------------------------------- the run


def measure(bench: Bench, args: argparse.Namespace) -> list[Read]:
    reads: list[Read] = []
    for cache in ["warm"] if args.no_cold else ["warm", "cold"]:
        for round_number in range(1, args.rounds + 1):
            for kind in ("local", "nfs") if round_number % 2 else ("nfs", "local"):
                reads.append(bench.read(round_number, kind, cache, args.size_mib))
            print(f"  {cache} round {round_number}/{args.rounds} done", flush=True)
    return reads


def machine_line() -> str:
    versions = ""
    if shutil.which("dpkg-query"):
        versions = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}, ", "nfs-ganesha", "libnfs-utils"],
                                  capture_output=True, text=True).stdout.strip(", ")
    machine = f"{platform.node()}: {os.cpu_count()} CPUs, Linux {platform.release()}"
    return f"{machine}; {versions}" if versions else machine


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the cleanup runs."""
    def handler(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench_storage.py needs root (it makes network and mount namespaces): run it with sudo",
              file=sys.stderr)
        return 2
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        print(f"bench_storage.py needs {', '.join(missing)} (nfs-ganesha + nfs-ganesha-vfs, libnfs-utils, "
              f"iproute2, util-linux, coreutils)", file=sys.stderr)
        return 2
    in_use = names_in_use()
    if in_use:
        print(f"bench_storage.py: {' and '.join(in_use)} {'exists' if len(in_use) == 1 else 'exist'} already: "
              f"another run of this benchmark, or the leftovers of one that was killed. Nothing was touched. "
              f"If no run is going on, remove them: `ip netns delete {STORAGE_NS}`, `ip netns delete {GPU_NS}`, "
              f"`ip link delete {STORAGE_LINK}`.", file=sys.stderr)
        return 1
    file_system = subprocess.run(["stat", "-f", "-c", "%T", str(args.workdir)], capture_output=True,
                                 text=True).stdout.strip()
    unusable = {"": "not found", "overlayfs": "overlayfs, which Ganesha's VFS FSAL cannot export",
                "tmpfs": "tmpfs, which lives in memory: no read from it is cold"}
    if file_system in unusable:
        print(f"--workdir {args.workdir}: {unusable[file_system]}. Name a folder on ext4 or xfs.", file=sys.stderr)
        return 2
    stop_on_sigterm()
    load_before = os.getloadavg()
    bench = Bench(args.workdir)
    try:
        print(f"writing {args.size_mib} MiB to {bench.data_file} ({file_system}) ...", flush=True)
        local_sha256 = bench.write_data_set(args.size_mib)
        bench.make_nodes()
        started = time.monotonic()
        bench.start_ganesha()
        ganesha_start_s = time.monotonic() - started
        print(f"ganesha.nfsd ready in {ganesha_start_s:.1f} s; checking the bytes over NFS ...", flush=True)
        if bench.nfs_sha256() != local_sha256:
            raise RuntimeError("the file read over NFS does not match the local file's SHA-256")
        reads = measure(bench, args)
    except KeyboardInterrupt:
        print("interrupted; cleaning up", file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.CalledProcessError) as error:
        detail = f"{error}\n{error.stderr}" if isinstance(error, subprocess.CalledProcessError) else str(error)
        print(f"bench_storage.py failed: {detail}", file=sys.stderr)
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the cleanup short
            signal.signal(signum, signal.SIG_IGN)
        problems = bench.close()
        for problem in problems:
            print(f"cleanup: {problem}", file=sys.stderr)
    load_after = os.getloadavg()
    summary = summarize(reads)
    lines = [f"{args.size_mib} MiB data set, {args.rounds} rounds; {machine_line()}",
             f"veth pair at MTU {FABRIC_HOST_MTU} between two namespaces; NFSv4 (Ganesha, VFS FSAL) read by "
             f"nfs-cat vs dd bs=1M locally, both into /dev/null; SHA-256 over NFS matched",
             f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after"]
    lines += ["", *report(reads, summary)]
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"size_mib": args.size_mib, "rounds": args.rounds, "summary": summary,
                                         "reads": [asdict(read) for read in reads], "report": lines}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
