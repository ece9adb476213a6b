"""The attribution arithmetic on its own (gpu_exporter/model/attribution.py): shares,
processes coming and going, counter resets, lost GPUs, MIG, and exact conservation over
thousands of random scrapes."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpu_exporter.model.attribution import (
    Attribution,
    Consumer,
    Gpu,
    MigDevice,
    Split,
    shares,
)
from tests.attribution.ledger import Ledger


def consumed(split: Split, device: str = "G") -> dict[Hashable, float]:
    return {a.key: a.joules for a in split.consumed if a.device == device}


def unattributed(split: Split, device: str = "G") -> dict[str, float]:
    return {u.reason: u.joules for u in split.unattributed if u.device == device}


def run(steps: Sequence[Gpu | Sequence[Gpu]]) -> list[Split]:
    a = Attribution()
    return [a.update([s] if isinstance(s, Gpu) else s) for s in steps]


def p(key: str, activity: float | None = None, memory: int | None = None) -> Consumer:
    return Consumer(key, activity, memory)


def test_first_reading_is_a_baseline_with_every_counter_at_zero() -> None:
    (split,) = run([Gpu("G", 1000.0, [p("a", 50)])])
    assert consumed(split) == {"a": 0.0}
    assert unattributed(split) == {"no_process": 0.0, "no_activity_data": 0.0}


def test_a_lone_process_pays_for_the_whole_gpu_busy_or_idle() -> None:
    splits = run([Gpu("G", 1000.0, [p("a")]), Gpu("G", 1300.0, [p("a", None)]),
                  Gpu("G", 1350.0, [p("a", 0.0)])])
    assert consumed(splits[1]) == {"a": 300.0}
    assert consumed(splits[2]) == {"a": 350.0}
    assert unattributed(splits[2]) == {"no_process": 0.0, "no_activity_data": 0.0}


def test_processes_share_in_proportion_to_their_activity() -> None:
    splits = run([Gpu("G", 0.0, [p("a"), p("b"), p("c")]),
                  Gpu("G", 600.0, [p("a", 300), p("b", 100), p("c", 0)])])
    assert consumed(splits[1]) == pytest.approx({"a": 450.0, "b": 150.0, "c": 0.0})


def test_a_process_without_samples_while_others_have_some_was_idle() -> None:
    splits = run([Gpu("G", 0.0, [p("a"), p("b")]), Gpu("G", 100.0, [p("a", 40), p("b")])])
    assert consumed(splits[1]) == {"a": 100.0, "b": 0.0}


def test_no_activity_for_any_of_several_processes_is_not_guessed() -> None:
    splits = run([Gpu("G", 0.0, [p("a"), p("b")]),
                  Gpu("G", 100.0, [p("a", None, 5), p("b", None, 10)])])
    assert consumed(splits[1]) == {"a": 0.0, "b": 0.0}
    assert unattributed(splits[1]) == {"no_process": 0.0, "no_activity_data": 100.0}


def test_an_idle_gpu_held_by_several_is_shared_by_memory_else_equally() -> None:
    splits = run([Gpu("G", 0.0, [p("a"), p("b")]),
                  Gpu("G", 90.0, [p("a", 0, 1), p("b", 0, 2)]),
                  Gpu("G", 190.0, [p("a", 0, 1), p("b", 0, None)])])
    assert consumed(splits[1]) == pytest.approx({"a": 30.0, "b": 60.0})
    assert consumed(splits[2]) == pytest.approx({"a": 80.0, "b": 110.0})


def test_nothing_running_is_no_process() -> None:
    splits = run([Gpu("G", 0.0, []), Gpu("G", 70.0, [])])
    assert consumed(splits[1]) == {}
    assert unattributed(splits[1]) == {"no_process": 70.0, "no_activity_data": 0.0}


def test_a_new_process_starts_at_zero_and_is_paid_from_its_second_interval() -> None:
    splits = run([Gpu("G", 0.0, [p("a")]),
                  Gpu("G", 100.0, [p("a", 10), p("b", 90)]),
                  Gpu("G", 200.0, [p("a", 10), p("b", 90)])])
    assert consumed(splits[1]) == {"a": 100.0, "b": 0.0}
    assert consumed(splits[2]) == pytest.approx({"a": 110.0, "b": 90.0})


def test_a_process_alone_from_an_idle_gpu_leaves_its_first_interval_unattributed() -> None:
    splits = run([Gpu("G", 0.0, []), Gpu("G", 100.0, [p("a", 99)]),
                  Gpu("G", 150.0, [p("a", 99)])])
    assert consumed(splits[1]) == {"a": 0.0}
    assert unattributed(splits[1])["no_process"] == 100.0
    assert consumed(splits[2]) == {"a": 50.0}


def test_a_process_that_left_takes_its_series_with_it_and_the_rest_pay() -> None:
    splits = run([Gpu("G", 0.0, [p("a"), p("b")]),
                  Gpu("G", 100.0, [p("a", 1), p("b", 1)]),
                  Gpu("G", 180.0, [p("b", 0)])])
    assert consumed(splits[1]) == {"a": 50.0, "b": 50.0}
    assert consumed(splits[2]) == {"b": 130.0}


def test_a_process_that_comes_back_is_a_new_counter() -> None:
    splits = run([Gpu("G", 0.0, [p("a")]), Gpu("G", 10.0, [p("a")]), Gpu("G", 20.0, []),
                  Gpu("G", 30.0, [p("a")])])
    assert [consumed(s) for s in splits] == [{"a": 0.0}, {"a": 10.0}, {}, {"a": 0.0}]


def test_an_unread_process_list_keeps_the_series_and_counts_no_activity_data() -> None:
    splits = run([Gpu("G", 0.0, [p("a")]), Gpu("G", 10.0, None), Gpu("G", 25.0, [p("a")])])
    assert consumed(splits[1]) == {"a": 0.0}
    assert unattributed(splits[1])["no_activity_data"] == 10.0
    assert consumed(splits[2]) == {"a": 15.0}  # continued, not restarted


def test_a_counter_reset_counts_the_new_reading_as_increase_does() -> None:
    splits = run([Gpu("G", 5000.0, [p("a")]), Gpu("G", 5100.0, [p("a")]),
                  Gpu("G", 40.0, [p("a")])])
    assert consumed(splits[2]) == {"a": 140.0}


def test_a_gpu_not_read_exposes_nothing_and_resumes_where_it_was() -> None:
    splits = run([Gpu("G", 0.0, [p("a")]), Gpu("G", None, None), Gpu("G", 500.0, [p("a")])])
    assert splits[1].consumed == () and splits[1].unattributed == ()
    assert consumed(splits[2]) == {"a": 500.0}


def test_a_gpu_without_an_energy_counter_gets_no_attribution() -> None:
    splits = run([Gpu("G", None, [p("a", 10)])] * 3)
    assert all(s.consumed == () and s.unattributed == () for s in splits)


def test_gpus_are_independent() -> None:
    splits = run([[Gpu("G", 0.0, [p("a")]), Gpu("H", 0.0, [])],
                  [Gpu("G", 10.0, [p("a")]), Gpu("H", 30.0, [])]])
    assert consumed(splits[1], "G") == {"a": 10.0}
    assert unattributed(splits[1], "H")["no_process"] == 30.0


# ---- MIG --------------------------------------------------------------------------------
def mig(device: str, slices: int, consumers: Sequence[Consumer] | None,
        activity: float | None = None) -> MigDevice:
    return MigDevice(device, slices, consumers, activity)


def test_mig_splits_by_compute_slices_without_gpm() -> None:
    layout = [mig("M3", 3, [p("a")]), mig("M1", 1, [p("b")]), mig("E", 1, [])]
    splits = run([Gpu("G", 0.0, mig=layout), Gpu("G", 500.0, mig=layout)])
    assert consumed(splits[1], "M3") == {"a": 300.0}
    assert consumed(splits[1], "M1") == {"b": 100.0}
    assert unattributed(splits[1], "E")["no_process"] == 100.0
    assert unattributed(splits[1], "G") == {"no_process": 0.0, "no_activity_data": 0.0}
    assert splits[1].mig_split == {"G": "compute_slices"}


def test_mig_splits_by_gpm_engine_activity_times_slices_where_available() -> None:
    first = [mig("M3", 3, [p("a")], 0.0), mig("M1", 1, [p("b")], 0.0)]
    busy = [mig("M3", 3, [p("a")], 0.1), mig("M1", 1, [p("b")], 0.9)]
    splits = run([Gpu("G", 0.0, mig=first), Gpu("G", 120.0, mig=busy)])
    # weights 0.3 and 0.9
    assert consumed(splits[1], "M3") == pytest.approx({"a": 30.0})
    assert consumed(splits[1], "M1") == pytest.approx({"b": 90.0})
    assert splits[1].mig_split == {"G": "gpm"}


def test_mig_falls_back_to_slices_when_gpm_is_missing_for_one_or_all_idle() -> None:
    one_missing = [mig("M3", 3, [p("a")], 0.5), mig("M1", 1, [p("b")], None)]
    idle = [mig("M3", 3, [p("a")], 0.0), mig("M1", 1, [p("b")], 0.0)]
    splits = run([Gpu("G", 0.0, mig=idle), Gpu("G", 40.0, mig=one_missing),
                  Gpu("G", 80.0, mig=idle)])
    assert consumed(splits[1], "M3") == {"a": 30.0}
    assert consumed(splits[2], "M3") == {"a": 60.0}
    assert splits[1].mig_split == splits[2].mig_split == {"G": "compute_slices"}


def test_processes_inside_a_mig_device_without_activity_are_not_guessed() -> None:
    layout = [mig("M", 7, [p("a", None, 1), p("b", None, 2)])]
    splits = run([Gpu("G", 0.0, mig=layout), Gpu("G", 70.0, mig=layout)])
    assert unattributed(splits[1], "M")["no_activity_data"] == 70.0


def test_a_new_mig_device_starts_at_zero_and_its_first_share_goes_to_the_others() -> None:
    before = [mig("A", 1, [p("a")])]
    after = [mig("A", 1, [p("a")]), mig("B", 6, [p("b")])]
    splits = run([Gpu("G", 0.0, mig=before), Gpu("G", 70.0, mig=after),
                  Gpu("G", 140.0, mig=after)])
    assert consumed(splits[1], "A") == {"a": 70.0}
    assert consumed(splits[1], "B") == {"b": 0.0}
    assert unattributed(splits[1], "B")["no_process"] == 0.0
    assert consumed(splits[2], "B") == {"b": 60.0}


def test_a_gpu_in_mig_mode_without_instances_is_no_process() -> None:
    splits = run([Gpu("G", 0.0, mig=[]), Gpu("G", 33.0, mig=[])])
    assert unattributed(splits[1], "G")["no_process"] == 33.0


def test_a_mig_device_removed_takes_its_series_away() -> None:
    both = [mig("A", 1, [p("a")]), mig("B", 1, [])]
    splits = run([Gpu("G", 0.0, mig=both), Gpu("G", 10.0, mig=both),
                  Gpu("G", 20.0, mig=both[:1])])
    assert {u.device for u in splits[2].unattributed} == {"G", "A"}
    assert consumed(splits[2], "A") == {"a": 15.0}


# ---- shares -----------------------------------------------------------------------------
@given(st.floats(0, 1e9, allow_nan=False),
       st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=40)
       .filter(lambda w: math.fsum(w) > 0))
@example(5.6888284304723946e-185, [0.0, 5.6888284304723946e-185])  # every product underflows
def test_shares_add_up_and_are_never_negative(total: float, weights: list[float]) -> None:
    parts = shares(total, weights)
    assert all(x >= 0 for x in parts)
    assert math.fsum(parts) == pytest.approx(total, rel=1e-12, abs=1e-9)
    assert [x for x, w in zip(parts, weights, strict=True) if w == 0] == pytest.approx(
        [0.0] * weights.count(0.0), abs=total * 1e-12)


# ---- conservation over a long random run ----------------------------------------------
class _Workloads:
    """Processes with lifetimes on one device: each scrape some leave, some arrive."""

    def __init__(self, rng: random.Random, prefix: str) -> None:
        self.rng, self.prefix, self.live, self.born = rng, prefix, [], 0

    def consumers(self) -> list[Consumer] | None:
        rng = self.rng
        self.live = [k for k in self.live if rng.random() > 0.03]
        while len(self.live) < 6 and rng.random() < 0.08:
            self.born += 1
            # a pid can come back (reused), with the same labels: a new counter
            self.live.append(f"{self.prefix}-p{self.born % 40}")
        if rng.random() < 0.02:
            return None  # the process list could not be read this scrape
        return [Consumer(k, rng.choice([None, 0.0, rng.uniform(0, 1000)]),
                         rng.choice([None, rng.randint(0, 10**10)])) for k in self.live]


def test_conservation_is_exact_over_thousands_of_random_scrapes() -> None:
    """Four GPUs (one in MIG mode with instances coming and going, one sometimes not
    read), processes with random lifetimes, lists sometimes unreadable, counters reset
    twice: for each physical GPU, what increase() finds in the attributed and
    unattributed counters equals what it finds in the GPU's energy counter, and no
    counter starts above 0."""
    rng = random.Random(20240614)
    names = ["G0", "G1", "G2", "G3"]
    energy = {n: rng.uniform(1e5, 1e9) for n in names}
    layout = {f"G3-{label}": slices for label, slices in
              [("1g", 1), ("2g", 2), ("3g", 3), ("1c", 1)]}
    work = {d: _Workloads(rng, d) for d in [*names, *layout]}
    physical_of = {**{n: n for n in names}, **dict.fromkeys(layout, "G3")}
    a = Attribution()
    hw, attributed = Ledger(), Ledger()
    for step in range(5000):
        gpus = []
        for i, n in enumerate(names):
            energy[n] += rng.choice([0.0, rng.uniform(0, 700), rng.uniform(0, 7000)])
            if step in (1700, 3300) and i == 1:
                energy[n] = rng.uniform(0, 50)  # driver reload
            reading = None if i == 2 and rng.random() < 0.1 else energy[n]
            if n != "G3":
                gpus.append(Gpu(n, reading, work[n].consumers()))
                continue
            migs = [MigDevice(d, slices, work[d].consumers(),
                              rng.choice([None, 0.0, rng.random()]))
                    for d, slices in layout.items() if step < 100 or rng.random() < 0.98]
            gpus.append(Gpu(n, reading, None, migs))
        split = a.update(gpus)
        hw.scrape({g.device: g.energy_joules for g in gpus if g.energy_joules is not None})
        series: dict[Hashable, float] = {}
        for c in split.consumed:
            series[("consumed", c.device, c.key)] = c.joules
        for u in split.unattributed:
            series[("unattributed", u.device, u.reason)] = u.joules
        attributed.scrape(series)
    assert not [v for v in attributed.first_values.values() if v != 0.0]
    assert attributed.decreases > 0  # processes came back: their counters restarted
    paid = {kind: attributed.total(kind) for kind in ("consumed", "unattributed")}
    assert paid["consumed"] > paid["unattributed"] > 0, paid  # the run exercises both
    for n in names:
        mine = sum(v for (_, device, _), v in attributed.increase.items()
                   if physical_of[device] == n)
        assert hw.increase[n] > 0
        assert mine == pytest.approx(hw.increase[n], rel=1e-11), n
