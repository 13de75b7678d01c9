"""Fleet IPMI benchmark: power status and power on of 200 simulated BMCs, three ways.

    sudo .venv/bin/python bench/bench_ipmi.py                    # 200 BMCs, 3 rounds, ~2 minutes
    sudo .venv/bin/python bench/bench_ipmi.py --bmcs 50 --rounds 1 --no-sequential   # a quick look

Needs root (network namespaces), ipmi_sim (apt: openipmi), ipmipower (freeipmi-tools)
and ipmitool. Brings up BMCS ipmi_sim instances, each at its own address on its own OOB
bridge (site `ipmibench`, addresses in 10.63.0.0/16 only), and on the same BMCs, in the
same run, times:

- rackform:   rackform.ipmi.Fleet (power_status / power "on", each change confirmed by
              reading it back) in a child process, imports excluded, as the provision
              stage and the BareMetalNode provider call it;
- ipmipower:  FreeIPMI `ipmipower -D LAN_2_0 -W opensesspriv --stat / --on`, the C tool
              built for fleet power control (one socket per host, all polled at once);
              `--on` only sends the command, so power on is also timed with
              `--wait-until-on` (ipmipower+wait), which reads the state back as rackform does;
- rackform 1 cmd: rackform's sessions sending only the Chassis Control `ipmipower --on`
              sends (no read before, no read back): the same work, to compare transports;
- sequential: a loop of `ipmitool -I lanplus -C 3 chassis power status / on`, one BMC
              after the other (the shell loop people write).

Then one power on step by step, BMC after BMC (login, read, command, read back, logout),
to show where a power on's time goes. Also `rackform bmc power SITE status` as a whole process (start-up, imports, site load).
Each parallel figure is the best of ROUNDS (median beside it); the tools take turns to go
first. CPU is the controller's (rackform: the fleet call's own process time, all threads;
the tools: user + system of the whole process), the steadier figure on a shared machine. Power on starts from every host off (set, untimed, before each timed run).
Peak memory is each controller process's maximum RSS (GNU time's %M). Targets: rackform at or
under 1.0x of ipmipower like for like, at least 10x faster than the sequential loop.

ipmi_sim runs its chassis hook as a new process for every chassis command (status
included), and here all the BMCs share the controller's cores, where real BMCs each have
their own. So the hook is a 25-line C program (state in a file; `--hook sh` a shell
script, `--hook lab` the lab's Python hook): the benchmark measures the controller, and
the BMC side should answer about as quickly as a real BMC. Everything is removed
afterwards (BMCs, namespaces, bridge, files), also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))

SITE = "ipmibench"
OOB_PREFIX = "10.63.0.0/17"  # the BMCs; 10.63.0.1 is the bridge (the controller)
MANAGEMENT_PREFIX = "10.63.128.0/17"  # in the design only: nothing is plumbed there
FIRST_HOST = 10
LOCK_FILE = Path(tempfile.gettempdir()) / f"rackform-bench-{SITE}.lock"
TOOLS = ("ipmi_sim", "ipmipower", "ipmitool", "nsenter", "setsid", "ip")
TIME = shutil.which("time", path="/usr/bin:/bin")  # GNU time, for each controller's peak RSS
CC = shutil.which("cc")
STATUS_TARGET_RATIO = 1.0  # like-for-like: at or under ipmipower
COMMAND_ONLY = "on-command-only"
"""rackform sending the one Chassis Control that `ipmipower --on` sends, nothing else (transport parity)."""
CHASSIS_CONTROL = (0x00, 0x02)
BREAKDOWN_BMCS = 40
SEQUENTIAL_TARGET_SPEEDUP = 10.0

HOOK_C = r"""
/* ipmi_sim chassis_control for the benchmark: the power state is a file in the BMC's directory. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 1;
    if (strcmp(argv[1], "get") == 0) {
        for (int i = 2; i < argc; i++) {
            if (strcmp(argv[i], "power") == 0) printf("power:%d\n", access("power.on", F_OK) == 0);
            else if (strcmp(argv[i], "boot") == 0) printf("boot:default\n");
        }
        return 0;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        int flag = strcmp(argv[i + 1], "1") == 0;
        if (flag && (strcmp(argv[i], "power") == 0 || strcmp(argv[i], "reset") == 0))
            close(open("power.on", O_CREAT | O_WRONLY, 0600));
        else if ((!flag && strcmp(argv[i], "power") == 0) || (flag && strcmp(argv[i], "shutdown") == 0))
            unlink("power.on");
    }
    return 0;
}
"""

HOOK = """\
# ipmi_sim chassis_control for the benchmark: the power state is a file in the BMC's directory.
command=$1; shift
if [ "$command" = get ]; then
  for name; do
    case $name in
      power) if [ -e power.on ]; then echo power:1; else echo power:0; fi ;;
      boot) echo boot:default ;;
    esac
  done
  exit 0
fi
while [ $# -ge 2 ]; do
  case "$1 $2" in
    "power 1"|"reset 1") : > power.on ;;
    "power 0"|"shutdown 1") rm -f power.on ;;
  esac
  shift 2
done
"""


# ---------------------------------------------------------------- the simulated fleet


def host_address(index: int) -> str:
    """BMC n of the bench: 10.63.0.10, 10.63.0.11 ... (a /17 holds 32k)."""
    offset = FIRST_HOST + index
    return f"10.63.{offset // 256}.{offset % 256}"


def write_site(root: Path, count: int) -> list[str]:
    """A site of `count` HCI nodes (4 per block, 20 blocks per rack), one BMC each."""
    shutil.copytree(REPO_ROOT / "topologies" / "blocks", root / "topologies" / "blocks")
    shutil.copy(REPO_ROOT / "topologies" / "versions.yaml", root / "topologies" / "versions.yaml")
    (root / "topologies" / "sites").mkdir(parents=True)
    blocks = -(-count // 4)
    lines = [f"site: {SITE}", "description: IPMI benchmark - one BMC per HCI node", "racks:"]
    hosts: list[str] = []
    for block in range(blocks):
        if block % 20 == 0:
            lines += [f"  - name: r{block // 20 + 1}", "    power_budget_w: 100000", "    devices:"]
        names = [f"n{n + 1:04d}" for n in range(block * 4, min(block * 4 + 4, count))]
        hosts += names
        lines.append(f"      - {{name: hci-{block + 1:03d}, block: hci, position_u: {1 + 2 * (block % 20)}, "
                     f"hosts: [{', '.join(names)}]}}")
    lines += ["networks:", f"  - {{name: mgmt, purpose: management, prefix: {MANAGEMENT_PREFIX}}}",
              f"  - {{name: oob, purpose: oob, prefix: {OOB_PREFIX}}}"]
    (root / "topologies" / "sites" / f"{SITE}.yaml").write_text("\n".join(lines) + "\n")
    inventory = root / "inventories" / SITE
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text("all:\n  hosts:\n" + "".join(f"    {h}:\n" for h in hosts))
    for index, host in enumerate(hosts):
        offset = FIRST_HOST + index
        (inventory / "host_vars" / f"{host}.yml").write_text(
            f"management_address: 10.63.{128 + offset // 256}.{offset % 256}\nbmc_address: {host_address(index)}\n")
    return hosts


def hook_command(root: Path, kind: str) -> str | None:
    """The chassis_control command line for `kind` (c, sh or lab: None keeps the lab's own)."""
    if kind == "c":
        source = root / "chassis-hook.c"
        source.write_text(HOOK_C)
        binary = root / "chassis-hook"
        for static in (["-static"], []):  # a static binary skips the dynamic loader on every call
            built = subprocess.run([CC, "-O2", *static, "-o", str(binary), str(source)], capture_output=True)
            if built.returncode == 0:
                return str(binary)
        kind = "sh"
    if kind == "sh":
        script = root / "chassis-hook.sh"
        script.write_text(HOOK)
        return f"/bin/sh {script}"
    return None


def start_fleet(root: Path, state_dir: Path, hook_kind: str):
    from rackform.lab import bmc
    from rackform.model.loader import load_site

    site = load_site(SITE, root)
    bmc.stop_bmcs(site, state_dir)
    command = hook_command(root, hook_kind)
    if command is not None:
        bmc.chassis_control_command = lambda *_args: command
    started = time.monotonic()
    infos = bmc.start_bmcs(site, state_dir, driver="process")
    return site, infos, time.monotonic() - started


def stop_fleet(site, state_dir: Path) -> None:
    from rackform.lab import bmc

    bmc.stop_bmcs(site, state_dir)


# ---------------------------------------------------------------- measuring a process


def run_with_rusage(argv: list[str], env: dict[str, str] | None = None, stdin_text: str | None = None) -> dict:
    """Wall time, exit status, output and peak RSS of one child process.

    The peak comes from GNU time (`/usr/bin/time -f %M`): a child forked straight from
    this Python process would report Python's own RSS as its high-water mark (Linux keeps
    ru_maxrss across exec), which inflated ipmipower's and ipmitool's figures to ~38 MiB.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as usage_file:
        wrapped = [TIME, "-f", "%M %U %S", "-o", usage_file.name, *argv] if TIME else argv
        started = time.monotonic()
        process = subprocess.run(wrapped, input=stdin_text, capture_output=True, text=True, env=env, timeout=600)
        wall = time.monotonic() - started
        lines = usage_file.read().strip().splitlines()
    fields = lines[-1].split() if lines else []
    peak_kib, cpu_s = (int(fields[0]), float(fields[1]) + float(fields[2])) if len(fields) == 3 else (0, 0.0)
    return {"wall_s": wall, "rc": process.returncode, "stdout": process.stdout, "stderr": process.stderr,
            "peak_rss_mib": peak_kib / 1024, "cpu_s": cpu_s}


# ---------------------------------------------------------------- the three controllers


def rackform_fleet(operation: str, addresses: list[str], parallel: int) -> dict:
    """rackform.ipmi in a fresh child process; the child times the fleet call only."""
    result = run_with_rusage([sys.executable, str(Path(__file__).resolve()), "--child", operation,
                              "--parallel", str(parallel)], stdin_text=json.dumps(addresses))
    if result["rc"] != 0:
        raise RuntimeError(f"rackform child failed: {result['stderr'][-2000:]}")
    figures = json.loads(result["stdout"])
    return {**figures, "process_wall_s": result["wall_s"], "process_cpu_s": result["cpu_s"],
            "peak_rss_mib": result["peak_rss_mib"]}


def rackform_breakdown(addresses: list[str]) -> dict:
    """Median seconds of each step of a power on, BMC after BMC (BMCs left off): {bmcs, steps}."""
    result = run_with_rusage([sys.executable, str(Path(__file__).resolve()), "--child", "breakdown"],
                             stdin_text=json.dumps(addresses))
    if result["rc"] != 0:
        raise RuntimeError(f"rackform breakdown failed: {result['stderr'][-2000:]}")
    return json.loads(result["stdout"])


def child_main(operation: str, parallel: int) -> int:
    """In the child: import, then time one fleet call over the addresses read from stdin."""
    from rackform.ipmi.credentials import factory_credentials
    from rackform.ipmi.fleet import BmcTarget, Fleet

    addresses = json.loads(sys.stdin.read())
    targets = [BmcTarget(f"bmc-{index}", address) for index, address in enumerate(addresses)]
    if operation == "breakdown":
        return child_breakdown(targets)
    fleet = Fleet(factory_credentials(), max_parallel=parallel)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu_started = time.perf_counter(), time.process_time()
    if operation == "status":
        results = fleet.power_status(targets)
    elif operation == COMMAND_ONLY:
        results = fleet.run_steps(targets, lambda client: client.session.command_steps(*CHASSIS_CONTROL, b"\x01"))
    else:
        results = fleet.power(targets, operation)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(json.dumps({"elapsed_s": elapsed, "cpu_s": cpu, "ok": sum(r.ok for r in results),
                      "failures": [r.describe() for r in results if not r.ok][:5],
                      "rss_after_imports_mib": rss_before / 1024}))
    return 0


def child_breakdown(targets) -> int:
    """In the child: one BMC after another, the time of each step of a power on (no contention)."""
    from rackform.ipmi.client import BmcClient
    from rackform.ipmi.credentials import factory_credentials
    from rackform.ipmi.session import LanSession

    login = factory_credentials()("any").logins()[0]
    steps: dict[str, list[float]] = {}

    def timed(step: str, call):
        started = time.perf_counter()
        value = call()
        steps.setdefault(step, []).append(time.perf_counter() - started)
        return value

    for target in targets[:BREAKDOWN_BMCS]:
        session = LanSession(target.address, login)
        timed("login (probe, open session, RAKP 1-4, privilege)", session.open)
        client = BmcClient(session)
        timed("Get Chassis Status (before)", client.power_state)
        timed("Chassis Control: power on", lambda: session.command(*CHASSIS_CONTROL, b"\x01"))
        timed("Get Chassis Status (read back)", client.power_state)
        timed("Close Session", session.close)
        session = LanSession(target.address, login)
        session.open()
        client = BmcClient(session)
        client.set_power("off")  # untimed: ready for the next round
        session.close()
    print(json.dumps({"bmcs": min(len(targets), BREAKDOWN_BMCS),
                      "steps": {step: statistics.median(times) for step, times in steps.items()}}))
    return 0


def ipmipower(operation: str, addresses: list[str], config_file: Path, confirm: bool = False) -> dict:
    """`--on` alone only sends the command; with `confirm`, `--wait-until-on` reads the state back."""
    flags = [{"status": "--stat", "on": "--on", "off": "--off"}[operation]]
    if confirm and operation in ("on", "off"):
        flags.append(f"--wait-until-{operation}")
    result = run_with_rusage(["ipmipower", "-D", "LAN_2_0", "-W", "opensesspriv", "-h", ",".join(addresses),
                              f"--config-file={config_file}", *flags])
    answered = sum(1 for line in result["stdout"].splitlines() if line.split(": ", 1)[-1] in ("on", "off", "ok"))
    return {"elapsed_s": result["wall_s"], "cpu_s": result["cpu_s"], "ok": answered,
            "peak_rss_mib": result["peak_rss_mib"], "failures": [line for line in result["stdout"].splitlines()
                         if line.split(": ", 1)[-1] not in ("on", "off", "ok")][:5]}


def ipmitool_loop(operation: str, addresses: list[str]) -> dict:
    """One `ipmitool -I lanplus -C 3` after the other; password from the environment (-E)."""
    env = {**os.environ, "IPMI_PASSWORD": "ADMIN"}
    started = time.monotonic()
    ok, peak, cpu = 0, 0.0, 0.0
    for address in addresses:
        result = run_with_rusage(["ipmitool", "-I", "lanplus", "-C", "3", "-H", address, "-U", "ADMIN", "-E",
                                  "chassis", "power", operation], env=env)
        ok += result["rc"] == 0
        peak, cpu = max(peak, result["peak_rss_mib"]), cpu + result["cpu_s"]
    return {"elapsed_s": time.monotonic() - started, "cpu_s": cpu, "ok": ok, "peak_rss_mib": peak, "failures": []}


def rackform_cli(root: Path) -> dict:
    """`rackform bmc power SITE status --factory` as one process: what a person waits for."""
    script = ("import sys; from rackform.commands import bmc; import argparse\n"
              "p = argparse.ArgumentParser(); bmc.add_arguments(p)\n"
              "sys.exit(bmc.run(p.parse_args(sys.argv[1:])))\n")
    result = run_with_rusage([sys.executable, "-c", script, "power", SITE, "status", "--root", str(root),
                              "--factory"])
    return {"elapsed_s": result["wall_s"], "cpu_s": result["cpu_s"], "ok": int(result["rc"] == 0),
            "peak_rss_mib": result["peak_rss_mib"],
            "failures": [] if result["rc"] == 0 else [result["stderr"][-300:]]}


# ---------------------------------------------------------------- the run


def set_all(addresses: list[str], state: str, parallel: int) -> None:
    """Untimed: every host to `state`, checked."""
    figures = rackform_fleet(state, addresses, parallel)
    if figures["ok"] != len(addresses):
        raise RuntimeError(f"could not set every host {state}: {figures['failures']}")


def measure(args, addresses: list[str], config_file: Path, root: Path) -> dict:
    runs: dict[str, dict[str, list[dict]]] = {"status": {}, "on": {}}
    parallel_tools = {
        "rackform": lambda op: rackform_fleet(op, addresses, args.parallel),
        "ipmipower": lambda op: ipmipower(op, addresses, config_file),
        "ipmipower+wait": lambda op: ipmipower(op, addresses, config_file, confirm=True),
        "rackform 1 cmd": lambda op: rackform_fleet(COMMAND_ONLY, addresses, args.parallel),
    }
    status_tools = ("rackform", "ipmipower")  # ipmipower+wait and "1 cmd" are power-on variants
    # Warm-up (untimed): ARP entries and each BMC's first chassis hook call, for every tool alike.
    ipmipower("status", addresses, config_file)
    rackform_fleet("status", addresses, args.parallel)
    for round_number in range(args.rounds):
        order = list(parallel_tools) if round_number % 2 == 0 else list(reversed(parallel_tools))
        for tool in order:
            if tool in status_tools:
                runs["status"].setdefault(tool, []).append(parallel_tools[tool]("status"))
        for tool in order:
            set_all(addresses, "off", args.parallel)
            runs["on"].setdefault(tool, []).append(parallel_tools[tool]("on"))
        print(f"  round {round_number + 1}/{args.rounds} done", flush=True)
    runs["status"]["rackform CLI"] = [rackform_cli(root) for _ in range(args.rounds)]
    set_all(addresses, "off", args.parallel)
    runs["breakdown"] = rackform_breakdown(addresses)
    if not args.no_sequential:
        runs["status"]["ipmitool loop"] = [ipmitool_loop("status", addresses)]
        set_all(addresses, "off", args.parallel)
        runs["on"]["ipmitool loop"] = [ipmitool_loop("on", addresses)]
    return runs


def summarize(runs: dict, count: int) -> dict:
    summary = {"breakdown": runs.get("breakdown", {})}
    for operation, by_tool in runs.items():
        if operation == "breakdown":
            continue
        summary[operation] = {}
        for tool, samples in by_tool.items():
            times = [sample["elapsed_s"] for sample in samples]
            summary[operation][tool] = {
                "best_s": min(times), "median_s": statistics.median(times), "runs": len(times),
                "cpu_median_s": statistics.median(sample["cpu_s"] for sample in samples),
                "all_answered": all(sample["ok"] == (1 if tool == "rackform CLI" else count) for sample in samples),
                "peak_rss_mib": max(sample["peak_rss_mib"] for sample in samples),
                "failures": next((s["failures"] for s in samples if s["failures"]), []),
            }
            if tool == "rackform":
                summary[operation][tool]["process_wall_best_s"] = min(s["process_wall_s"] for s in samples)
                summary[operation][tool]["rss_after_imports_mib"] = samples[0]["rss_after_imports_mib"]
    return summary


def report(summary: dict, count: int, start_s: float, hook: str) -> list[str]:
    lines = [f"{count} BMCs (ipmi_sim, one address each, {hook} chassis hook), started in {start_s:.1f} s; "
             f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", ""]
    header = (f"{'operation':<10} {'controller':<15} {'best s':>8} {'median s':>9} {'CPU s':>7} "
              f"{'peak RSS MiB':>13}  answered")
    lines += [header, "-" * len(header)]
    for operation, by_tool in summary.items():
        if operation == "breakdown":
            continue
        for tool, figures in by_tool.items():
            lines.append(f"{operation:<10} {tool:<15} {figures['best_s']:>8.3f} {figures['median_s']:>9.3f} "
                         f"{figures['cpu_median_s']:>7.3f} {figures['peak_rss_mib']:>13.1f}  "
                         f"{'all' if figures['all_answered'] else 'NOT ALL'}")
    lines.append("")
    comparisons = [("rackform", "ipmipower"), ("rackform", "ipmipower+wait"), ("rackform 1 cmd", "ipmipower")]
    for operation, by_tool in summary.items():
        if operation == "breakdown":
            continue
        ours = by_tool["rackform"]["best_s"]
        for our_tool, reference_tool in comparisons:
            if our_tool not in by_tool or reference_tool not in by_tool:
                continue
            ratio = by_tool[our_tool]["best_s"] / by_tool[reference_tool]["best_s"]
            verdict = "meets" if ratio <= STATUS_TARGET_RATIO else "MISSES"
            lines.append(f"{operation}: {our_tool} / {reference_tool} = {ratio:.2f}x "
                         f"({verdict} the {STATUS_TARGET_RATIO}x target)")
        if "ipmitool loop" in by_tool:
            speedup = by_tool["ipmitool loop"]["best_s"] / ours
            verdict = "meets" if speedup >= SEQUENTIAL_TARGET_SPEEDUP else "MISSES"
            lines.append(f"{operation}: sequential ipmitool / rackform = {speedup:.1f}x "
                         f"({verdict} the {SEQUENTIAL_TARGET_SPEEDUP:.0f}x target)")
    if summary["breakdown"]:
        breakdown = summary["breakdown"]
        lines += ["", f"one power on, step by step (median of {breakdown['bmcs']} BMCs, one at a time):"]
        lines += [f"  {step:<52} {seconds * 1000:6.2f} ms" for step, seconds in breakdown["steps"].items()]
    rackform = summary["status"]["rackform"]
    lines.append(f"rackform controller: {rackform['rss_after_imports_mib']:.1f} MiB after imports, "
                 f"{rackform['peak_rss_mib']:.1f} MiB peak; whole process (start-up + imports + run) "
                 f"{rackform['process_wall_best_s']:.2f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bmcs", type=int, default=200, help="simulated BMCs (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per parallel controller (default 3)")
    parser.add_argument("--parallel", type=int, default=None, help="rackform fleet workers (default: one per BMC)")
    parser.add_argument("--no-sequential", action="store_true", help="skip the (slow) sequential ipmitool loop")
    parser.add_argument("--hook", choices=("c", "sh", "lab"), default="c" if CC else "sh",
                        help="the BMCs' chassis hook: a small C program (default when cc is installed), a shell "
                             "script, or the lab's own Python hook")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--child", choices=("status", "on", "off", COMMAND_ONLY, "breakdown"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child, args.parallel or 256)
    args.parallel = args.parallel or args.bmcs
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        print(f"needs root and {', '.join(TOOLS)} (missing: {', '.join(missing) or 'root'})", file=sys.stderr)
        return 2
    if not 1 <= args.bmcs <= 30000:
        print("--bmcs: 1 to 30000", file=sys.stderr)
        return 2
    with open(LOCK_FILE, "w") as lock, tempfile.TemporaryDirectory(prefix="rackform-bench-ipmi-") as scratch:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root = Path(scratch)
        write_site(root, args.bmcs)
        state_dir = root / "state"
        config_file = root / "freeipmi.conf"
        config_file.touch(mode=0o600)
        config_file.write_text("username ADMIN\npassword ADMIN\n")
        site = None
        try:
            print(f"starting {args.bmcs} BMCs ...", flush=True)
            site, infos, start_s = start_fleet(root, state_dir, args.hook)
            addresses = [str(info.address) for info in infos]
            runs = measure(args, addresses, config_file, root)
        finally:
            if site is not None:
                stop_fleet(site, state_dir)
            else:  # a start that failed half-way: sweep by name
                from rackform.lab import bmc

                bmc.stop_bmcs(SITE, state_dir)
    summary = summarize(runs, args.bmcs)
    lines = report(summary, args.bmcs, start_s, args.hook)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"bmcs": args.bmcs, "hook": args.hook, "summary": summary, "report": lines},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
