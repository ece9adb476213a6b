"""Benchmarks (`make bench`): each test measures the exporter and its floor side by side
in one run and records the numbers; `python -m tests.bench.report` turns the recorded
numbers into the tables of docs/performance.md."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_exporter.model import metric_types
from tests.helpers import REPO

# Benchmarks measure what production runs: no label-schema checks (tests/conftest.py
# turns them on for every other test), in process or in the exporters they start.
os.environ["GPU_EXPORTER_CHECK_LABELS"] = "0"
metric_types.CHECK_LABELS = False

RESULTS = REPO / "build" / "bench" / "results.json"


class Results:
    """Measurements by benchmark and case, merged into build/bench/results.json: a run
    updates only the rows it measured, and runs that overlap (several benchmark files at
    once) do not undo each other's rows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.updates: dict[str, dict[str, Any]] = {}
        # Rows of one run carry its start time, so the report can tell rows measured
        # together (a curve, a table) from rows left over from an earlier run.
        self.run = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def put(self, bench: str, case: str, values: dict[str, Any]) -> None:
        self.updates.setdefault(bench, {})[case] = {**values, "run": self.run}

    def save(self) -> None:
        if not self.updates:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data: dict[str, dict[str, Any]] = {}
            if self.path.exists():
                data = json.loads(self.path.read_text())
            for bench, cases in self.updates.items():
                data.setdefault(bench, {}).update(cases)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)


@pytest.fixture(scope="session")
def results() -> Iterator[Results]:
    r = Results(RESULTS)
    yield r
    r.save()
