"""Golden exposition files: one scrape, normalised, compared byte for byte.

Regenerate with `UPDATE_GOLDEN=1 .venv/bin/pytest tests/nvidia` (then review the diff).
Normalised: host_name, collector durations and GPM windows, build info (they vary by
host and run), and the self-metrics of collectors other than nvidia (they change as
collectors are added).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import check_golden

GOLDEN_ROOT = Path(__file__).resolve().parent.parent / "golden"
GOLDEN_DIR = GOLDEN_ROOT / "nvidia"
_HOST = re.compile(r'host_name="[^"]*"')
_VOLATILE = {"gpu_exporter_collector_duration_seconds", "gpu_exporter_gpm_window_seconds"}


def normalise(text: str, keep_collectors: tuple[str, ...] | None = ("nvidia",)) -> str:
    """`keep_collectors`: whose self-metrics stay (None: every collector's)."""
    keep = "|".join(keep_collectors) if keep_collectors is not None else "[^\"]*"
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            if " gpu_exporter_build_info " not in line:
                out.append(line)
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if name == "gpu_exporter_build_info":
            continue
        if name.startswith("gpu_exporter_") and name not in _VOLATILE and not re.search(
            rf'(collector|feature)="({keep})[".]', line
        ):
            continue
        line = _HOST.sub('host_name="HOST"', line)
        if name in _VOLATILE:
            line = line.rsplit(" ", 1)[0] + " VOLATILE"
        out.append(line)
    return "\n".join(out) + "\n"


def check(name: str, text: str, normalised: bool = False) -> None:
    """Compares with tests/golden/nvidia/<name>.prom; a normalised `text` with
    tests/golden/<name>.prom."""
    path = GOLDEN_ROOT / f"{name}.prom" if normalised else GOLDEN_DIR / f"{name}.prom"
    check_golden(path, text if normalised else normalise(text), "scrape")
