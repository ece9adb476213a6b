"""Fixtures of the Gaudi area: the fake HLML library built once per session, a sysfs
tree with Gaudi PCI functions, and a dump of the gaudi collector alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gpu_exporter.collectors import REGISTRY
from tests.fake_hlml import scenario as fake
from tests.helpers import Series, parse, run_cli
from tests.sysfs.tree import FakeSysfs

ADDRESSES = ("0000:b3:00.0", "0000:b4:00.0")


@pytest.fixture(scope="session")
def hlml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.build(tmp_path_factory.mktemp("fake-hlml"))


@pytest.fixture
def sysfs(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path / "sys")


@pytest.fixture
def procfs(tmp_path: Path) -> Path:
    path = tmp_path / "proc"
    path.mkdir()
    return path


def only(*collectors: str) -> list[str]:
    return [f"--no-collector.{c.name}" for c in REGISTRY if c.name not in collectors]


def gaudi_flags(lib: Path | str, sysfs: FakeSysfs, procfs: Path) -> list[str]:
    return [*only("gaudi"), f"--gaudi.hlml-library={lib}", f"--path.sysfs={sysfs.root}",
            f"--path.procfs={procfs}"]


def two_gaudis(sysfs: FakeSysfs) -> fake.Scenario:
    for minor, address in enumerate(ADDRESSES):
        sysfs.add_accel("gaudi2", address, minor)
    return fake.Scenario(devices=[fake.gaudi2(i, a) for i, a in enumerate(ADDRESSES)])


def dump(args: Sequence[str], scenario: Path | None, env: Mapping[str, str] | None = None
         ) -> tuple[str, list[Series]]:
    res = run_cli(["dump", *args], env={**(env or {}),
                                        **({fake.ENV_VAR: str(scenario)} if scenario else {})})
    assert res.returncode == 0, res.stderr
    return res.stdout, parse(res.stdout)
