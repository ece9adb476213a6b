"""scripts/check-real-gpu.sh, the one-command check for a machine with a real NVIDIA GPU,
in the form CI can run: against the fake NVML, where there is no nvidia-smi, no load to
run and no MIG, it must still compare the exporter's GPM with GPM read directly and say
what it could not check."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.fake_nvml import scenario as fake
from tests.helpers import BIN, REPO
from tests.nvidia.test_failures import uuid


def run_check(lib: Path | None, sc: fake.Scenario | None, tmp_path: Path,
              **extra_env: str) -> subprocess.CompletedProcess[str]:
    scenario = None if sc is None else sc.write(tmp_path / "gpus.scenario")
    env = {**os.environ, **fake.env(lib, scenario),
           "PYTHON": str(BIN / "python"), "PATH": f"{BIN}:/usr/bin:/bin", **extra_env}
    return subprocess.run(["bash", str(REPO / "scripts" / "check-real-gpu.sh"),
                           "--window", "0.3"],
                          env=env, capture_output=True, text=True, timeout=300)


def test_compares_gpm_with_a_direct_read_and_says_what_it_could_not_check(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices = sc.devices[:2]
    res = run_check(fake_lib, sc, tmp_path)
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    for i in range(2):
        assert f"PASS         GPU {i} up: {uuid(i)}" in out
        assert f"PASS         GPU {i} GPM feature state: enabled" in out
        assert (f"PASS         GPU {i} idle: SM active: exporter 0.6{i}0, "
                f"direct GPM 0.6{i}0") in out
        assert f"PASS         GPU {i} idle: GPM window" in out
        assert f"NOT CHECKED  GPU {i} MIG: not in MIG mode" in out
    assert "NOT CHECKED  nvidia-smi comparisons" in out
    assert "NOT CHECKED  GPU 0 GPM under a known load: neither torch, cupy nor" in out
    assert " 0 failed" in out


def test_fails_when_the_exporter_disagrees_with_the_gpu(fake_lib: Path, tmp_path: Path) -> None:
    """A GPU whose GPM the exporter is told not to read: the direct read has values, the
    exporter none, and the feature state is not what the GPU supports."""
    sc = fake.h100x8()
    sc.devices = sc.devices[:1]
    res = run_check(fake_lib, sc, tmp_path, GPU_EXPORTER_COLLECTOR_NVIDIA_GPM="false")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL         GPU 0 GPM feature state: disabled" in res.stdout
    assert "FAIL         GPU 0 idle: SM active: exporter None, direct GPM 0.6" in res.stdout


def test_a_machine_without_an_nvidia_gpu_is_told_so(fake_lib: Path, tmp_path: Path) -> None:
    """Exit 2 and one line, not a page of failures: without the library, and with a
    library that lists no GPU."""
    no_lib = run_check(None, None, tmp_path)
    assert no_lib.returncode == 2, no_lib.stdout + no_lib.stderr
    assert "no NVIDIA GPU to check here: NVML answers" in no_lib.stderr
    sc = fake.h100x8()
    sc.devices = []
    none_listed = run_check(fake_lib, sc, tmp_path)
    assert none_listed.returncode == 2, none_listed.stdout + none_listed.stderr
    assert none_listed.stderr.strip() == "no NVIDIA GPU to check here: NVML lists none"
    assert "PASS" not in none_listed.stdout and "FAIL" not in none_listed.stdout
