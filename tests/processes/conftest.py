"""Fixtures for the processes area: the fake NVML library, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake


@pytest.fixture(scope="session")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))
