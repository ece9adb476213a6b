"""The fake NVML's event wait blocks like the real one: a thread waiting for XID events
is not woken while nothing changes (it used to look at the scenario file every 10 ms,
which was most of an idle exporter's CPU), and an event written meanwhile still ends
the wait at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pynvml

from tests.fake_nvml import scenario as fake
from tests.helpers import eventually


def _switches(tid: int) -> int:
    """Times the thread gave up the CPU of its own accord (each sleep, each poll)."""
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


def test_event_wait_sleeps_until_the_scenario_changes(tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:1]
    path = sc.write(tmp_path / "one.scenario")
    fake.load_in_process(path)
    pynvml.nvmlInit()
    try:
        events = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(0),
                                        pynvml.nvmlEventTypeXidCriticalError, events)
        got: dict[str, Any] = {}

        def wait() -> None:
            got["tid"] = threading.get_native_id()
            got["data"] = pynvml.nvmlEventSetWait_v2(events, 20_000)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        tid = int(eventually(lambda: got.get("tid", 0), what="the waiting thread"))
        start = _switches(tid)
        waiter.join(1.0)  # a second of nothing happening
        assert waiter.is_alive()
        # 10 ms polling: ~100 wake-ups a second; blocking: the few of starting the wait.
        assert _switches(tid) - start <= 10, _switches(tid) - start

        sc.devices[0].xids.append(79)
        sc.write(path)
        waiter.join(5.0)  # far below the wait's 20 s timeout
        assert not waiter.is_alive()
        assert got["data"].eventData == 79
        pynvml.nvmlEventSetFree(events)
    finally:
        pynvml.nvmlShutdown()
