"""The straggler pack's false-alarm bound: a simulated week of 15 s scrapes of 24 jittering
GPUs in two Slurm jobs (tests/e2e/straggler_fleet.py), with every rank of both jobs idling
3 minutes each hour (a checkpoint) and a facility power cap taking 20 % off one job's GPUs
for an hour every 6 hours, imported into a real VictoriaMetrics and replayed by a real
vmalert with alerts/gpu-straggler.rules.yml as shipped. No GPU is slow: GpuStraggler must
not fire, nor go pending, once in the week. Prints how close each standing came to its
limit. (`make bench`; docs/alerts-dashboards.md has the figures.)

    .venv/bin/pytest tests/bench/test_straggler_week.py -s
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.straggler_fleet import Event, Fleet, exported, import_fleet, replay
from tests.servers import victoria_metrics

DAYS = 7
HOUR = 3600


def test_no_straggler_alert_in_a_week_of_jittering_peers(tmp_path: Path) -> None:
    duration = DAYS * 24 * HOUR
    fl = Fleet.of({"1001": (2, 8), "1002": (2, 4)}, [
        Event("idle", 50 * 60, 53 * 60, job="1001", period_s=HOUR),
        Event("idle", 20 * 60, 23 * 60, job="1002", period_s=HOUR),
        Event("job_cap", 2 * HOUR, 3 * HOUR, job="1002", scale=0.8, period_s=6 * HOUR),
    ])
    start = int((time.time() - duration - 600) // 60 * 60)
    with victoria_metrics(extra_args=["-retentionPeriod=30d"]) as vm:
        began = time.monotonic()
        samples = import_fleet(vm, fl, start, duration)
        imported = time.monotonic() - began
        took = replay(vm, start, start + duration, tmp_path, timeout=1200)
        alerts = exported(vm, '{__name__="ALERTS", alertname="GpuStraggler"}')
        closest = {}
        for name, agg in (("gpu_job:hw_gpu_sm_clock:ratio_to_job_median", "min"),
                          ("gpu_job:hw_gpu_power_draw:ratio_to_job_median", "min"),
                          ("gpu_job:hw_gpu_clock_event_time:diff_from_job_median", "max"),
                          ("gpu_job:hw_gpu_utilization:diff_from_job_median", "min"),
                          ("gpu_job:hw_errors_pcie:excess_per_minute", "max"),
                          ("gpu_job:hw_errors_nvlink:excess_per_minute", "max")):
            got = vm.query(f"{agg}({agg}_over_time({name}[{DAYS}d]))", at=start + duration)
            closest[name] = float(got[0]["value"][1])
        evaluations = len(exported(vm, "gpu_job:hw_gpu_sm_clock:ratio_to_job_median")[0]
                          .timestamps_s)
    print(f"\n{len(fl.gpus)} GPUs, {samples} samples over {DAYS} days imported in "
          f"{imported:.0f} s; vmalert -replay took {took:.0f} s; "
          f"{evaluations} evaluations of a GPU's clock standing")
    for name, value in closest.items():
        print(f"  closest {name}: {value:.3f}")
    assert evaluations > DAYS * 24 * 120 * 0.8, evaluations  # every 30 s but idle phases
    assert not alerts, [(a.labels, len(a.timestamps_s)) for a in alerts]
    assert closest["gpu_job:hw_gpu_sm_clock:ratio_to_job_median"] > 0.9
