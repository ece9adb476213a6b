from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A temporary folder an unprivileged user can read (pytest's tmp_path sits under a
    0700 folder of root's)."""
    path = Path(tempfile.mkdtemp(prefix="gpu-exporter-deploy-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
