"""CONTRIBUTING's "where things go" table names files that exist."""

from __future__ import annotations

import re

from tests.helpers import REPO


def test_every_path_the_contributing_table_names_exists() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text()
    table = text.split("## Where things go")[1].split("\n## ")[0]
    paths = set(re.findall(r"`((?:gpu_exporter|alerts|dashboards|deploy|scripts|tests|docs)"
                           r"/[\w./-]+)`", table))
    assert len(paths) >= 15, paths
    # `<vendor>`/`<name>` placeholders name a file to create, not one that exists.
    missing = [p for p in paths if "<" not in p and not (REPO / p).exists()]
    assert not missing, missing
    # Files named after a vendor reader in the same cell ("`amd.py`") sit beside it.
    cells = re.findall(r"`gpu_exporter/readers/\w+\.py`, `(\w+\.py)`", table)
    assert cells
    for name in cells:
        assert (REPO / "gpu_exporter" / "readers" / name).exists(), name
