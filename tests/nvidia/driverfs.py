"""Copies of the NVIDIA driver's /proc tree (tests/fixtures/procfs/) for one test, and
the device nodes a container would be given."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from tests.helpers import REPO

FIXTURE = REPO / "tests" / "fixtures" / "procfs" / "nvidia-h100x8"
UNKNOWN_UUID = "GPU-????????-????-????-????-????????????"
FAILED = "0000:5d:00.0"  # the GPU the driver failed to initialise (fake index 3)
EXCLUDED = "0000:e1:00.0"


def procfs(dst: Path) -> Path:
    """A copy of the H100 host's tree: pass it as --path.procfs."""
    root = dst / "proc"
    shutil.copytree(FIXTURE, root)
    return root


def set_uuid(root: Path, pci: str, uuid: str | None) -> None:
    """What the driver shows as the GPU's UUID (None: not initialised, ????)."""
    path = root / "driver" / "nvidia" / "gpus" / pci / "information"
    text = re.sub(r"(?m)^(GPU UUID: \t ).*$", lambda m: m.group(1) + (uuid or UNKNOWN_UUID),
                  path.read_text())
    tmp = path.with_name("information.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def devfs(dst: Path, minors: Iterable[int]) -> Path:
    """/dev with the nodes of these GPUs only (plain files stand in for the nodes)."""
    root = dst / "dev"
    root.mkdir()
    for minor in minors:
        (root / f"nvidia{minor}").touch()
    (root / "nvidiactl").touch()
    return root
