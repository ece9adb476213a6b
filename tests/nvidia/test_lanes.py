"""GPUs are read in a few lanes, one GPU after another (gpu_exporter/collectors/nvidia.py):
a GPU that hangs at the head of its lane must not take the GPUs queued behind it down
with it, whether it hangs from the start or once the exporter already runs."""

from __future__ import annotations

from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import find, parse, value
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import full, scrape_within, threads, uuid, wait_for

HUNG = (0, 4)  # 8 GPUs make one lane: GPU 0 hangs first, then GPU 4 in the lane after


def test_hung_gpus_at_the_head_of_lanes_leave_the_rest_complete(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path, ["--scrape.timeout=1"]) as exp:
        assert all(x.value == 1 for x in find(parse(exp.scrape()), "hw_gpu_up"))
        for i in HUNG:
            sc.hang(i, "nvmlDeviceGetUtilizationRates", 4.0)
        counts = []
        for _ in range(5):
            s = scrape_within(exp, 1.5)
            for i in range(8):
                if i in HUNG:
                    assert value(s, "hw_gpu_up", hw_id=uuid(i)) == 0
                else:
                    assert full(s, uuid(i)), f"GPU {i} incomplete while {HUNG} hang"
            assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
            counts.append(threads(exp.proc.pid))
        # A stuck lane keeps its worker; no new thread per scrape.
        assert max(counts) - min(counts) <= 2, counts
        for i in HUNG:
            sc.hang(i, "nvmlDeviceGetUtilizationRates", None)
        s = wait_for(exp, lambda s: all(x.value == 1 for x in find(s, "hw_gpu_up")), timeout=10)
        assert all(full(s, uuid(i)) for i in range(8))
