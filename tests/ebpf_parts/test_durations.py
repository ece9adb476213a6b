"""Samples derived in Python (gpu_exporter/sources/ebpf/durations.py: closed groups, stream
waits, elapsed times) kept in a table of our own and merged with `stats` when the maps
are read (issue #34: data flows one way, nothing written back into the kernel's maps):
read, folded and dropped as the same counters read from `stats` were; and the one
definition of a histogram slot (ebpf_abi.SLOT_BOUNDS) that program.c's SLOT_OF is
written out from, compiled with the C compiler and run against Python's slot_of."""

from __future__ import annotations

import random
import struct
import subprocess
from pathlib import Path

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.durations import EVENT, WAIT, Durations
from gpu_exporter.sources.ebpf.reading import CudaActivity
from tests.ebpf_parts.parts import Parts, parts

TGID = 4_000_400
GEMM, RELU = 0x1000, 0x2000  # driver kernels (CUfunction handles)
DEV = 1


def _group(bound_ns: int, kernels: list[tuple[int, int]], other: int = 0,
           completion: int = abi.COMPLETION_EVENT) -> bytes:
    """An EV_DURATIONS record: driver kernels (handle, launches) bounded by `bound_ns`."""
    tags = [handle | (abi.API_DRIVER + 1) << 48 for handle, _ in kernels]
    counts = [n for _, n in kernels]
    pad = abi.GROUP_KERNELS - len(kernels)
    return EVENT.pack(abi.EV_DURATIONS, TGID, completion, 0, DEV, bound_ns, 0,
                      *tags, *[0] * pad, *counts, *[0] * pad, other)


def _wait(bound_ns: int | None) -> bytes:
    return WAIT.pack(abi.EV_WAIT, TGID, bound_ns is not None, 0, DEV, bound_ns or 0, 0)


def _elapsed(handle: int, ms: float) -> bytes:
    (bits,) = struct.unpack("<I", struct.pack("<f", ms))
    return WAIT.pack(abi.EV_ELAPSED, TGID, abi.API_DRIVER, 0, DEV, handle, bits)


SAMPLES = [_group(3_000, [(GEMM, 2), (RELU, 1)]), _group(70_000, [(GEMM, 5)], other=3),
           _group(1, [(RELU, 4)], completion=abi.COMPLETION_SYNC_FALLBACK),
           _wait(None), _wait(None), _wait(2_500_000), _wait(0),
           _elapsed(GEMM, 0.25), _elapsed(GEMM, 1.5), _elapsed(RELU, float("nan"))]


def _feed(d: Durations, samples: list[bytes]) -> None:
    for raw in samples:
        kind = struct.unpack_from("<I", raw)[0]
        {abi.EV_DURATIONS: d.on_event, abi.EV_WAIT: d.on_wait,
         abi.EV_ELAPSED: d.on_elapsed}[kind](raw)


def _trainer(p: Parts) -> None:
    p.process(TGID, "trainer")
    p.name(TGID, GEMM, "_Z6k_gemmv")
    p.name(TGID, RELU, "_Z6k_relui")
    p.count(TGID, abi.FAM_LAUNCH, abi.API_DRIVER, GEMM, 7)


def _histograms(a: CudaActivity) -> tuple[object, ...]:
    return (a.kernel_duration_seconds, a.stream_waits, a.stream_wait_bound_seconds,
            a.kernel_elapsed_seconds, a.launches)


def test_python_samples_read_as_the_same_counters_in_stats_did(tmp_path: Path) -> None:
    """Written into `stats` (as before issue #34) or kept in our table: the same reading;
    and the kernel's map holds only what the program counted."""
    old = parts(tmp_path / "old")
    _trainer(old)
    reference = Durations()
    _feed(reference, SAMPLES)
    for key, n in reference.entries():  # what the old code wrote, key for key
        old.count(key.tgid, key.fam, key.sub, key.id, n, key.slot, key.dev)
    expected = old.reader.read()
    assert expected.kernel_duration_seconds and expected.stream_waits
    assert expected.stream_wait_bound_seconds and expected.kernel_elapsed_seconds

    new = parts(tmp_path / "new")
    _trainer(new)
    _feed(new.reader.durations, SAMPLES)
    assert len(new.maps["stats"]) == 1  # the launch counter the program wrote, alone
    for _ in range(2):
        assert _histograms(new.reader.read()) == _histograms(expected)
    assert new.reader.durations.entries() == reference.entries()


def test_an_exited_process_s_samples_are_folded_out_of_the_table(tmp_path: Path) -> None:
    p = parts(tmp_path)
    _trainer(p)
    _feed(p.reader.durations, SAMPLES)
    alive = _histograms(p.reader.read())
    p.exit(TGID)
    for _ in range(2):  # folded at the first read, then from our own totals
        assert _histograms(p.reader.read()) == alive
        assert p.reader.durations.entries() == [] and len(p.maps["stats"]) == 0
    # A late sample of the folded process (its record read after the fold): kept in the
    # table, as a late counter in `stats` would stay there, not lost.
    p.reader.durations.on_wait(_wait(None))
    assert _histograms(p.reader.read()) == alive
    assert len(p.reader.durations.entries()) == 1


def test_a_full_table_drops_whole_samples_and_counts_them(tmp_path: Path) -> None:
    p = parts(tmp_path)
    _trainer(p)
    p.reader.durations = Durations(capacity=3)
    p.reader.durations.on_wait(_wait(None))  # one key
    p.reader.durations.on_wait(_wait(2_000))  # two keys: full
    p.reader.durations.on_wait(_wait(None))  # its key exists: counted
    p.reader.durations.on_wait(_wait(9_000_000))  # a new slot: dropped whole
    p.reader.durations.on_event(_group(3_000, [(GEMM, 2), (RELU, 1)]))  # 3 launches dropped
    a = p.reader.read()
    assert [w.count for w in a.stream_waits] == [2]
    assert [h.histogram.count for h in a.stream_wait_bound_seconds] == [1]
    assert a.kernel_duration_seconds == []
    assert a.dropped[abi.DROP_NAMES[abi.DROP_STATS_FULL]] == 1 + 3


def test_slot_of_is_the_bisection_of_the_bounds() -> None:
    values = [0, 1, 2, 3, 4, 5, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1]
    values += [v + d for s in range(64) for d in (-1, 0, 1) if (v := 1 << s) + d >= 0]
    for v in values:
        assert abi.slot_of(v) == (0 if v <= 1 else (v - 1).bit_length()), v


def test_program_c_slot_of_is_python_s(tmp_path: Path) -> None:
    """program.c's SLOT_OF, as abi.defines() gives it to the compiler, compiled with cc
    and run on the edges of every slot and on random values: Python's answers."""
    rng = random.Random(34)
    values = [0, 1, 2**64 - 1] + [v + d for s in range(64) for d in (-1, 0, 1)
                                  if 0 <= (v := 1 << s) + d < 2**64]
    values += [rng.getrandbits(rng.randint(1, 64)) for _ in range(5000)]
    source = tmp_path / "slot.c"
    source.write_text("#include <stdio.h>\n#include <stdlib.h>\n"
                      "int main(void) { char line[64];\n"
                      "  while (fgets(line, sizeof line, stdin)) {\n"
                      "    unsigned long long v = strtoull(line, 0, 10);\n"
                      "    printf(\"%d\\n\", (int)SLOT_OF(v)); }\n  return 0; }\n")
    slot_define = next(d for d in abi.defines() if d.startswith("-DSLOT_OF("))
    subprocess.run(["cc", "-O2", slot_define, "-o", str(tmp_path / "slot"), str(source)],
                   check=True, timeout=60)
    out = subprocess.run([str(tmp_path / "slot")], input="".join(f"{v}\n" for v in values),
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert [int(x) for x in out.split()] == [abi.slot_of(v) for v in values]
