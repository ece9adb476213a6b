"""What a BPF counter is reported as (gpu_exporter/sources/ebpf/counters.py), alone: its device
once NVML's process list makes it certain, the split of its count there, and an
executable graph's launches by kernel. No maps, no bcc, no root."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.counters import STATS, Pending, Row
from gpu_exporter.sources.ebpf.reading import NvmlView
from tests.ebpf_parts.parts import parts

TGID = 4_000_400
GPU = "GPU-2f6f0c6e-4b5a-4d0e-9d7e-1f2a3b4c5d6e"
GEMM, RELU = 0x1000, 0x2000


def _rows(rows: list[Row]) -> list[tuple[str | None, int]]:
    return [(key.device, n) for (_, key, _), n in rows]


def test_a_count_made_before_its_device_was_known_stays_without_a_device(
        tmp_path: Path) -> None:
    p = parts(tmp_path, pid_label=False)
    p.process(TGID, "trainer")
    c = p.counters

    def launches(n: int) -> list[tuple[str | None, int]]:
        return _rows(c.counter_rows(STATS, TGID, abi.FAM_LAUNCH, abi.API_DRIVER, GEMM,
                                    abi.DEV_NONE, 0, n))

    assert launches(5) == [(None, 5)]  # NVML not read this scrape: no device
    c.nvml = NvmlView({TGID: frozenset({GPU})}, True, {})
    assert launches(8) == [(None, 5), (GPU, 3)]  # the device-less series never goes down
    c.nvml = None
    assert launches(9) == [(None, 5), (GPU, 4)]  # the device, once known, is kept
    c.forget({TGID})  # the process folded: a reused pid starts afresh
    assert launches(2) == [(None, 2)]


def test_an_executable_graphs_launches_count_by_its_kernels_once_its_event_is_read(
        tmp_path: Path) -> None:
    p = parts(tmp_path)
    p.process(TGID, "trainer")
    p.name(TGID, GEMM, "_Z6k_gemmv")
    p.name(TGID, RELU, "_Z6k_relui")
    serial = 9

    def rows() -> list[tuple[str, int]]:
        return [(key.kernel_name, n) for (_, key, _), n in p.counters.rows(
            TGID, abi.FAM_LAUNCH, abi.API_GRAPH, abi.GRAPH_SERIAL_BIT | serial, abi.DEV_NONE,
            0, 3)]

    with pytest.raises(Pending):  # its graph's event not read yet
        rows()
    p.graph(TGID, serial, [(abi.API_DRIVER, GEMM), (abi.API_DRIVER, RELU),
                           (abi.API_DRIVER, RELU)])
    assert sorted(rows()) == [("k_gemm", 3), ("k_relu", 6)]
