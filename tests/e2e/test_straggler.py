"""The straggler pack end to end: a simulated fleet of jittering GPUs running three Slurm
jobs, imported into a real VictoriaMetrics and evaluated by a real vmalert (`-replay`, so
40 minutes of 15 s scrapes take seconds) with alerts/gpu-straggler.rules.yml as shipped.

- job 1001, 16 GPUs on 2 nodes: GPU 5 of its second node is capped 15 % under its peers'
  clocks at 20m; every rank idles 28m..33m (a checkpoint);
- job 1002, 8 GPUs on 2 nodes: a facility power cap takes 20 % off every GPU 10m..25m,
  then every rank idles 28m..33m;
- job 1003, 2 GPUs: one capped 30 % at 20m (its standing, 0.7 over the median of 0.7 and
  1, would cross 0.9), but 2 GPUs are too few to say which lags.

GpuStraggler must fire for the capped GPU of job 1001 within 5 minutes, naming it and its
job, and for nothing else: no other GPU, not the job-wide cap, not the small job.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.straggler_fleet import Event, Fleet, exported, import_fleet, replay
from tests.servers import QueryServer, victoria_metrics

DURATION_S = 40 * 60
CAP_AT_S = 20 * 60
DEADLINE_S = 5 * 60  # the issue's: at 15 s scrapes, within 5 minutes


def fleet() -> Fleet:
    fl = Fleet.of({"1001": (2, 8), "1002": (2, 4), "1003": (1, 2)})
    fl.events += [
        Event("cap", CAP_AT_S, DURATION_S, gpu=fl.gpu("1001-n1", 5)),
        Event("idle", 28 * 60, 33 * 60, job="1001"),
        Event("job_cap", 10 * 60, 25 * 60, job="1002", scale=0.8),
        Event("idle", 28 * 60, 33 * 60, job="1002"),
        Event("cap", CAP_AT_S, DURATION_S, gpu=fl.gpu("1003-n0", 1), scale=0.7),
    ]
    return fl


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[QueryServer, int]]:
    # The simulated 40 minutes end 10 minutes ago: whole minutes, inside the retention.
    start = int((time.time() - DURATION_S - 600) // 60 * 60)
    with victoria_metrics(extra_args=["-retentionPeriod=2d"]) as vm:
        samples = import_fleet(vm, fleet(), start, DURATION_S)
        assert samples > 26 * 8 * 150, samples  # 26 GPUs, 8 series, 160 scrapes each
        took = replay(vm, start, start + DURATION_S, tmp_path_factory.mktemp("rules"),
                      timeout=300)
        assert took < 300, took
        yield vm, start


def test_gpu_straggler_fires_for_the_capped_gpu_within_5_minutes(
        replayed: tuple[QueryServer, int]) -> None:
    vm, start = replayed
    firing = exported(vm, '{__name__="ALERTS", alertname="GpuStraggler", alertstate="firing"}')
    assert len(firing) == 1, [a.labels for a in firing]
    alert = firing[0]
    assert {k: alert.labels[k] for k in ("slurm_job_id", "host_name", "gpu_index", "hw_id",
                                         "signal", "severity")} == {
        "slurm_job_id": "1001", "host_name": "1001-n1", "gpu_index": "5",
        "hw_id": "GPU-1001-n1-5", "signal": "sm_clock", "severity": "warning"}
    first = min(alert.timestamps_s) - start
    assert CAP_AT_S < first <= CAP_AT_S + DEADLINE_S, first - CAP_AT_S


def test_no_other_gpu_and_no_job_wide_change_alerts(
        replayed: tuple[QueryServer, int]) -> None:
    """Not even pending: the jitter, the job-wide power cap, the idle phases and the job
    too small to compare leave every other GPU far from a threshold."""
    vm, _ = replayed
    alerts = exported(vm, '{__name__="ALERTS", alertname="GpuStraggler"}')
    others = {(a.labels["host_name"], a.labels["gpu_index"]) for a in alerts} - {
        ("1001-n1", "5")}
    assert not others, others


def test_the_job_wide_slowdown_and_the_small_job_were_compared_or_counted(
        replayed: tuple[QueryServer, int]) -> None:
    """The silence above is not for want of data: job 1002 was compared while its clocks
    were 20 % down, and the small job's capped GPU did lag its peer."""
    vm, start = replayed
    at = start + 20 * 60
    ratios = vm.query('gpu_job:hw_gpu_sm_clock:ratio_to_job_median{slurm_job_id="1002"}', at=at)
    assert len(ratios) == 8, ratios
    clocks = vm.query('avg(avg_over_time(hw_gpu_clock_hertz{host_name=~"1002-.*"}[2m]))'
                      ' / avg(avg_over_time(hw_gpu_clock_hertz{host_name=~"1002-.*"}[2m]'
                      ' offset 15m))', at=at)
    assert 0.75 < float(clocks[0]["value"][1]) < 0.85, clocks
    small = vm.query('gpu_job:hw_gpu_sm_clock:ratio_to_job_median{slurm_job_id="1003"}',
                     at=start + 30 * 60)
    assert len(small) == 2 and min(float(r["value"][1]) for r in small) < 0.9, small
