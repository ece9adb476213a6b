"""Drills run the real exporter process against the fake NVML library (8 GPUs), so
that load and slow clients meet a scrape that does real work."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.ebpf.conftest import (
    cuda_build,  # noqa: F401 - the fake CUDA build, shared
    hip_build,  # noqa: F401 - the fake HIP build, shared
)
from tests.fake_nvml import scenario as fake

NO_DEVICES = {"LD_LIBRARY_PATH": "/nonexistent", "GPU_EXPORTER_PATH_SYSFS": "/nonexistent"}


@pytest.fixture(scope="session")
def fake_nvml_dir() -> Path:
    return fake.build()


@pytest.fixture
def eight_gpus(fake_nvml_dir: Path, tmp_path: Path) -> Mapping[str, str]:
    """Environment of an exporter that sees 8 fake H100s and no sysfs GPUs."""
    path = fake.h100x8().write(tmp_path / "h100x8.scenario")
    return {**fake.env(fake_nvml_dir, path), "GPU_EXPORTER_PATH_SYSFS": str(tmp_path)}
