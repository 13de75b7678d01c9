"""Many BMCs at once (rackform.ipmi.fleet): per-node results, bounded retries with backoff,
one failing node never stopping the rest, and one command in flight per BMC."""

from __future__ import annotations

import logging
import threading

import pytest

from rackform.ipmi.credentials import Credentials, factory_credentials, from_mapping
from rackform.ipmi.errors import Reason
from rackform.ipmi.fakebmc import FakeBmc, FakeBmcConfig
from rackform.ipmi.fleet import BmcLocks, BmcTarget, Fleet, NodeResult, RetryPolicy, failed_percentage
from rackform.ipmi.session import Timeouts

QUICK = Timeouts(reply_s=0.2, resends=0)
PASSWORD = "fleet-secret-Kx7"


class Pauses:
    def __init__(self):
        self.taken: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float) -> None:
        with self._lock:
            self.taken.append(seconds)


def fleet(credentials=None, *, attempts: int = 3, pauses: Pauses | None = None, **options) -> Fleet:
    return Fleet(credentials or factory_credentials(), retry=RetryPolicy(attempts=attempts, jitter=0.0),
                 timeouts=QUICK, sleep=pauses or Pauses(), **{"locks": BmcLocks(), **options})


def target(fake: FakeBmc, node: str) -> BmcTarget:
    return BmcTarget(node, fake.address, fake.port)


@pytest.fixture()
def fakes():
    started = [FakeBmc(FakeBmcConfig()) for _ in range(3)]
    for fake in started:
        fake.start()
    yield started
    for fake in started:
        fake.stop()


def test_every_node_gets_a_result_in_target_order(fakes):
    targets = [target(fake, f"n{i}") for i, fake in enumerate(fakes)]
    results = fleet().power_status(targets)
    assert [(r.node, r.ok, r.value) for r in results] == [("n0", True, "off"), ("n1", True, "off"), ("n2", True, "off")]


def test_power_on_reaches_every_bmc(fakes):
    results = fleet().power([target(fake, f"n{i}") for i, fake in enumerate(fakes)], "on")
    assert all(r.ok and r.value.after == "on" for r in results) and {f.power for f in fakes} == {"on"}


def test_one_failing_node_fails_alone(fakes):
    with FakeBmc(FakeBmcConfig(password="something-else")) as rotated:
        targets = [target(fakes[0], "good-1"), target(rotated, "bad"), target(fakes[1], "good-2")]
        results = fleet(attempts=2).power(targets, "on")
    assert [(r.node, r.reason) for r in results] == [("good-1", None), ("bad", Reason.AUTH_REJECTED), ("good-2", None)]


def test_failure_says_why_and_how_often_it_was_tried():
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as silent:
        result = fleet(attempts=3).power_status([target(silent, "quiet")])[0]
    assert result.describe().startswith("unreachable: no answer from") and "gave up after 3 tries" in result.describe()


def test_retries_back_off_exponentially():
    pauses = Pauses()
    with FakeBmc(FakeBmcConfig(answer_packets=0)) as silent:
        fleet(attempts=4, pauses=pauses).power_status([target(silent, "quiet")])
    assert pauses.taken == [1.0, 2.0, 4.0]


def test_backoff_is_capped():
    policy = RetryPolicy(first_backoff_s=1.0, factor=2.0, max_backoff_s=5.0, jitter=0.0)
    assert [policy.backoff_s(n) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_only_stretches_the_pause():
    policy = RetryPolicy(first_backoff_s=2.0, jitter=0.5)
    assert all(2.0 <= policy.backoff_s(1) <= 3.0 for _ in range(50))


def test_a_busy_bmc_succeeds_on_a_retry():
    with FakeBmc(FakeBmcConfig(busy_replies=1)) as busy:
        result = fleet().power([target(busy, "n")], "on")[0]
    assert (result.ok, result.attempts) == (True, 2)


def test_a_refused_cipher_suite_is_not_retried():
    with FakeBmc(FakeBmcConfig(suites=frozenset({0}))) as weak:
        result = fleet(attempts=3).power_status([target(weak, "n")])[0]
    assert (result.reason, result.attempts) == (Reason.SUITE_REFUSED, 1)


def test_a_bmc_that_dies_mid_run_is_retried_then_fails_alone(fakes):
    with FakeBmc(FakeBmcConfig(answer_packets=6)) as dying:  # a login and one command, then nothing
        targets = [target(fakes[0], "steady"), target(dying, "dying")]
        results = fleet(attempts=2).power(targets, "on")
    # The first try times out mid-session; the retry finds nothing there any more.
    assert [(r.node, r.reason, r.attempts) for r in results] == [("steady", None, 1), ("dying", Reason.UNREACHABLE, 2)]


def test_nodes_sharing_a_bmc_never_overlap():
    with FakeBmc(FakeBmcConfig(reply_delay_s=0.02)) as shared:
        fleet().power_status([target(shared, f"blade-{i}") for i in range(4)])
        assert (len(shared.commands) >= 4, shared.max_in_flight) == (True, 1)


def test_two_fleet_runs_at_once_take_turns_on_a_bmc():
    locks = BmcLocks()
    with FakeBmc(FakeBmcConfig(reply_delay_s=0.02)) as shared:
        runs = [threading.Thread(target=lambda: Fleet(factory_credentials(), timeouts=QUICK, locks=locks)
                                 .power_status([target(shared, "n")])) for _ in range(3)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        assert (shared.logins, shared.max_in_flight) == (3, 1)


def test_a_target_listed_twice_gets_two_results(fakes):
    twice = target(fakes[0], "n")
    assert [r.value for r in fleet().power_status([twice, twice])] == ["off", "off"]


def test_different_bmcs_are_worked_in_parallel():
    fakes = [FakeBmc(FakeBmcConfig(reply_delay_s=0.05)) for _ in range(4)]
    for fake in fakes:
        fake.start()
    try:
        gate = threading.Barrier(4, timeout=5)  # every operation must be running at the same moment
        results = fleet().run([target(f, f"n{i}") for i, f in enumerate(fakes)], lambda client: gate.wait())
    finally:
        for fake in fakes:
            fake.stop()
    assert all(r.ok for r in results)


def test_a_node_without_credentials_fails_without_contacting_its_bmc(fakes):
    credentials = from_mapping({"known": Credentials("ADMIN", "ADMIN")})
    results = fleet(credentials).power_status([target(fakes[0], "known"), target(fakes[1], "stranger")])
    assert [(r.node, r.reason) for r in results] == [("known", None), ("stranger", Reason.NO_CREDENTIALS)]
    assert fakes[1].commands == []


def test_an_unexpected_error_in_an_operation_fails_that_node_only(fakes):
    def operation(client):
        if client.session.port == fakes[1].port:
            raise KeyError("surprise")
        return client.power_state()

    results = fleet().run([target(f, f"n{i}") for i, f in enumerate(fakes)], operation)
    assert [r.reason for r in results] == [None, Reason.PROTOCOL, None]


def test_results_and_logs_carry_no_password(caplog):
    caplog.set_level(logging.DEBUG, logger="rackform.ipmi")
    with FakeBmc(FakeBmcConfig(password="not-" + PASSWORD)) as fake:
        result = fleet(lambda node: Credentials("ADMIN", PASSWORD), attempts=2).power_status([target(fake, "n")])[0]
    assert PASSWORD not in repr(result) and PASSWORD not in caplog.text and "rejected the password" in caplog.text


def test_on_result_is_called_once_per_node(fakes):
    seen: list[str] = []
    fleet().power_status([target(f, f"n{i}") for i, f in enumerate(fakes)], on_result=lambda r: seen.append(r.node))
    assert sorted(seen) == ["n0", "n1", "n2"]


ROTATED = "Rotated-20-chars-Ab9"  # 20 characters, as rackform.secrets makes them


def test_a_bmc_keeping_16_bytes_of_the_password_is_logged_in_to():
    with FakeBmc(FakeBmcConfig(password=ROTATED[:16])) as fake:
        result = fleet(lambda node: Credentials("ADMIN", ROTATED)).power_status([target(fake, "n")])[0]
    assert result.ok


def test_the_password_that_worked_is_tried_first_next_time():
    with FakeBmc(FakeBmcConfig(password=ROTATED[:16])) as fake:
        runner = fleet(lambda node: Credentials("ADMIN", ROTATED))
        runner.power_status([target(fake, "n")])
        tried_before = fake.login_attempts
        runner.power_status([target(fake, "n")])
        assert (tried_before, fake.login_attempts - tried_before) == (2, 1)


def test_a_bmc_not_yet_rotated_takes_the_previous_password():
    with FakeBmc(FakeBmcConfig(password="old-password")) as fake:
        result = fleet(lambda node: Credentials("ADMIN", ROTATED, previous=("old-password",))).power_status(
            [target(fake, "n")])[0]
    assert result.ok


@pytest.mark.parametrize(("oks", "expected"), [((True, True), 0.0), ((True, False), 50.0), ((), 0.0)])
def test_failed_percentage(oks, expected):
    results = [NodeResult("n", "a", reason=None if ok else Reason.TIMEOUT) for ok in oks]
    assert failed_percentage(results) == expected


@pytest.mark.parametrize("call", [lambda f: f.power([], "explode"), lambda f: f.set_boot_device([], "floppy")])
def test_a_mistaken_action_is_refused_before_any_bmc_is_contacted(call):
    with pytest.raises(ValueError, match="unknown"):
        call(fleet())


def test_a_retry_policy_needs_an_attempt():
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


# --- one lock, one retry policy: the Ansible module's ----------------------------------------------

def test_a_bmc_held_by_the_ansible_modules_lock_waits_for_it(tmp_path):
    from provision_support import load_ipmi_modules

    module_session = load_ipmi_modules()["rackform_ipmi_session"]
    with FakeBmc(FakeBmcConfig(power="on")) as fake:
        target = BmcTarget("node-1", fake.address, fake.port)
        impatient = fleet(locks=BmcLocks(str(tmp_path), timeout_s=0.3))
        with module_session.bmc_lock(str(tmp_path), fake.address, 5.0, fake.port):
            held = impatient.power_status([target])[0]
        assert (held.reason, fake.logins) == (Reason.TIMEOUT, 0)
        assert "another rackform process" in held.error
        assert impatient.power_status([target])[0].value == "on"


def test_the_fleet_and_the_module_share_one_retry_policy_and_read_back():
    from provision_support import load_ipmi_modules

    modules = load_ipmi_modules()
    import rackform.ipmi.client as client_module
    import rackform.ipmi.fleet as fleet_module

    policy = modules["rackform_ipmi_session"].RetryPolicy
    assert fleet_module.RetryPolicy is policy
    assert modules["rackform_ipmi_chassis"].power_plan is client_module._policy.power_plan
