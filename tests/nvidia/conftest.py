"""Fixtures for the NVIDIA area: the fake NVML library, built once per session with the
system C compiler, and a way to run the real exporter on a scenario."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.fake_nvml import scenario as fake
from tests.helpers import Exporter, exporter

# What an old driver lacks: exercises every fallback of the reader.
OLD_DRIVER_OMITS = (
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTemperatureV",
)


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture(scope="session")
def old_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-nvml-old"), omit=OLD_DRIVER_OMITS)


def nvidia_only() -> list[str]:
    """Flags that leave only the NVIDIA collector on, whatever else is registered."""
    return [f"--no-collector.{c.name}" for c in REGISTRY if c.name != "nvidia"] + [
        "--collector.nvidia"
    ]


@contextmanager
def running(
    lib: Path | None, sc: fake.Scenario, tmp_path: Path, args: Sequence[str] = ()
) -> Iterator[Exporter]:
    path = sc.write(sc.path or tmp_path / "gpus.scenario")
    with exporter([*nvidia_only(), *args], env=fake.env(lib, path)) as exp:
        yield exp
