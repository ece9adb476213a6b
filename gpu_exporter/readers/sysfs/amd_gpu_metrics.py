"""Decode amdgpu's binary `gpu_metrics` blob (the energy accumulator).

The blob is a C struct from the kernel's `drivers/gpu/drm/amd/include/kgd_pp_interface.h`
behind a 4-byte header: `u16 structure_size, u8 format_revision, u8 content_revision`.
The layout differs per revision, so the header picks the decoder. Decoded revisions:

| revision | ASICs (examples) | energy_accumulator |
|---|---|---|
| 1.0 | Vega 20 | u32 at offset 36 |
| 1.1, 1.2, 1.3 | Arcturus, Navi 1x/2x (RX 6900 XT: 1.3) | u64 at offset 24 |
| 1.4 | Aqua Vanjaram (MI300) | u64 at offset 24 |
| 1.5 | Aqua Vanjaram (MI300, with 32 JPEG counters before it) | u64 at offset 88 |

The unit is 2^-16 J (15.259 µJ), written in the header for 1.4/1.5 and the counter
resolution AMD's own SMI library applies to every revision. Format 2 (APUs, e.g. the
Ryzen 7040 at 2.1) has no energy accumulator; later revisions (1.6+, 3.x) are not
decoded: their energy is absent rather than guessed. The firmware writes all-ones for
a field it does not support and leaves the accumulator at 0 on parts that do not count,
so both read as absent.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ENERGY_UNIT_JOULES = 2.0**-16
_HEADER = struct.Struct("<HBB")

# (format, content) -> (offset, struct format) of energy_accumulator
_ENERGY_FIELD: dict[tuple[int, int], tuple[int, str]] = {
    (1, 0): (36, "<I"),
    (1, 1): (24, "<Q"),
    (1, 2): (24, "<Q"),
    (1, 3): (24, "<Q"),
    (1, 4): (24, "<Q"),
    (1, 5): (88, "<Q"),
}
DECODED_REVISIONS: tuple[tuple[int, int], ...] = tuple(_ENERGY_FIELD)


class GpuMetricsError(ValueError):
    """The blob is too short for its header's size or revision."""


@dataclass(frozen=True)
class GpuMetrics:
    format_revision: int
    content_revision: int
    structure_size: int
    energy_joules: float | None  # None: this revision has none, or it is not counted


def decode(blob: bytes) -> GpuMetrics:
    """Decode one blob (NUL padding after `structure_size` is ignored). Raises
    GpuMetricsError when the header is short or claims more bytes than there are."""
    if len(blob) < _HEADER.size:
        raise GpuMetricsError(f"gpu_metrics blob of {len(blob)} bytes has no header")
    size, fmt, content = _HEADER.unpack_from(blob)
    if size < _HEADER.size or size > len(blob):
        raise GpuMetricsError(
            f"gpu_metrics header says {size} bytes, blob has {len(blob)}"
        )
    energy: float | None = None
    field = _ENERGY_FIELD.get((fmt, content))
    if field is not None:
        offset, layout = field
        width = struct.calcsize(layout)
        if offset + width > size:
            raise GpuMetricsError(
                f"gpu_metrics {fmt}.{content} of {size} bytes is too short for its layout"
            )
        (raw,) = struct.unpack_from(layout, blob, offset)
        if raw not in (0, (1 << (8 * width)) - 1):
            energy = raw * ENERGY_UNIT_JOULES
    return GpuMetrics(fmt, content, size, energy)
