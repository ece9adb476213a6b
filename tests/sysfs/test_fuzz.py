"""Hypothesis against the parsers: garbage, NUL, huge, negative, empty. collect() never
raises, and a value is either absent or exactly what the file says (converted)."""

from __future__ import annotations

import re
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpu_exporter.collectors.amd import AmdCollector
from gpu_exporter.collectors.base import Sink
from gpu_exporter.collectors.intel import IntelCollector
from gpu_exporter.model.settings import Settings
from gpu_exporter.readers.procfs.fdinfo import parse_fdinfo
from gpu_exporter.readers.sysfs.amd_gpu_metrics import GpuMetricsError, decode
from tests.sysfs.tree import FakeSysfs

AMD, INTEL = "0000:0c:00.0", "0000:03:00.0"
MON = "hwmon/hwmon5"

numbers = st.integers(min_value=-(10**30), max_value=10**30).map(lambda n: str(n).encode())
contents = st.one_of(
    st.binary(max_size=48),
    numbers,
    st.tuples(numbers, st.sampled_from([b"", b"\n", b"\n\0\0\0", b"\0" * 4000, b" x"])).map(
        lambda t: t[0] + t[1]),
    st.sampled_from([b"", b"\0" * 4096, b"\n", b"1_000", b"+5", b"\xd9\xa3", b"0x10",
                     b"18446744073709551616", b"-0", b"007"]),
)


def oracle(raw: bytes, maximum: int) -> int | None:
    """What a careful person reads from the file: the text before the first NUL, ASCII
    white space stripped (what the kernel pads with: not the other control characters
    that str.strip() also takes, such as 0x1c), plain ASCII digits, within range."""
    text = raw.split(b"\0", 1)[0].strip().decode("utf-8", "replace")
    if not re.fullmatch(r"[0-9]+", text):
        return None
    n = int(text)
    return n if n <= maximum else None


@pytest.fixture(scope="module")
def tree() -> Iterator[FakeSysfs]:
    root = Path(tempfile.mkdtemp(prefix="gpu-exporter-fuzz-"))
    try:
        t = FakeSysfs(root / "sys")
        t.add("rx6900xt", AMD, 0)
        t.add("a380", INTEL, 1)
        (root / "proc").mkdir()
        yield t
    finally:
        shutil.rmtree(root)


def collect(collector_cls: type, tree: FakeSysfs) -> Sink:
    s = Settings(sysfs=str(tree.root), procfs=str(tree.root.parent / "proc"),
                 enabled_collectors=frozenset({collector_cls.name}))
    collector = collector_cls(s)
    assert collector.start().state == "enabled"
    sink = Sink(collector_cls.name, time.monotonic() + 10)
    collector.collect(sink)  # must not raise, whatever the files say
    return sink


@settings(max_examples=60, deadline=None)
@given(busy=contents, used=contents, temp=contents, power=contents, blob=st.binary(max_size=160))
def test_amd_collect_never_raises_never_lies(tree: FakeSysfs, busy: bytes, used: bytes,
                                             temp: bytes, power: bytes, blob: bytes) -> None:
    dev = tree.cards[AMD].device
    (dev / "gpu_busy_percent").write_bytes(busy)
    (dev / "mem_info_vram_used").write_bytes(used)
    (dev / MON / "temp1_input").write_bytes(temp)
    (dev / MON / "power1_average").write_bytes(power)
    (dev / "gpu_metrics").write_bytes(blob)
    sink = collect(AmdCollector, tree)
    [reading] = sink.gpus
    assert reading.up
    pct = oracle(busy, 100)
    assert reading.utilization_ratio.get("general") == (None if pct is None else pct / 100)
    assert reading.memory_usage_bytes == oracle(used, 1 << 50)
    milli = oracle(temp, 500_000)
    assert reading.temperature_celsius.get("edge") == (None if milli is None else milli / 1000)
    micro = oracle(power, 100_000 * 10**6)
    assert reading.power_draw_watts == (None if micro is None else micro * 1e-6)
    # untouched files still read
    assert reading.memory_limit_bytes == 17163091968
    assert reading.temperature_celsius["junction"] == 59.0
    # every garbage value was reported (collector_success 0), nothing else was
    garbage = [raw for raw, top in ((busy, 100), (used, 1 << 50), (temp, 500_000),
                                    (power, 100_000 * 10**6))
               if raw.split(b"\0", 1)[0].strip() and oracle(raw, top) is None]
    assert len([f for f in sink.failures if "gpu_metrics" not in f[0]]) == len(garbage)
    expected_energy = _energy_oracle(blob)
    assert reading.energy_consumed_joules == expected_energy


def _energy_oracle(blob: bytes) -> float | None:
    if len(blob) < 4:
        return None
    size, fmt, content = struct.unpack_from("<HBB", blob)
    if (fmt, content) != (1, 3) or not 32 <= size <= len(blob):
        return None
    raw = int.from_bytes(blob[24:32], "little")
    return None if raw in (0, 2**64 - 1) else raw / 65536


@settings(max_examples=40, deadline=None)
@given(energy=contents, freq=contents, limit=contents)
@example(energy=b"\x1c0", freq=b"\x1c0", limit=b"\x1c1")  # a control byte, not white space
def test_intel_collect_never_raises_never_lies(tree: FakeSysfs, energy: bytes, freq: bytes,
                                               limit: bytes) -> None:
    dev = tree.cards[INTEL].device
    card = tree.cards[INTEL].card
    (dev / "hwmon/hwmon1/energy1_input").write_bytes(energy)
    (dev / "hwmon/hwmon1/power1_max").write_bytes(limit)
    (card / "gt_act_freq_mhz").write_bytes(freq)
    [reading] = collect(IntelCollector, tree).gpus
    uj = oracle(energy, 1 << 63)
    assert reading.energy_consumed_joules == (None if uj is None else uj * 1e-6)
    mhz = oracle(freq, 100_000)
    if mhz is not None:
        assert reading.clock_hertz["graphics"] == mhz * 1e6
    else:  # falls back to the per-GT file, untouched
        assert reading.clock_hertz["graphics"] == 600e6
    uw = oracle(limit, 100_000 * 10**6)
    assert reading.power_limit_watts == (uw * 1e-6 if uw else None)  # power1_rated_max is 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_gpu_metrics_decoder(blob: bytes) -> None:
    try:
        m = decode(blob)
    except GpuMetricsError:
        return
    assert m.structure_size <= len(blob)
    assert m.energy_joules is None or m.energy_joules > 0


fdinfo_lines = st.lists(st.one_of(
    st.text(max_size=40),
    st.builds(lambda k, v: f"{k}:\t{v}",
              st.sampled_from(["drm-driver", "drm-client-id", "drm-pdev", "drm-engine-render",
                               "drm-engine-capacity-video", "drm-cycles-rcs",
                               "drm-total-cycles-rcs", "drm-resident-vram0",
                               "drm-memory-vram"]),
              st.one_of(st.sampled_from(["i915", "xe", "amdgpu", "0000:03:00.0", "7",
                                         "12 ns", "4 KiB", "-1", "1e3", "", "9 MiB"]),
                        st.text(max_size=12))),
), max_size=12)


@settings(max_examples=400, deadline=None)
@given(fdinfo_lines)
def test_fdinfo_parser(lines: list[str]) -> None:
    client = parse_fdinfo("\n".join(lines), 1)
    if client is None:
        return
    assert client.driver in ("i915", "xe", "amdgpu")
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", client.pci_address)
    assert client.client_id >= 0
    assert all(v >= 0 for v in client.engine_busy_ns.values())
    assert all(v >= 0 for v in client.engine_cycles.values())
    assert all(v > 0 for v in client.engine_capacity.values())
    assert client.vram_bytes is None or client.vram_bytes >= 0
