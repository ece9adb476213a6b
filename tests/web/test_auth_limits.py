"""Per-address limits of basic auth, decided before bcrypt (issue 32, "Auth that holds
after a restart"): the budget of failures, the fair rotation of waiting checks."""

from __future__ import annotations

import threading
from functools import partial

import bcrypt
import pytest

from gpu_exporter.http.authlimits import (
    AuthBusy,
    AuthLimited,
    FailureBudget,
    FairChecks,
    address_key,
)
from gpu_exporter.http.webconfig import BasicAuth
from tests.web.serve import basic


def test_addresses_are_keyed_by_host_and_ipv6_by_64() -> None:
    assert address_key("127.0.0.2") == "127.0.0.2"
    assert address_key("::ffff:10.0.0.1") == "10.0.0.1"
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:ffff::9")
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("fe80::1%eth0") == "fe80::/64"


def test_the_budget_is_spent_by_failures_only_and_refills() -> None:
    now = [0.0]
    budget = FailureBudget(burst=3, per_second=0.5, clock=lambda: now[0])
    for _ in range(3):
        budget.charge("10.0.0.1")
    with pytest.raises(AuthLimited) as err:
        budget.charge("10.0.0.1")
    assert err.value.retry_after == pytest.approx(2.0)
    budget.charge("10.0.0.2")  # another address has its own
    now[0] += 2.0  # one token back
    budget.charge("10.0.0.1")
    with pytest.raises(AuthLimited):
        budget.charge("10.0.0.1")
    # A check that passed is refunded: a scraper never spends its own budget.
    for _ in range(50):
        budget.charge("10.0.0.3")
        budget.refund("10.0.0.3")


def test_the_table_of_addresses_is_bounded() -> None:
    now = [0.0]
    budget = FailureBudget(burst=2, per_second=1.0, max_addresses=100, clock=lambda: now[0])
    budget.charge("10.0.0.1")
    for i in range(1000):
        budget.charge(f"10.1.{i // 256}.{i % 256}")
        assert len(budget) <= 100
    # Within its memory, a spent budget stays spent.
    budget.charge("10.9.9.9")
    budget.charge("10.9.9.9")
    with pytest.raises(AuthLimited):
        budget.charge("10.9.9.9")


def test_waiting_checks_take_turns_by_address() -> None:
    """Forty checks from one address, then one from another: the other is the second to
    run (after the check in progress), not the forty-first."""
    checks = FairChecks(max_waiting=64, per_address=64)
    gate = threading.Event()
    order: list[str] = []

    def job(name: str) -> bool:
        gate.wait(10)
        order.append(name)
        return True

    futures = [checks.submit(partial(job, f"a{i}"), False, "127.0.0.2") for i in range(40)]
    futures.append(checks.submit(lambda: job("scraper"), False, "127.0.0.1"))
    gate.set()
    for f in futures:
        assert f.result(10)
    # After the check that was in progress (and one more, if the thread had not yet
    # taken the first when the scraper came).
    assert order.index("scraper") <= 1, order


def test_one_address_waits_for_a_few_checks_at_most() -> None:
    checks = FairChecks(max_waiting=64, per_address=2)
    gate = threading.Event()
    try:
        held = []
        with pytest.raises(AuthBusy):
            # Two wait (and one more may have been taken by the thread already).
            for _ in range(4):
                held.append(checks.submit(lambda: gate.wait(10), False, "127.0.0.2"))
        assert len(held) in (2, 3)
        # Another address, and vouched credentials, are still taken.
        held.append(checks.submit(lambda: True, False, "127.0.0.1"))
        held.append(checks.submit(lambda: True, True, "127.0.0.2"))
    finally:
        gate.set()
    for f in held:
        assert f.result(10)


def test_basic_auth_limits_failures_per_address_before_bcrypt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    good = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))
    auth = BasicAuth({"prometheus": good}, budget=FailureBudget(burst=3, per_second=0.001))
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(password)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    wrong = basic("prometheus", "wrong")["Authorization"]
    right = basic("prometheus", "right")["Authorization"]
    for _ in range(3):
        assert not auth.check(wrong, "127.0.0.2")
    with pytest.raises(AuthLimited):
        auth.check(wrong, "127.0.0.2")
    assert len(calls) == 3  # the fourth never reached bcrypt
    # Another address is answered; and its right password costs it nothing.
    for _ in range(5):
        auth._cache.clear()  # as if expired and forgotten: a real check each time
        assert auth.check(right, "127.0.0.1")
    assert auth.check(wrong, "127.0.0.1") is False


def test_behind_one_nat_a_scraper_that_passed_once_is_never_limited() -> None:
    """Attacker and scraper on one address share its budget: once spent, a scraper that
    has not passed since start gets 429 too (docs/web-front.md says so), but one that
    has passed is vouched for, checked first and never charged."""
    good = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4))
    auth = BasicAuth({"prometheus": good}, cache_seconds=0.0,
                     budget=FailureBudget(burst=2, per_second=0.001))
    right = basic("prometheus", "right")["Authorization"]
    wrong = basic("prometheus", "wrong")["Authorization"]
    nat = "203.0.113.7"
    assert auth.check(right, nat)  # passed once: vouched for from now on
    for _ in range(2):
        assert not auth.check(wrong, nat)
    with pytest.raises(AuthLimited):
        auth.check(wrong, nat)
    for _ in range(5):  # its success expired each time (cache_seconds=0): checked again
        assert auth.check(right, nat)
    # After a restart (nothing vouched for) the same scraper shares the spent budget of
    # its address: 429, bcrypt not asked, until the budget gives it a turn.
    restarted = BasicAuth({"prometheus": good},
                          budget=FailureBudget(burst=1, per_second=0.001))
    assert not restarted.check(wrong, nat)  # the attacker spends it first
    with pytest.raises(AuthLimited):
        restarted.check(right, nat)
