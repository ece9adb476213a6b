"""Conservation on the raw exposition of the real exporter, over 2,000 scrapes of a fake
NVIDIA node whose energy and processes change between them (tests/attribution/drive.py:
the fake NVML in C, a fake /proc; lost GPUs, unreadable process lists, counter resets,
MIG, pids reused, the process cap)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

STEPS = 2000


def test_every_joule_is_counted_once_over_thousands_of_scrapes(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "tests.attribution.drive", str(tmp_path),
                          str(STEPS), "20240614"], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    hw, attributed = out["hw"], out["attributed"]
    assert len(hw) == 4 and all(joules > 1e5 for joules in hw.values()), hw
    # per physical GPU (gpu_pci_address: MIG devices share their parent's), what increase()
    # finds in the attributed and unattributed counters is what it finds in the GPU's own
    assert attributed.keys() == hw.keys()
    for pci, joules in hw.items():
        assert attributed[pci] == pytest.approx(joules, rel=1e-12), pci
    # every counter started at 0; processes left and came back (new counters)
    assert out["nonzero_first"] == [] and out["decreases"] > 0
    # the run went through every path: charged, free and unknown intervals, the cap
    assert all(v > 0 for v in out["kinds"].values()), out["kinds"]
    assert out["folded"] > 0
