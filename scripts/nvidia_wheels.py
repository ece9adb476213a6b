"""NVIDIA's CUDA wheels on PyPI, fetched with pip download (nothing installed): the
runtime wheels (`nvidia-cuda-runtime` for CUDA 13, `nvidia-cuda-runtime-cu12` for 12)
hold the real libcudart and the toolkit's headers (cuda.h, driver_types.h)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path


def wheel_files(requirement: str, into: Path, *suffixes: str) -> tuple[str, list[Path]]:
    """The wheel's version and, unpacked into `into`, its first file ending in each of
    `suffixes` (in their order), e.g. "/libcudart.so.13" or "/include/cuda.h"."""
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "--platform", "manylinux2014_x86_64", "--python-version", "3.11",
                    "-d", str(into), requirement], check=True)
    wheel = sorted(into.glob("*.whl"))[-1]
    with zipfile.ZipFile(wheel) as z:
        names = [next(n for n in z.namelist() if n.endswith(s)) for s in suffixes]
        for name in names:
            z.extract(name, into)
    wheel.unlink()
    return wheel.name.split("-")[1], [into / n for n in names]
