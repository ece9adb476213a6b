#!/usr/bin/env python3
"""Writes tests/fixtures/cuda/real-symbols-13.txt from NVIDIA's CUDA 13 runtime: which
of the runtime entry points gpu-exporter probes each libcudart.so.13 exports (the first
CUDA 13 release and the newest), read from their dynamic symbol tables.

    python3 scripts/gen-cuda13-symbols.py [VERSION ...]

The libraries come from NVIDIA's `nvidia-cuda-runtime` wheels on PyPI (pip download,
nothing installed); VERSIONs are wheel versions, by default the newest 13.0 and the
newest of all. The driver (libcuda) of CUDA 13 is not published there: its side is
checked against the headers only (docs/ebpf.md, "CUDA 13").
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvidia_wheels import wheel_files  # noqa: E402  (scripts/nvidia_wheels.py)

from gpu_exporter.model import ebpf_abi as abi  # noqa: E402
from gpu_exporter.sources.ebpf.elf import ElfFile  # noqa: E402

FIXTURE = REPO / "tests/fixtures/cuda/real-symbols-13.txt"


def runtime(spec: str, into: Path) -> tuple[str, Path]:
    """The wheel's version (major.minor) and its libcudart.so.13, unpacked into `into`."""
    version, (lib,) = wheel_files(f"nvidia-cuda-runtime{spec}", into, "/libcudart.so.13")
    return ".".join(version.split(".")[:2]), lib


def main() -> None:
    specs = [f"=={v}" for v in sys.argv[1:]] or ["==13.0.*", ""]
    wanted = {p.symbol for p in abi.RUNTIME_PROBES}
    exported: dict[str, list[str]] = {s: [] for s in sorted(wanted)}
    releases = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, spec in enumerate(specs):
            release, lib = runtime(spec, Path(tmp) / str(i))
            releases.append(release)
            for symbol in ElfFile.open(str(lib)).functions(wanted):
                exported[symbol].append(release)
    lines = [f"# the runtime names gpu-exporter probes, each with the libcudart.so.13 releases "
             f"that export it, of {' and '.join(releases)} (NVIDIA's nvidia-cuda-runtime "
             "wheels); no release: not exported",
             "# written by scripts/gen-cuda13-symbols.py",
             f"releases {' '.join(releases)}"]
    lines += [" ".join([s, *r]) for s, r in exported.items()]
    FIXTURE.write_text("\n".join(lines) + "\n")
    print(f"{sum(1 for r in exported.values() if r)} of {len(wanted)} probed runtime "
          f"symbols exported by {', '.join(releases)}")


if __name__ == "__main__":
    main()
