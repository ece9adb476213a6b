"""Dependencies as used (issue #30): each runtime dependency in pyproject.toml is imported
by the package, and each library the package imports is a runtime dependency (or comes
with the system, like bcc). A library that only tests, generators or builds use belongs
in the dev extra, as opentelemetry-semantic-conventions does (tests/core/test_labels.py).
An optional extra other than dev (`gaudi`) counts as runtime: the part that imports it
needs it. Imports are read with ast, every one of them: at the top, inside functions, under
TYPE_CHECKING. Import names are mapped to distributions by the installed metadata."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from tests.helpers import REPO

# Imported by the package but installed by the system, not by pip: the eBPF collector's
# bcc comes from the distribution's python3-bpfcc (scripts/apt-packages.txt).
SYSTEM = {"bcc"}


def _normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(pyproject: str) -> set[str]:
    """The runtime dependencies, and the optional extras of a part of the package (the
    `gaudi` extra: habana-pyhlml, imported only by that collector); not the dev extra."""
    project = tomllib.loads(pyproject)["project"]
    deps = list(project["dependencies"])
    for extra, more in project.get("optional-dependencies", {}).items():
        if extra != "dev":
            deps.extend(more)
    return {_normal(re.split(r"[\s<>=!~;\[]", d, maxsplit=1)[0]) for d in deps}


def _imported(package: Path) -> set[str]:
    """The top-level names of what the modules under `package` import, other than the
    standard library and the package itself."""
    tops: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops.add(node.module.split(".")[0])
    return {t for t in tops if t not in sys.stdlib_module_names and t != package.name}


def _unused_and_undeclared(pyproject: str, package: Path) -> tuple[set[str], set[str]]:
    """(runtime dependencies nothing in the package imports, imports of the package that
    no runtime dependency provides)."""
    required = _requirements(pyproject)
    by_module = packages_distributions()
    provided: set[str] = set()
    undeclared: set[str] = set()
    for top in _imported(package) - SYSTEM:
        dists = {_normal(d) for d in by_module.get(top, [])}
        provided |= dists
        if not dists & required:
            undeclared.add(top)
    return required - provided, undeclared


def test_runtime_dependencies_are_the_libraries_the_package_imports() -> None:
    unused, undeclared = _unused_and_undeclared(
        (REPO / "pyproject.toml").read_text(), REPO / "gpu_exporter")
    assert not unused, (f"runtime dependencies the package never imports: {unused}; "
                        "move them to the dev extra")
    assert not undeclared, f"imported by the package, not a runtime dependency: {undeclared}"


def test_the_check_finds_an_unused_and_an_undeclared_dependency(tmp_path: Path) -> None:
    package = tmp_path / "toy"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("import os\nfrom toy import sub\n")
    (package / "sub" / "m.py").write_text(
        "def f():\n    import yaml\n    from google.protobuf import message\n"
        "    import pytest\n")
    assert _imported(package) == {"yaml", "google", "pytest"}
    pyproject = ('[project]\ndependencies = ["PyYAML>=6", "protobuf>=7,<8",\n'
                 '  "opentelemetry-semantic-conventions>=0.48b0"]\n')
    assert _unused_and_undeclared(pyproject, package) == (
        {"opentelemetry-semantic-conventions"}, {"pytest"})
