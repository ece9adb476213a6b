"""Both ends of the habana-pyhlml range pyproject.toml allows (the gaudi extra): the
suite runs with the installed (newest) binding; this runs the Gaudi node's tests again
with the oldest release of the range (`make venv` installs it into build/bindings/),
whose device handles are one shared object, whose utilization call returns a number
instead of a struct, and which lacks the power management limit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest

from gpu_exporter.sources.hlml import session
from tests.helpers import REPO


def allowed_range() -> tuple[str, str]:
    text = (REPO / "pyproject.toml").read_text()
    m = re.search(r'^gaudi = \["habana-pyhlml>=([0-9.]+),<([0-9.]+)"\]', text, re.M)
    assert m, "pyproject.toml's gaudi extra pins habana-pyhlml as >=LOW,<HIGH"
    return m.group(1), m.group(2)


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_the_installed_binding_is_within_the_range() -> None:
    low, high = allowed_range()
    assert _release(low) <= _release(version("habana-pyhlml"))[:2] < _release(high)


def test_the_gaudi_node_reads_the_same_with_the_oldest_binding() -> None:
    low, _ = allowed_range()
    bindings = REPO / "build" / "bindings" / f"habana-pyhlml-{low}"
    assert (bindings / "pyhlml" / "main.py").exists(), f"{bindings} missing: run `make venv`"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)])}
    probe = subprocess.run(
        [sys.executable, "-c", "import pyhlml.main as m, pyhlml.hlml_types as t; "
         "print(m.__file__, hasattr(m, 'hlmlDeviceGetPowerManagementLimit'), "
         "isinstance(t.HLML_DEVICE.TYPE, type))"],
        env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    path, has_limit, handle_is_a_type = probe.stdout.split()
    assert path.startswith(str(bindings)), probe.stdout
    assert (has_limit, handle_is_a_type) == ("False", "False"), probe.stdout  # 1.10's
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/gaudi/test_gaudi_node.py"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout, res.stdout[-500:]


def test_without_the_binding_the_fix_is_the_gaudi_extra(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The default install has no habana-pyhlml: the session says to add the extra, and
    nothing of the package imports the binding before it is asked for."""
    for name in [m for m in sys.modules if m == "pyhlml" or m.startswith("pyhlml.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import pyhlml... -> ImportError
    with pytest.raises(session.HlmlUnavailable) as got:
        session.HlmlSession(session.DEFAULT_LIBRARY)
    assert "habana-pyhlml is not installed" in got.value.reason
    assert "gpu-exporter[gaudi]" in got.value.fix
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, gpu_exporter.collectors, "
         "gpu_exporter.sources.hlml.values; print('pyhlml' in sys.modules)"],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "False", probe.stderr
