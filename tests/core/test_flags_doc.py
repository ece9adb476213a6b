"""docs/configuration.md's flag reference is generated from the CLI's option definitions
(scripts/gen-flags-doc.py, part of `make docs`): it names every flag the CLI has, with the
default and environment variable the CLI uses, and a test fails while it is stale."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.commands import cli
from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gen-flags-doc.py"
DOC = REPO / "docs" / "configuration.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_flags_doc", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(doc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--doc", str(doc)],
                          capture_output=True, text=True, timeout=60)


def test_flag_reference_is_generated_from_the_cli() -> None:
    gen = _generator()
    text = DOC.read_text()
    assert gen.update(text) == text, "docs/configuration.md's flag reference is stale: " \
                                     "run `make docs`"
    res = _check(DOC)
    assert res.returncode == 0, res.stderr


def test_every_flag_has_a_row_with_the_clis_default_and_variable() -> None:
    gen = _generator()
    section = DOC.read_text().split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `--([^`]+)`.*$", section, re.M)}
    options = cli.every_option()
    assert set(rows) == {o.name for o in options}
    for opt in options:
        row = rows[opt.name]
        assert f"`{cli.env_name(opt.name)}`" in row, row
        for extra in cli.EXTRA_ENVVARS.get(opt.name, ()):
            assert f"`{extra}`" in row, row
        if isinstance(opt.default, bool):
            assert f"| {'on' if opt.default else 'off'} |" in row, row
            assert f"`--no-{opt.name}`" in row, row
        elif opt.default != "":
            shown = f"{opt.default:g}" if isinstance(opt.default, float) else str(opt.default)
            assert f"`{shown.replace('|', chr(92) + '|')}`" in row, row


def test_a_stale_reference_fails_the_check(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(DOC.read_text().replace("`:9445`", "`:9999`", 1))
    res = _check(stale)
    assert res.returncode == 1
    assert "stale: run `make docs`" in res.stderr
    # Without its markers the page is an error too, not silently left alone.
    stale.write_text("# Configuration\n")
    assert _check(stale).returncode == 1


def test_collector_table_names_every_collector_with_its_default() -> None:
    # The hand-written table of what each collector reads and needs, above the generated
    # reference: one row per collector of the registry, its default as the CLI's.
    text = DOC.read_text().split("| collector | default | reads | needs |", 1)[1]
    rows = dict(re.findall(r"^\| `(\w+)` \| (on|off) \|", text.split("\n\n", 1)[0], re.M))
    assert rows == {cls.name: "on" if cls.default_enabled else "off" for cls in REGISTRY}
