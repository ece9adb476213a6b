"""Both ends of the nvidia-ml-py range pyproject.toml pins: the suite runs with the
installed (newest) bindings; this runs the GPM reader's tests again, and one scrape of
the exporter, with the oldest release of the range (`make venv` installs it into
build/bindings/), whose `nvmlGpmMetricsGet_t` has room for 98 metrics and no DMMA id."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import REPO, find, parse, value
from tests.nvidia.conftest import nvidia_only


def pinned_range() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'"nvidia-ml-py>=([0-9.]+),<([0-9.]+)"', text)
    assert m, "pyproject.toml pins nvidia-ml-py as >=LOW,<HIGH"
    return m.group(1), m.group(2)


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_the_installed_bindings_are_within_the_pinned_range() -> None:
    low, high = pinned_range()
    assert _release(low) <= _release(version("nvidia-ml-py")) < _release(high)


def oldest_bindings_env() -> dict[str, str]:
    low, _ = pinned_range()
    bindings = REPO / "build" / "bindings" / f"nvidia-ml-py-{low}"
    assert (bindings / "pynvml.py").exists(), f"{bindings} missing: run `make venv`"
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)])}


def test_the_gpm_reader_works_with_the_oldest_bindings_of_the_range() -> None:
    env = oldest_bindings_env()
    bindings = env["PYTHONPATH"].split(os.pathsep)[0]
    probe = subprocess.run(
        [sys.executable, "-c", "import pynvml; print(pynvml.__file__, "
         "pynvml.NVML_GPM_METRIC_MAX, hasattr(pynvml, 'NVML_GPM_METRIC_DMMA_TENSOR_UTIL'))"],
        env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    path, limit, dmma = probe.stdout.split()
    assert path.startswith(bindings) and (limit, dmma) == ("98", "False"), probe.stdout
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/nvidia/test_gpm_reader.py"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout, res.stdout[-500:]


def test_the_exporter_scrapes_with_the_oldest_bindings_of_the_range(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    env = {**oldest_bindings_env(), **fake.env(fake_lib, sc.write(tmp_path / "gpus.scenario"))}
    res = subprocess.run([sys.executable, "-m", "gpu_exporter", "dump", *nvidia_only()],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    s = parse(res.stdout)
    assert [x.value for x in find(s, "hw_gpu_up")] == [1.0] * 8
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    assert value(s, "hw_gpu_sm_active_ratio", hw_id=sc.devices[2].uuid) == pytest.approx(0.62)
    pipes = {x.labels["hw_gpu_pipe"] for x in find(s, "hw_gpu_pipe_active_ratio",
                                                   hw_id=sc.devices[0].uuid)}
    assert pipes == {"tensor_hmma", "tensor_imma", "tensor_dfma", "fp64", "fp32", "fp16",
                     "integer"}  # no DMMA id in these bindings: not asked for
