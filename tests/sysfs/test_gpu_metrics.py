"""gpu_metrics decoding: the real captures, and blobs packed here from the kernel's
documented struct layouts (kgd_pp_interface.h), field by field."""

from __future__ import annotations

import struct

import pytest

from gpu_exporter.readers.sysfs.amd_gpu_metrics import DECODED_REVISIONS, GpuMetricsError, decode
from tests.sysfs.tree import raw

J = 2.0**-16  # 15.259 µJ


def header(size: int, fmt: int, content: int) -> bytes:
    return struct.pack("<HBB", size, fmt, content)


def v1_0(energy: int) -> bytes:
    # header, 4 bytes of alignment padding, u64 system_clock_counter, 6 u16 temperatures,
    # 3 u16 activities, u16 average_socket_power, u32 energy_accumulator, ...
    body = (struct.pack("<4xQ", 123) + struct.pack("<6H", *range(6))
            + struct.pack("<3H", 1, 2, 3) + struct.pack("<H", 40) + struct.pack("<I", energy))
    body += b"\x11" * 40  # clocks, throttle status, fan, link
    return header(4 + len(body), 1, 0) + body


def v1_x(content: int, energy: int) -> bytes:
    # 1.1..1.3: 6 u16 temperatures, 3 u16 activities, u16 power, u64 energy_accumulator
    body = (struct.pack("<6H", *range(6)) + struct.pack("<3H", 1, 2, 3)
            + struct.pack("<H", 40) + struct.pack("<Q", energy) + b"\x22" * 80)
    return header(4 + len(body), 1, content) + body


def v1_4(energy: int) -> bytes:
    # 3 u16 temperatures, u16 power, 2 u16 activities, u16 vcn_activity[4], u64 energy
    body = (struct.pack("<3H", 1, 2, 3) + struct.pack("<H", 500) + struct.pack("<2H", 9, 8)
            + struct.pack("<4H", 1, 1, 1, 1) + struct.pack("<Q", energy) + b"\x33" * 200)
    return header(4 + len(body), 1, 4) + body


def v1_5(energy: int) -> bytes:
    # as 1.4 with u16 jpeg_activity[32] before the energy accumulator
    body = (struct.pack("<3H", 1, 2, 3) + struct.pack("<H", 500) + struct.pack("<2H", 9, 8)
            + struct.pack("<4H", 1, 1, 1, 1) + struct.pack("<32H", *([7] * 32))
            + struct.pack("<Q", energy) + b"\x44" * 200)
    return header(4 + len(body), 1, 5) + body


def test_rx6900xt_capture_is_1_3() -> None:
    blob = raw("rx6900xt", "device/gpu_metrics")
    assert len(blob) == 4096  # NUL-padded page
    m = decode(blob)
    assert (m.format_revision, m.content_revision, m.structure_size) == (1, 3, 120)
    assert m.energy_joules == pytest.approx(17691682 * J)


def test_phoenix_capture_is_2_1_without_energy() -> None:
    m = decode(raw("phoenix", "device/gpu_metrics"))
    assert (m.format_revision, m.content_revision) == (2, 1)
    assert m.energy_joules is None


@pytest.mark.parametrize("build,rev", [
    (v1_0, (1, 0)),
    (lambda e: v1_x(1, e), (1, 1)),
    (lambda e: v1_x(2, e), (1, 2)),
    (lambda e: v1_x(3, e), (1, 3)),
    (v1_4, (1, 4)),
    (v1_5, (1, 5)),
])
def test_documented_layouts(build: object, rev: tuple[int, int]) -> None:
    assert rev in DECODED_REVISIONS
    m = decode(build(3_000_000) + b"\0" * 100)  # type: ignore[operator]
    assert (m.format_revision, m.content_revision) == rev
    assert m.energy_joules == pytest.approx(3_000_000 * J)


def test_unsupported_and_unset_fields_are_absent() -> None:
    assert decode(v1_4(0)).energy_joules is None  # not counted on this part
    assert decode(v1_4(2**64 - 1)).energy_joules is None  # firmware: "not supported"
    assert decode(v1_0(2**32 - 1)).energy_joules is None
    assert decode(header(64, 1, 9) + b"\x55" * 60).energy_joules is None  # unknown 1.9
    assert decode(header(64, 3, 0) + b"\x55" * 60).energy_joules is None


@pytest.mark.parametrize("blob", [
    b"",
    b"\x78\x00",
    header(120, 1, 3) + b"\0" * 10,  # header claims more than there is
    header(2, 1, 3) + b"\0" * 100,  # a size smaller than the header itself
    header(20, 1, 3) + b"\0" * 100,  # too short for the 1.3 layout
])
def test_short_blobs_are_errors(blob: bytes) -> None:
    with pytest.raises(GpuMetricsError):
        decode(blob)
