"""A small Dockerfile reader: enough to lint the image recipe and replay its install steps."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def instructions(path: Path) -> list[Instruction]:
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by docker
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].rstrip())
            continue
        pending.append(stripped)
        text = " ".join(p for p in pending if p)
        keyword, _, args = text.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    return out


def env_assignments(args: str) -> dict[str, str]:
    """ENV KEY=VALUE [KEY=VALUE ...] (the legacy `ENV KEY VALUE` form too)."""
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(w.split("=", 1) for w in words)


def exec_form(args: str) -> list[str] | None:
    """["a", "b"] -> list; shell form -> None."""
    if args.startswith("["):
        value = json.loads(args)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return None
