"""What goes wrong on real GPU hosts, injected in the fake library while the real
exporter runs: a lost GPU, a hung NVML call, a driver loaded late or unloaded, no
library at all, an old driver, a field that fails, XID events."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import (
    Exporter,
    Series,
    eventually,
    find,
    parse,
    promtool_check_metrics,
    run_cli,
    value,
)
from tests.nvidia import golden
from tests.nvidia.conftest import nvidia_only, running

GIB = 1024**3


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-4444555566{i:02d}"


def wait_for(
    exp: Exporter, ok: Callable[[list[Series]], bool], timeout: float = 15
) -> list[Series]:
    """Scrape until `ok` holds of the scrape (an assertion inside `ok` is a not yet)."""
    def scraped() -> list[Series]:
        s = parse(exp.scrape())
        assert ok(s), f"last scrape:\n{s}"
        return s

    return eventually(scraped, timeout, "the condition on the scrape", interval=0.1)


def scrape_within(exp: Exporter, seconds: float) -> list[Series]:
    """One scrape, which must answer within `seconds`: a hung call must not hold it."""
    started = time.monotonic()
    s = parse(exp.scrape())
    elapsed = time.monotonic() - started
    assert elapsed < seconds, f"the scrape took {elapsed:.2f}s"
    return s


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def full(s: list[Series], hw_id: str) -> bool:
    """The device reports every value of the h100 scenario."""
    names = {x.name for x in s if x.labels.get("hw_id") == hw_id}
    return {"hw_gpu_power_draw_watts", "hw_gpu_memory_usage_bytes", "hw_gpu_clock_hertz",
            "hw_gpu_energy_consumed_joules_total", "hw_errors_total",
            "hw_gpu_utilization_ratio", "hw_gpu_temperature_celsius"} <= names


def test_gpu_lost_mid_run_and_back(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        assert all(x.value == 1 for x in find(parse(exp.scrape()), "hw_gpu_up"))
        sc.lose(4)
        status, _, body = exp.get("/metrics")
        assert status == 200
        text = body.decode()
        s = parse(text)
        assert value(s, "hw_gpu_up", hw_id=uuid(4)) == 0
        assert value(s, "hw_status", hw_id=uuid(4), hw_state="failed") == 1
        assert not find(s, "hw_gpu_power_draw_watts", hw_id=uuid(4))
        assert find(s, "hw_gpu_info", hw_id=uuid(4))  # still known, not dropped
        for i in set(range(8)) - {4}:
            assert value(s, "hw_gpu_up", hw_id=uuid(i)) == 1
            assert full(s, uuid(i)), f"GPU {i} incomplete while GPU 4 is lost"
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
        promtool_check_metrics(text)
        golden.check("h100x8_gpu4_lost", text)
        sc.lose(4, False)
        s = parse(exp.scrape())
        assert value(s, "hw_gpu_up", hw_id=uuid(4)) == 1
        assert value(s, "hw_gpu_power_draw_watts", hw_id=uuid(4)) == pytest.approx(516.345)
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
        assert "is lost" in exp.logs()
        # UNKNOWN from any call, and a handle that is gone (GPU 7 left the bus), read
        # as lost too
        sc.devices[1].errors["nvmlDeviceGetClockInfo"] = "UNKNOWN"
        del sc.devices[7]
        sc.write()
        s = parse(exp.scrape())
        assert value(s, "hw_gpu_up", hw_id=uuid(1)) == 0
        assert value(s, "hw_gpu_up", hw_id=uuid(7)) == 0
        assert [value(s, "hw_gpu_up", hw_id=uuid(i)) for i in (0, 2, 3, 4, 5, 6)] == [1] * 6


def test_hung_call_cannot_hang_the_scrape(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[3].hangs["nvmlDeviceGetEnforcedPowerLimit"] = 4.0
    with running(fake_lib, sc, tmp_path, ["--scrape.timeout=1"]) as exp:
        counts = []
        for _ in range(8):
            # The call hangs 4 s; the scrape must come back within its 1 s timeout.
            s = scrape_within(exp, 1.5)
            assert value(s, "hw_gpu_up", hw_id=uuid(3)) == 0
            assert find(s, "hw_gpu_info", hw_id=uuid(3))  # identity from discovery
            for i in set(range(8)) - {3}:
                assert full(s, uuid(i)), f"GPU {i} incomplete while GPU 3 hangs"
            assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
            counts.append(threads(exp.proc.pid))
        # The stuck GPU keeps one lane worker: a thread per scrape would pile up one stuck
        # thread per scrape (7 here). The slack is for the HTTP front's pool of scrape
        # workers, started as scrapes come (asyncio: no thread per connection).
        assert max(counts) - min(counts) <= 2, counts
        sc.hang(3, "nvmlDeviceGetEnforcedPowerLimit", None)
        s = wait_for(exp, lambda s: value(s, "hw_gpu_up", hw_id=uuid(3)) == 1, timeout=10)
        assert full(s, uuid(3))
        # Recovered: no thread more once the last scrapes' connection threads have ended.
        eventually(lambda: threads(exp.proc.pid) <= max(counts), 5,
                   f"at most {max(counts)} threads once recovered")
        assert exp.logs().count("did not answer NVML within the scrape timeout") == 1


def test_driver_loaded_late_then_unloaded_and_back(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.init_error = "DRIVER_NOT_LOADED"
    with running(fake_lib, sc, tmp_path, ["--collector.retry-interval=0.2"]) as exp:
        s = parse(exp.scrape())
        assert value(s, "gpu_exporter_feature_status", feature="nvidia", state="unavailable") == 1
        assert not find(s, "hw_gpu_up")
        sc.init_error = None
        sc.write()
        s = wait_for(exp, lambda s: len(find(s, "hw_gpu_up")) == 8)
        assert value(s, "gpu_exporter_feature_status", feature="nvidia", state="enabled") == 1
        # the driver goes away under a running exporter, then comes back
        sc.init_error = "DRIVER_NOT_LOADED"
        sc.write()
        s = wait_for(exp, lambda s: value(s, "gpu_exporter_feature_status", feature="nvidia",
                                          state="unavailable") == 1)
        assert not find(s, "hw_gpu_up")
        sc.init_error = None
        sc.write()
        s = wait_for(exp, lambda s: len(find(s, "hw_gpu_up")) == 8
                     and all(x.value == 1 for x in find(s, "hw_gpu_up")))
        assert full(s, uuid(0))
        assert "NVIDIA driver not loaded" in exp.logs()


def test_library_absent(tmp_path: Path) -> None:
    res = run_cli(["doctor", *nvidia_only()], env=fake.env(None, None))
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("nvidia"))
    assert "unavailable" in line and "libnvidia-ml.so.1 not found" in line
    with running(None, fake.h100x8(), tmp_path) as exp:
        text = exp.scrape()
    s = parse(text)
    assert value(s, "gpu_exporter_feature_status", feature="nvidia", state="unavailable") == 1
    assert find(s, "gpu_exporter_build_info")
    assert not find(s, "hw_gpu_up")
    promtool_check_metrics(text)


def test_doctor_says_why_and_what_to_do(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    for code, reason, fix in (
        ("DRIVER_NOT_LOADED", "NVIDIA driver not loaded", "modprobe nvidia"),
        ("NO_PERMISSION", "no permission to use NVML", "/dev/nvidiactl"),
        ("LIB_RM_VERSION_MISMATCH", "versions differ", "reboot"),
    ):
        sc.init_error = code
        path = sc.write(tmp_path / "gpus.scenario")
        res = run_cli(["doctor", *nvidia_only()], env=fake.env(fake_lib, path))
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        at = next(i for i, x in enumerate(lines) if x.startswith("nvidia "))
        assert "unavailable" in lines[at] and reason in lines[at], res.stdout
        assert "fix:" in lines[at + 1] and fix in lines[at + 1], res.stdout
    path = fake.Scenario(devices=[]).write(tmp_path / "none.scenario")
    res = run_cli(["doctor", *nvidia_only()], env=fake.env(fake_lib, path))
    assert "NVML lists no NVIDIA GPU" in res.stdout and "--gpus all" in res.stdout
    sc.init_error = None
    path = sc.write(tmp_path / "gpus.scenario")
    res = run_cli(["doctor", *nvidia_only()], env=fake.env(fake_lib, path))
    assert "enabled" in res.stdout and "8 GPU(s)" in res.stdout


def test_old_driver_falls_back(old_lib: Path, tmp_path: Path) -> None:
    """No memory info v2, no field values, no clock event reasons, no TemperatureV."""
    with running(old_lib, fake.h100x8(), tmp_path) as exp:
        text = exp.scrape()
    s = parse(text)
    for i in range(8):
        dev = {"hw_id": uuid(i)}
        # v1 counts the driver's 512 MiB reservation as used
        assert value(s, "hw_gpu_memory_usage_bytes", **dev) == (40 + i) * GIB + 512 * 1024**2
        assert value(s, "hw_gpu_energy_consumed_joules_total", **dev) == pytest.approx(
            123456.789 + i / 1000)  # nvmlDeviceGetTotalEnergyConsumption
        assert value(s, "hw_errors_total", error_type="corrected", **dev) == i
        assert value(s, "hw_errors_total", error_type="pcie_replay", **dev) == 2 * i
        assert value(s, "hw_gpu_temperature_celsius", sensor="die", **dev) == 50 + i
        # only field values carry these: absent, not 0
        assert not find(s, "hw_gpu_temperature_celsius", sensor="memory", **dev)
        assert not find(s, "hw_gpu_io_bytes_total", **dev)
    assert value(s, "hw_gpu_clock_throttle_active", hw_id=uuid(1), reason="sw_power_cap") == 1
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    promtool_check_metrics(text)


def test_failing_field_is_absent_and_logged_once(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[5].field_errors[185] = "NO_PERMISSION"  # GPU power (the 1 s average)
    sc.devices[6].field_errors[82] = "NO_PERMISSION"  # memory temperature
    sc.devices[7].errors["nvmlDeviceGetEncoderUtilization"] = "NOT_SUPPORTED"
    with running(fake_lib, sc, tmp_path) as exp:
        for _ in range(3):
            s = parse(exp.scrape())
        assert value(s, "hw_gpu_up", hw_id=uuid(5)) == 1
        assert not find(s, "hw_gpu_power_draw_watts", hw_id=uuid(5))
        assert value(s, "hw_gpu_power_limit_watts", hw_id=uuid(5)) == 700
        assert not find(s, "hw_gpu_temperature_celsius", hw_id=uuid(6), sensor="memory")
        assert value(s, "hw_gpu_temperature_celsius", hw_id=uuid(6), sensor="die") == 56
        assert not find(s, "hw_gpu_utilization_ratio", hw_id=uuid(7), hw_gpu_task="encoder")
        assert len(find(s, "hw_gpu_power_draw_watts")) == 7
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
        logs = exp.logs()
    assert logs.count("field 185 failed on " + uuid(5)) == 1
    assert logs.count("field 82 failed on " + uuid(6)) == 1
    assert "nvmlDeviceGetEncoderUtilization" not in logs  # NOT_SUPPORTED is silent


def test_xid_events_are_counted(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
        assert value(s, "hw_errors_total", hw_id=uuid(6), error_type="xid") == 0
        assert not find(s, "hw_gpu_xid_last_code")  # no XID yet: no last one
        sc.devices[6].xids = [13, 79, 13, 4000]  # 4000: a code past NVIDIA's catalog
        sc.write()

        def counted(s: list[Series]) -> bool:
            return bool(find(s, "hw_errors_total", hw_id=uuid(6), error_type="xid")) and \
                value(s, "hw_errors_total", hw_id=uuid(6), error_type="xid") == 4

        s = wait_for(exp, counted)
        # each code with what NVIDIA's Xid Catalog says to do first
        assert value(s, "hw_gpu_xid_errors_total", hw_id=uuid(6), xid="13",
                     action="restart_app") == 2
        assert value(s, "hw_gpu_xid_errors_total", hw_id=uuid(6), xid="79",
                     action="restart_bm") == 1
        assert value(s, "hw_gpu_xid_errors_total", hw_id=uuid(6), xid="4000",
                     action="unknown") == 1
        assert value(s, "hw_gpu_power_draw_watts", hw_id=uuid(6)) > 0  # nothing else hidden
        assert value(s, "hw_status", hw_id=uuid(6), hw_state="failed") == 1  # 79: off the bus
        assert value(s, "hw_errors_total", hw_id=uuid(5), error_type="xid") == 0
        assert not find(s, "hw_gpu_xid_errors_total", hw_id=uuid(5))
        # the last code, dcgm-exporter's DCGM_FI_DEV_XID_ERRORS, on that GPU alone
        assert value(s, "hw_gpu_xid_last_code", hw_id=uuid(6)) == 4000
        assert [x.labels["hw_id"] for x in find(s, "hw_gpu_xid_last_code")] == [uuid(6)]
        # each event is delivered once: later scrapes do not count it again
        time.sleep(0.6)
        s = parse(exp.scrape())
        assert value(s, "hw_errors_total", hw_id=uuid(6), error_type="xid") == 4
        # and the last code is held after the event
        assert value(s, "hw_gpu_xid_last_code", hw_id=uuid(6)) == 4000
        sc.devices[6].xids.append(31)  # a later event replaces it
        sc.write()
        wait_for(exp, lambda s: value(s, "hw_gpu_xid_last_code", hw_id=uuid(6)) == 31)


def test_gpu_hanging_at_discovery_delays_nothing(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[2].hangs["nvmlDeviceGetUUID"] = 3.0
    started = time.monotonic()
    with running(fake_lib, sc, tmp_path, ["--scrape.timeout=1"]) as exp:
        s = parse(exp.scrape())
        # start-up waited one scrape timeout for GPU 2, not its 3 s hang
        assert time.monotonic() - started < 3.0
        assert sorted(x.labels.get("hw_id", "") for x in find(s, "hw_gpu_up") if x.value) == \
            sorted(uuid(i) for i in range(8) if i != 2)
        # GPU 2 is down, known by the PCI address it gave before its UUID call hung
        hung = find(s, "hw_gpu_up", gpu_pci_address="0000:3a:00.0")
        assert [(x.value, x.labels["gpu_index"], "hw_id" in x.labels) for x in hung] == \
            [(0, "2", False)]
        assert not find(s, "hw_status", gpu_pci_address="0000:3a:00.0")  # unknown, not ok
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
        sc.devices[2].hangs.clear()
        sc.write()
        s = wait_for(exp, lambda s: len(find(s, "hw_gpu_up")) == 8
                     and all(x.value == 1 for x in find(s, "hw_gpu_up")), timeout=10)
        assert value(s, "hw_gpu_up", hw_id=uuid(2), gpu_index="2") == 1
        assert full(s, uuid(2))
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_xid_events_are_counted_once_a_stuck_event_wait_returns(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path, ["--scrape.timeout=1"]) as exp:
        parse(exp.scrape())
        sc.devices[2].hangs["nvmlEventSetWait_v2"] = 2.0
        sc.devices[6].xids = [31]
        sc.write()
        started = time.monotonic()
        s = parse(exp.scrape())
        assert time.monotonic() - started < 1.5  # the wait is no part of a scrape
        assert all(full(s, uuid(i)) for i in range(8))
        sc.devices[2].hangs.clear()
        sc.write()
        s = wait_for(exp, lambda s: value(s, "hw_errors_total", hw_id=uuid(6),
                                          error_type="xid") == 1, timeout=10)
        assert value(s, "hw_gpu_xid_errors_total", hw_id=uuid(6), xid="31") == 1
