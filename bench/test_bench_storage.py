"""The storage benchmark's figures and its refusals, without root or namespaces.

Run: .venv/bin/pytest -q bench/test_bench_storage.py   (not under tests/, so `make test` stays fast)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_storage  # noqa: E402
from bench_storage import Read, parse_args, report, summarize  # noqa: E402


def reads_of(cache: str, local_s: list[float], nfs_s: list[float], size_mib: int = 1024) -> list[Read]:
    return ([Read(n, "local", cache, s, 0.1, 0.0, size_mib) for n, s in enumerate(local_s, 1)]
            + [Read(n, "nfs", cache, s, 0.2, 0.8, size_mib) for n, s in enumerate(nfs_s, 1)])


def test_ratio_is_nfs_over_local_of_the_medians():
    # local 1024 MiB in 0.5 / 1 / 4 s: median 1024 MiB/s; NFS in 2 / 4 / 8 s: median 256 MiB/s
    summary = summarize(reads_of("warm", [0.5, 1.0, 4.0], [2.0, 4.0, 8.0]))
    assert summary["warm"]["local"]["median_mib_s"] == pytest.approx(1024)
    assert summary["warm"]["local"]["best_mib_s"] == pytest.approx(2048)
    assert summary["warm"]["nfs"]["median_mib_s"] == pytest.approx(256)
    assert summary["warm"]["nfs_over_local"] == pytest.approx(0.25)
    assert summary["warm"]["nfs"]["ganesha_cpu_median_s"] == pytest.approx(0.8)
    assert "cold" not in summary  # --no-cold: no cold row rather than a ratio of nothing


def test_report_gives_each_read_and_the_ratio_per_cache_state():
    reads = reads_of("warm", [1.0], [4.0]) + reads_of("cold", [2.0], [4.0])
    text = "\n".join(report(reads, summarize(reads)))
    assert "NFS / local = 0.25 (medians)" in text
    assert "NFS / local = 0.50 (medians)" in text
    assert len([line for line in text.splitlines() if " nfs " in line]) == 2


@pytest.mark.parametrize("argv", [["--size-mib", "0"], ["--rounds", "0"]])
def test_nonsense_sizes_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert "at least 1" in capsys.readouterr().err


def test_defaults_are_a_gib_and_three_rounds():
    args = parse_args([])
    assert (args.size_mib, args.rounds, args.no_cold) == (1024, 3, False)


def test_needs_root(monkeypatch, capsys):
    monkeypatch.setattr(bench_storage.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(bench_storage, "Bench", None)  # nothing may be made
    assert bench_storage.main(["--size-mib", "1"]) == 2
    assert "needs root" in capsys.readouterr().err


def test_refuses_when_its_names_exist_and_touches_nothing(monkeypatch, capsys):
    monkeypatch.setattr(bench_storage.os, "geteuid", lambda: 0)
    monkeypatch.setattr(bench_storage.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(bench_storage, "names_in_use", lambda: ["rfbench.gpu"])
    monkeypatch.setattr(bench_storage, "Bench", None)
    assert bench_storage.main(["--size-mib", "1"]) == 1
    error = capsys.readouterr().err
    assert "rfbench.gpu exists already" in error and "Nothing was touched" in error
