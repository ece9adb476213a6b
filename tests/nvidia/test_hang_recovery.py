"""A GPU or NVML that stops answering costs one scrape, not every one, and what comes
back is reported from the first scrape that can see it."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, eventually, find, parse, value
from tests.nvidia import driverfs
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import full, uuid, wait_for

TIMEOUT = 2.0  # --scrape.timeout
HANG = 8.0  # how long GPU 3's identity call hangs (the fake sleeps, then answers)
# What the nvidia collector itself says it took: a scrape that waits for the hung GPU
# takes most of the scrape timeout; one that does not, milliseconds.
WAITED = TIMEOUT / 2


def _nvidia_seconds(text: str) -> float:
    return value(parse(text), "gpu_exporter_collector_duration_seconds", collector="nvidia")


def test_a_gpu_hung_since_start_costs_no_scrape_and_comes_back(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[3].hangs["nvmlDeviceGetUUID"] = HANG
    hung_at = time.monotonic()
    with running(fake_lib, sc, tmp_path, [f"--scrape.timeout={TIMEOUT}",
                                          "--collector.retry-interval=0.5"]) as exp:
        sc.devices[3].hangs.clear()
        sc.write()  # later calls answer at once; the one in flight sleeps on
        durations = []
        while time.monotonic() - hung_at < HANG - 2 * TIMEOUT:
            text = exp.scrape()
            durations.append(_nvidia_seconds(text))
            s = parse(text)
            # GPU 3 is down, known by the PCI address it gave before its UUID call hung
            assert [x.value for x in find(s, "hw_gpu_up", gpu_pci_address="0000:5d:00.0")] \
                == [0], s
            assert len(find(s, "hw_gpu_up", hw_id=uuid(0))) == 1
        assert len(durations) >= 3
        assert [d for d in durations if d >= WAITED] == [], durations
        # ... and it is back once the hung call returns, without a restart.
        s = wait_for(exp, lambda s: bool(find(s, "hw_gpu_up", hw_id=uuid(3))) and
                     value(s, "hw_gpu_up", hw_id=uuid(3)) == 1, timeout=HANG + 10)
        assert full(s, uuid(3))
        assert len(find(s, "hw_gpu_up")) == 8


def test_the_first_scrape_after_a_driver_reload_has_every_gpu(
        fake_lib: Path, tmp_path: Path) -> None:
    """With the driver's GPU list (procfs), the collector stays on while NVML is gone,
    its GPUs read down; when NVML answers again, the scrape that starts it reads them."""
    proc = driverfs.procfs(tmp_path)
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path, [f"--path.procfs={proc}",
                                          "--collector.retry-interval=0.2"]) as exp:
        assert len(find(parse(exp.scrape()), "hw_gpu_up")) == 8
        sc.init_error = "DRIVER_NOT_LOADED"
        sc.write()
        s = wait_for(exp, lambda s: value(s, "gpu_exporter_feature_status",
                                          feature="nvidia.nvml", state="unavailable") == 1)
        assert len(find(s, "hw_gpu_up")) == 8 and {x.value for x in find(s, "hw_gpu_up")} \
            == {0}
        sc.init_error = None
        sc.write()
        seen = []

        def nvml_back() -> list[Series]:
            s = parse(exp.scrape())
            seen.append(len(find(s, "hw_gpu_up")))
            return s if value(s, "gpu_exporter_feature_status", feature="nvidia.nvml",
                              state="enabled") == 1 else []

        s = eventually(nvml_back, 15, "NVML back", interval=0)
        assert set(seen) == {8}, seen  # never a scrape without them
        # The scrape that found NVML back read every GPU.
        assert [x.value for x in find(s, "hw_gpu_up")] == [1] * 8
        assert full(s, uuid(0))
