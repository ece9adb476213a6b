"""Fixtures of the AMD/Intel sysfs tests: fake /sys trees and a dump of only the
collectors under test."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.helpers import Series, parse, run_cli
from tests.sysfs.tree import FakeSysfs

SYSFS_COLLECTORS = ("amd", "intel")


def only_sysfs_collectors(tree: Path, procfs: Path) -> list[str]:
    """Flags: our two collectors on, every other collector off, our fake roots."""
    return [
        *(f"--no-collector.{c.name}" for c in REGISTRY if c.name not in SYSFS_COLLECTORS),
        f"--path.sysfs={tree}",
        f"--path.procfs={procfs}",
    ]


def dump(tree: Path, procfs: Path, *extra: str) -> tuple[str, list[Series]]:
    res = run_cli(["dump", *only_sysfs_collectors(tree, procfs), *extra])
    assert res.returncode == 0, res.stderr
    return res.stdout, parse(res.stdout)


@pytest.fixture
def sysfs(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    path = tmp_path / "proc"
    path.mkdir()
    return path


def gpu_series(series: Sequence[Series], address: str) -> list[Series]:
    return [s for s in series if s.labels.get("gpu_pci_address") == address]


def families(series: Sequence[Series]) -> set[str]:
    return {s.name for s in series}
