"""NVML drill: one GPU's call hangs for 60 s while 20 scrapes arrive, ten of them at
the same moment. tests/nvidia covers a 4 s hang met by scrapes one after another; this
is the issue's long hang under concurrent arrival, and a shutdown while it still hangs.
"""

from __future__ import annotations

import concurrent.futures
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from tests.drills.test_http_load import threads_of
from tests.fake_nvml import scenario as fake
from tests.helpers import exporter, find, parse

TIMEOUT = 2.0  # --scrape.timeout
HANG = 60.0
SLACK = 1.5  # HTTP and parsing on a shared 2-core machine, beyond the scrape timeout


def _uuid(i: int) -> str:
    return fake.h100(i).uuid


def _timed_scrape(port: int) -> tuple[float, str]:
    import urllib.request

    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=TIMEOUT + 10) as r:
        assert r.status == 200
        body = r.read().decode()
    return time.monotonic() - started, body


def _check(body: str) -> None:
    series = parse(body)
    up = {s.labels["hw_id"]: s.value for s in find(series, "hw_gpu_up")}
    assert up[_uuid(3)] == 0, "the hung GPU must read down"
    assert [up[_uuid(i)] for i in range(8) if i != 3] == [1.0] * 7
    for i in set(range(8)) - {3}:
        assert find(series, "hw_gpu_power_draw_watts", hw_id=_uuid(i)), i
    assert find(series, "hw_gpu_info", hw_id=_uuid(3))  # still known, not dropped


def test_sixty_second_hang_while_twenty_scrapes_arrive(
    fake_nvml_dir: Path, tmp_path: Path, eight_gpus: Mapping[str, str]
) -> None:
    sc = fake.h100x8()
    path = sc.write(tmp_path / "h100x8.scenario")
    env = {**eight_gpus, **fake.env(fake_nvml_dir, path)}
    with exporter([f"--scrape.timeout={TIMEOUT}"], env=env) as exp:
        first = parse(exp.scrape())
        assert [s.value for s in find(first, "hw_gpu_up")] == [1.0] * 8
        # Concurrent scrapes first, so that the server's bounded pool of scrape workers
        # (started on demand) is at its size: what follows may not grow past it.
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            for _, body in pool.map(lambda _: _timed_scrape(exp.port), range(10)):
                assert [s.value for s in find(parse(body), "hw_gpu_up")] == [1.0] * 8
        idle_threads = threads_of(exp.proc.pid)
        sc.hang(3, "nvmlDeviceGetEnforcedPowerLimit", HANG)
        hang_started = time.monotonic()

        elapsed: list[float] = []
        peak = idle_threads
        # Ten at once...
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            for took, body in pool.map(lambda _: _timed_scrape(exp.port), range(10)):
                elapsed.append(took)
                _check(body)
        peak = max(peak, threads_of(exp.proc.pid))
        # ...then ten more, one every half second, all while the call still hangs.
        for _ in range(10):
            took, body = _timed_scrape(exp.port)
            elapsed.append(took)
            _check(body)
            peak = max(peak, threads_of(exp.proc.pid))
            time.sleep(0.5)
        assert time.monotonic() - hang_started < HANG, "the drill outlived the hang"

        assert len(elapsed) == 20
        assert max(elapsed) < TIMEOUT + SLACK, sorted(elapsed)
        # The stuck GPU holds its one worker; nothing else piles up scrape after scrape.
        assert peak <= idle_threads + 4, (idle_threads, peak)
        assert threads_of(exp.proc.pid) <= idle_threads + 2, idle_threads
        assert exp.logs().count("did not answer NVML within the scrape timeout") <= 1

        # A shutdown is not held hostage by the call still hanging in NVML.
        exp.proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        exp.proc.wait(10)
        assert time.monotonic() - stopped < 10
        assert exp.proc.returncode == 0, exp.logs()


# Every per-GPU call of the NVML stack, each hung for 60 s on its own GPU, all at once:
# the drill costs seconds, not four minutes, and shows that no two hangs add up.
HUNG = {
    1: "nvmlDeviceGetComputeRunningProcesses_v3",  # process list
    2: "nvmlDeviceGetProcessUtilization",
    3: "nvmlDeviceGetFieldValues",
    4: "nvmlEventSetWait_v2",  # the XID listener's wait
}
DRILL_SECONDS = 8.0  # of scrapes under the hangs: longer than the event wait's 5 s alarm


def _node(tmp_path: Path) -> tuple[fake.Scenario, Path]:
    """8 GPUs with a process each (utilization samples too), in a /proc tree."""
    from tests.processes.procfs import write_process

    sc = fake.h100x8()
    for i, d in enumerate(sc.devices):
        d.processes = [("compute", 2000 + i, (i + 1) * 1024**3, None, None)]
        d.process_utilization = [(2000 + i, int(time.time() * 1e6), 50, 10, 0, 0)]
        write_process(tmp_path / "proc", 2000 + i, comm=f"train{i}", start=i + 1)
    return sc, tmp_path / "proc"


def _check_four(body: str) -> None:
    series = parse(body)
    up = {s.labels["hw_id"]: s.value for s in find(series, "hw_gpu_up")}
    assert up == {_uuid(i): 0.0 if i == 3 else 1.0 for i in range(8)}, up
    for i in set(range(8)) - {3}:
        assert find(series, "hw_gpu_power_draw_watts", hw_id=_uuid(i)), i
        assert find(series, "hw_gpu_energy_consumed_joules_total", hw_id=_uuid(i)), i
    assert find(series, "hw_gpu_info", hw_id=_uuid(3))  # still known, not dropped
    memory = {s.labels["hw_id"] for s in find(series, "process_gpu_memory_usage_bytes")}
    assert memory == {_uuid(i) for i in range(8)} - {_uuid(1), _uuid(2)}, memory


def test_each_per_gpu_nvml_call_hung_for_sixty_seconds_on_its_own_gpu(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    from gpu_exporter.collectors import REGISTRY

    sc, procfs = _node(tmp_path)
    path = sc.write(tmp_path / "h100x8.scenario")
    only = [f"--no-collector.{c.name}" for c in REGISTRY if c.name not in ("nvidia", "processes")]
    args = [*only, f"--scrape.timeout={TIMEOUT}", f"--path.procfs={procfs}"]
    with exporter(args, env=fake.env(fake_nvml_dir, path)) as exp:
        first = parse(exp.scrape())
        assert [s.value for s in find(first, "hw_gpu_up")] == [1.0] * 8
        assert len(find(first, "process_gpu_memory_usage_bytes")) == 8
        for gpu, function in HUNG.items():
            sc.devices[gpu].hangs[function] = HANG
        sc.write()
        hang_started = time.monotonic()

        elapsed: list[float] = []
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            for took, body in pool.map(lambda _: _timed_scrape(exp.port), range(10)):
                elapsed.append(took)
                _check_four(body)
        counts = []
        while time.monotonic() - hang_started < DRILL_SECONDS:
            took, body = _timed_scrape(exp.port)
            elapsed.append(took)
            _check_four(body)
            counts.append(threads_of(exp.proc.pid))
            time.sleep(0.5)
        assert time.monotonic() - hang_started < HANG, "the drill outlived the hang"
        assert max(elapsed) < TIMEOUT + SLACK, sorted(elapsed)
        # Each stuck call holds its one worker; nothing piles up scrape after scrape.
        assert max(counts) - min(counts) <= 2, counts
        last = parse(body)
        for collector in ("nvidia", "processes"):  # the stuck calls are failures
            assert [s.value for s in find(last, "gpu_exporter_collector_success",
                                          collector=collector)] == [0.0]
        logs = exp.logs()
        assert "the NVML event wait has not returned" in logs
        assert f"GPU {_uuid(1)} is still stuck in an NVML process call" in logs

        exp.proc.send_signal(signal.SIGTERM)
        exp.proc.wait(10)
        assert exp.proc.returncode == 0, exp.logs()
