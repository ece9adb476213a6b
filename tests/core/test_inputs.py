"""The input table of docs/configuration.md, walked against the real CLI.

Every flag and environment variable the exporter reads has a row; each row's bounds,
accepted examples, refused examples and exit codes are what the real process does:
`gpu-exporter check` for what start-up checks, `serve` for the bind. A flag added without
a row, a bound changed without the docs, or a refused example the CLI takes fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import pytest

from gpu_exporter.commands import cli
from tests.helpers import EXPORTER, REPO

TICKED = re.compile(r"`([^`]+)`")
DOC = REPO / "docs" / "configuration.md"


@dataclass(frozen=True)
class Row:
    inputs: tuple[str, ...]  # `--flag` or an environment variable
    accepts: str
    refused: tuple[str, ...]
    exit: str

    @property
    def accepted_examples(self) -> list[str]:
        return TICKED.findall(self.accepts.rsplit("e.g.", 1)[1]) if "e.g." in self.accepts \
            else []

    def exits(self) -> list[tuple[int, list[str]]]:
        """(exit code, the examples that get it): the refused column's for the first
        code, each later `N ...: `example`` part's own."""
        parts = [p.strip() for p in self.exit.split(";") if p.strip()]
        out = []
        for i, part in enumerate(parts):
            code = re.match(r"\d+", part)
            assert code, f"{self.inputs}: exit cell part {part!r} has no code"
            out.append((int(code.group()),
                        list(self.refused) if i == 0 else TICKED.findall(part)))
        return out


def _section(title: str) -> str:
    text = DOC.read_text()
    assert title in text, f"docs/configuration.md has no {title!r}"
    return text.split(title, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def _rows() -> list[Row]:
    rows = []
    for line in _section("### Inputs").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            inputs, accepts, refused, exit_ = cells
            rows.append(Row(tuple(TICKED.findall(inputs)), accepts,
                            tuple(TICKED.findall(refused)), exit_))
    assert len(rows) > 10, "docs/configuration.md's input table not found or not parsed"
    return rows


ROWS = _rows()
OPTIONS = {f"--{o.name}": o for o in cli.every_option()}


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_EXPORTER_", "OTEL_"))}
    return {**env, **extra}


def _given(name: str, value: str) -> tuple[list[str], dict[str, str]]:
    """Command-line arguments and environment that give `value` to one input."""
    opt = OPTIONS.get(name)
    if opt is None:
        return [], {name: value}
    if opt.is_flag:  # a switch takes its value from the environment only
        return [], {cli.env_name(opt.name): value}
    return [f"{name}={value}"], {}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXPORTER, *args], env=_clean_env(env), capture_output=True,
                          text=True, timeout=60)


def _bounds(row: Row) -> tuple[list[str], list[str]]:
    """Values at each bound (accepted) and just outside (refused) of a numeric row."""
    m = re.search(r"seconds, ([\d.]+) to ([\d.]+)", row.accepts)
    if m:
        low, high = float(m.group(1)), float(m.group(2))
        return [m.group(1), m.group(2)], [f"{low / 2:g}", f"{high + 1:g}"]
    m = re.search(r"whole number, (\d+) to (\d+)", row.accepts)
    if m:
        low, high = int(m.group(1)), int(m.group(2))
        return [str(low), str(high)], [str(high + 1)] + ([str(low - 1)] if low > 0 else [])
    return [], []


def _choices(row: Row) -> list[str]:
    m = re.search(r"one of ((?:`[^`]+`(?:, )?)+)", row.accepts)
    return TICKED.findall(m.group(1)) if m else []


def test_every_input_has_a_row() -> None:
    named = {name for row in ROWS for name in row.inputs}
    assert set(OPTIONS) <= named, f"flags without a row: {set(OPTIONS) - named}"
    flags = {n for n in named if n.startswith("--")}
    assert flags <= set(OPTIONS), f"rows for flags the CLI does not have: {flags - set(OPTIONS)}"
    # Every environment variable the package names, beyond the flags' own.
    source = "\n".join(p.read_text() for p in (REPO / "gpu_exporter").rglob("*.py"))
    read = set(re.findall(r"\"((?:OTEL|GPU_EXPORTER)_[A-Z0-9_]+)\"", source))
    own = {cli.env_name(o.name) for o in OPTIONS.values()}
    assert read - own <= named, f"variables without a row: {read - own - named}"


def test_each_row_has_an_exit_code_for_what_it_refuses() -> None:
    for row in ROWS:
        if row.refused:
            assert row.exits(), row
        if not row.exit:
            assert not row.refused and not _bounds(row)[1], row


def _accepted_rounds() -> Iterator[tuple[list[str], dict[str, str], list[str]]]:
    """Every accepted value of every row, a few `check` runs in all: the n-th run gives
    each input its n-th accepted value."""
    values: dict[str, list[str]] = {}
    for row in ROWS:
        if row.inputs[0].startswith("GPU_EXPORTER_HEALTHCHECK_"):
            continue  # read by the image's health check, not by gpu-exporter
        accepted = _bounds(row)[0] + _choices(row) + row.accepted_examples
        for name in row.inputs:
            values[name] = accepted
    for n, picks in enumerate(zip_longest(*values.values())):
        args: list[str] = []
        env: dict[str, str] = {}
        names = []
        for name, value in zip(values, picks, strict=True):
            if value is not None:
                a, e = _given(name, value)
                args += a
                env.update(e)
                names.append(name)
        assert n < 20, "too many rounds"
        yield args, env, names


def test_accepted_values_are_accepted() -> None:
    rounds = list(_accepted_rounds())
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda r: _run([*r[0], "check"], r[1]), rounds))
    for (args, env, names), res in zip(rounds, results, strict=True):
        assert res.returncode == 0, (args, env, res.stderr)
        # Each flag given is the one in effect (not a default).
        for name in names:
            opt = OPTIONS.get(name)
            if opt is not None:
                line = next(x for x in res.stdout.splitlines()
                            if re.match(rf"--(no-)?{re.escape(opt.name)}\b", x))
                assert "# default" not in line, (name, line)


def _refusals() -> list[tuple[str, str, int, str]]:
    """(input, value, exit code, command) for each refused example and bound."""
    out = []
    for row in ROWS:
        for i, name in enumerate(row.inputs):
            for n, (code, examples) in enumerate(row.exits()):
                if n == 0:
                    examples = examples + _bounds(row)[1]
                # The first input of a row gets every example, the others the first.
                for value in examples if i == 0 else examples[:1]:
                    out.append((name, value, code, "check" if code == 2 else "serve"))
    return out


@pytest.mark.parametrize("cases", [_refusals()], ids=["every refused example"])
def test_refused_values_exit_with_the_code_of_their_row(
        cases: list[tuple[str, str, int, str]]) -> None:
    def one(case: tuple[str, str, int, str]) -> subprocess.CompletedProcess[str]:
        name, value, _, command = case
        args, env = _given(name, value)
        return _run([*args, command], env)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, cases))
    for (name, value, code, _), res in zip(cases, results, strict=True):
        assert res.returncode == code, (name, value, res.returncode, res.stderr)
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("gpu-exporter: "), (name, value,
                                                                           res.stderr)
        opt = OPTIONS.get(name)
        named = {name} | ({f"--{opt.name}", cli.env_name(opt.name)} if opt else set())
        if name == "OTEL_GPU_EBPF_ENABLED":
            named.add("--collector.ebpf")
        assert any(n in lines[0] for n in named), (name, lines[0])


def _config_defaults() -> list[tuple[str, str]]:
    """(flag, default) from the flag reference of docs/configuration.md (generated from
    the options by scripts/gen-flags-doc.py: this checks it against what the CLI does)."""
    text = DOC.read_text()
    assert "## Every flag" in text, "docs/configuration.md has no '## Every flag'"
    table = text.split("<!-- flags:begin", 1)[1].split("<!-- flags:end -->", 1)[0]
    out = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 4 or not cells[0].startswith("`--"):
            continue
        flags = [f for f in TICKED.findall(cells[0]) if not f.startswith("--no-")]
        defaults = [d.replace("\\|", "|") for d in TICKED.findall(cells[2])] or [cells[2]]
        out.extend(zip(flags, defaults, strict=True))
    assert len(out) > 5, "Configuration's flag table not found"
    return out


def test_configuration_table_defaults_are_the_clis() -> None:
    res = _run(["check"], {})
    assert res.returncode == 0, res.stderr
    effective = dict(re.match(r"(--[^=]+)=(\S*)", line).groups()  # type: ignore[union-attr]
                     for line in res.stdout.splitlines() if re.match(r"--[^=\s]+=", line))
    # Switches are listed as `--flag` (on) or `--no-flag` (off).
    switches = {m.group(2): "off" if m.group(1) else "on" for m in
                re.finditer(r"^--(no-)?([^=\s]+)  #", res.stdout, re.M)}
    for flag, default in _config_defaults():
        if default in ("on", "off"):
            assert switches[flag[2:]] == default, (flag, default)
            continue
        actual = effective[flag].strip("'")
        if default == "none":
            assert actual == "", (flag, actual)
        elif re.fullmatch(r"[\d.]+", default):
            assert float(actual) == float(default), (flag, actual, default)
        else:
            assert actual == default, (flag, actual, default)


def test_check_reads_the_web_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "web.yml"
    bad.write_text("no_such_key: 1\n")
    res = _run([f"--web.config.file={bad}", "check"], {})
    assert res.returncode == 2 and str(bad) in res.stderr, res.stderr
    good = tmp_path / "ok.yml"
    good.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    res = _run([f"--web.config.file={good}", "check"], {})
    assert res.returncode == 0, res.stderr
    assert f"web config: {good} (tls off, basic auth off)" in res.stdout
