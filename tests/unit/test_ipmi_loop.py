"""Many BMCs in one thread (rackform.ipmi.loop): the fleet's power status and power changes
run every BMC's session side by side without a thread per BMC, within max_parallel, with
the same results; the loop itself starts tasks in order, resumes them on datagrams,
deadlines and errors."""

from __future__ import annotations

import socket
import time

import pytest

from rackform.ipmi import fleet as fleet_module
from rackform.ipmi import loop
from rackform.ipmi.credentials import factory_credentials
from rackform.ipmi.errors import Reason
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.ipmi.fleet import BmcLocks, BmcTarget, Fleet, RetryPolicy
from rackform.ipmi.module_utils import load
from rackform.ipmi.session import LanSession, Timeouts

REPLY_DELAY_S = 0.03
BMCS = 6


@pytest.fixture()
def slow_fakes():
    started = [FakeBmc(FakeBmcConfig(reply_delay_s=REPLY_DELAY_S)) for _ in range(BMCS)]
    for fake in started:
        fake.start()
    yield started
    for fake in started:
        fake.stop()


@pytest.fixture()
def no_threads(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a thread pool was started")

    monkeypatch.setattr(fleet_module, "ThreadPoolExecutor", refuse)


def targets_of(fakes) -> list[BmcTarget]:
    return [BmcTarget(f"n{index}", fake.address, fake.port) for index, fake in enumerate(fakes)]


def one_bmc_status_s(fake) -> float:
    started = time.monotonic()
    with LanSession(fake.address, factory_credentials()("n").logins()[0], port=fake.port) as session:
        session.command(0x00, 0x01)
    return time.monotonic() - started


def test_power_status_of_many_bmcs_runs_side_by_side_in_one_thread(slow_fakes, no_threads):
    alone_s = one_bmc_status_s(slow_fakes[0])
    started = time.monotonic()
    results = Fleet(factory_credentials(), locks=BmcLocks()).power_status(targets_of(slow_fakes))
    elapsed = time.monotonic() - started
    assert [(r.node, r.value) for r in results] == [(f"n{i}", "off") for i in range(BMCS)]
    assert elapsed < alone_s * BMCS / 2, f"{elapsed:.2f} s for {BMCS} BMCs, one alone {alone_s:.2f} s"


def test_power_on_in_one_thread_reads_the_change_back(slow_fakes, no_threads):
    results = Fleet(factory_credentials(), locks=BmcLocks()).power(targets_of(slow_fakes), "on")
    assert all(r.ok and r.value.before == "off" and r.value.after == "on" and r.value.changed for r in results)
    assert {fake.power for fake in slow_fakes} == {"on"}


def test_max_parallel_bounds_the_bmcs_talked_to_at_once(slow_fakes, no_threads):
    alone_s = one_bmc_status_s(slow_fakes[0])
    started = time.monotonic()
    results = Fleet(factory_credentials(), locks=BmcLocks(), max_parallel=1).power_status(targets_of(slow_fakes))
    assert all(r.ok for r in results)
    assert time.monotonic() - started > alone_s * BMCS * 0.7  # one after the other


def test_a_silent_bmc_fails_alone_after_its_retries(slow_fakes, no_threads):
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))  # bound, never answers
    try:
        targets = [*targets_of(slow_fakes[:2]), BmcTarget("quiet", "127.0.0.1", silent.getsockname()[1])]
        fleet = Fleet(factory_credentials(), locks=BmcLocks(), timeouts=Timeouts(reply_s=0.1, resends=0),
                      retry=RetryPolicy(attempts=2, first_backoff_s=0.05, jitter=0.0))
        results = fleet.power_status(targets)
    finally:
        silent.close()
    assert [r.ok for r in results] == [True, True, False]
    assert results[2].reason is Reason.UNREACHABLE and results[2].attempts == 2


def test_the_loop_starts_tasks_in_order_within_its_limit():
    running, most, order = [0], [0], []

    def task(name: str):
        order.append(name)
        running[0] += 1
        most[0] = max(most[0], running[0])
        yield None, time.monotonic() + 0.01  # a pause
        running[0] -= 1

    loop.run_all((task(f"t{i}") for i in range(7)), limit=3)
    assert order == [f"t{i}" for i in range(7)] and most[0] == 3 and running[0] == 0


def test_the_loop_resumes_a_task_with_its_datagram_none_at_its_deadline_or_the_error():
    sender, receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET,
                                                                                          socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    refused = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed_port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed_port.bind(("127.0.0.1", 0))
    refused.connect(closed_port.getsockname())
    closed_port.close()
    seen = {}

    def answered():
        sender.sendto(b"hello", receiver.getsockname())
        seen["datagram"] = yield receiver, time.monotonic() + 2.0
        seen["silence"] = yield receiver, time.monotonic() + 0.05

    def refusing():
        refused.send(b"anyone?")
        try:
            yield refused, time.monotonic() + 2.0
        except OSError as error:
            seen["error"] = type(error).__name__

    try:
        loop.run_all([answered(), refusing()])
    finally:
        for sock in (sender, receiver, refused):
            sock.close()
    assert seen == {"datagram": b"hello", "silence": None, "error": "ConnectionRefusedError"}


def test_a_held_bmc_lock_is_refused_without_waiting_then_taken_once_free(tmp_path):
    policy = load("rackform_ipmi_policy")
    first = policy.bmc_lock(str(tmp_path / "locks"), "10.0.0.9", 5.0)  # the folder does not exist yet
    second = policy.bmc_lock(str(tmp_path / "locks"), "10.0.0.9", 5.0)
    assert first.try_acquire()
    started = time.monotonic()
    assert not second.try_acquire()
    assert time.monotonic() - started < 1.0  # not the 5 s wait, with room for a loaded machine
    first.release()
    assert second.try_acquire()
    second.release()
