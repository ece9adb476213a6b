"""tests.helpers.eventually, the suite's one way to wait for a condition, on an injected
clock: it returns the first true answer, retries what it should, gives up on time with
the last answer, and stops at once on anything else."""

from __future__ import annotations

import pytest

from tests.helpers import eventually


class Time:
    """A clock that moves only when the helper sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_returns_the_first_true_answer_and_waits_only_until_then() -> None:
    t = Time()
    answers = iter([None, 0, [], "ready", "later"])
    assert eventually(lambda: next(answers), 5, clock=t, sleep=t.sleep, interval=0.5) == "ready"
    assert t.slept == [0.5, 0.5, 0.5]


def test_an_assertion_is_not_yet_and_the_last_one_is_reported_on_time() -> None:
    t = Time()
    calls = []

    def check() -> bool:
        calls.append(t.now)
        raise AssertionError(f"not at {t.now}")

    with pytest.raises(AssertionError, match=r"GPU back: not so after 2 s; last raised "
                                             r"AssertionError: not at 2\.0"):
        eventually(check, 2, "GPU back", clock=t, sleep=t.sleep, interval=1)
    assert calls == [0.0, 1.0, 2.0]  # the deadline is checked after each answer


def test_other_exceptions_end_the_wait_at_once_unless_named() -> None:
    t = Time()
    with pytest.raises(KeyError):
        eventually(lambda: {}["x"], 10, clock=t, sleep=t.sleep)
    assert t.slept == []
    answers = iter([ConnectionRefusedError(), True])

    def connect() -> bool:
        a = next(answers)
        if isinstance(a, BaseException):
            raise a
        return a

    assert eventually(connect, 10, retry_on=(OSError,), clock=t, sleep=t.sleep) is True
