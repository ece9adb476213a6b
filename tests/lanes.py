"""The test lanes. `make test` runs every test; `make check` (`pytest --lane=fast`) runs
those that need none of what the markers below name: no root, no bcc, no monitoring
server or tool, no system tool from apt, no exporter process. The markers are declared in
pyproject.toml (--strict-markers) and put on each test here, at collection, so that test
files carry none:

- by where a test lives (PATHS: what a folder needs that its code does not show, e.g.
  BPF programs loaded in the test's own process);
- by what it uses: the programs it names (a string constant or module constant such as
  "promtool" or EXPORTER) and the helpers it calls (`exporter()`, `run_cli()`, the fake
  NVML's `build()`), read with ast from the test function, the fixtures it requests and,
  transitively, every function or class of the test suite those call.

The fast lane then checks the result as it runs: a test in it that starts a program of a
marker it does not carry fails, naming the marker. So a test can only be in the fast lane
if it really needs nothing the lane does without.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import textwrap
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

# The markers, as pyproject.toml declares them; the fast lane excludes each.
LANE_MARKERS = ("root", "bcc", "server", "nvidia_libs", "tools", "exporter")
FAST = "not (" + " or ".join(LANE_MARKERS) + ")"

# Programs a test may start, by the marker that says it needs them.
PROGRAMS: Mapping[str, str] = {
    **dict.fromkeys(("prometheus", "promtool", "victoria-metrics", "vmagent", "vmalert",
                     "prometheus-alertmanager", "alertmanager", "amtool",
                     "prometheus-node-exporter", "node_exporter"), "server"),
    # (hadolint and kubernetes-validate are not here: pip installs them, [dev])
    **dict.fromkeys(("cc", "gcc", "g++", "c++", "curl", "openssl", "systemd-analyze",
                     "make", "docker", "hipcc", "nm", "strip"), "tools"),
    **dict.fromkeys(("setpriv", "ip", "mount", "umount", "nsenter", "unshare"), "root"),
    "gpu-exporter": "exporter",
}

# What a folder or file needs beyond what its code names.
PATHS: Mapping[str, tuple[str, ...]] = {
    # BPF programs compiled and attached by bcc, in the test process or the exporter's
    "tests/ebpf/": ("bcc", "root"),
    "tests/drills/test_ebpf_drills.py": ("bcc", "root"),
    "tests/bench/test_ebpf_": ("bcc", "root"),
    # a veth pair in a network namespace
    "tests/host/": ("root",),
    # every attack is made on a running exporter, some through helpers of this file's own
    "tests/drills/test_http_attacks.py": ("exporter",),
    "tests/drills/test_http_refusals.py": ("exporter",),
    # Debian's bcc (python3-bpfcc) linked into a venv
    "tests/deploy/test_venv.py": ("bcc",),
}

# The suite's own helpers that need something, by "module.qualname".
HELPERS: Mapping[str, tuple[str, ...]] = {
    "tests.helpers.exporter": ("exporter",),
    "tests.helpers.run_cli": ("exporter",),
    "tests.helpers.run_as_nobody": ("exporter", "root"),
    "tests.fake_nvml.scenario.build": ("tools",),  # the fake NVML, built with cc
}


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def _ours(obj: Any) -> bool:
    """A function, class or module of the test suite (followed), not of a library."""
    if inspect.ismodule(obj):
        return obj.__name__.startswith("tests.")
    return (inspect.isfunction(obj) or inspect.isclass(obj)) and \
        str(getattr(obj, "__module__", "")).startswith("tests.")


def _suite_module(text: str) -> Any:
    """The suite's module a string names, as a child process would run it: `python -m
    tests.attribution.drive`, `pytest tests/nvidia/test_gpm_reader.py`."""
    if re.fullmatch(r"tests(\.\w+)+", text):
        name = text
    elif re.fullmatch(r"tests(/\w+)+\.py", text):
        name = text.removesuffix(".py").replace("/", ".")
    else:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _program(value: Any) -> str | None:
    if isinstance(value, str | os.PathLike):
        return PROGRAMS.get(os.path.basename(os.fspath(value)))
    return None


class Needs:
    """What the suite's functions need, worked out once per function."""

    def __init__(self) -> None:
        self._memo: dict[Any, frozenset[str]] = {}

    def of(self, obj: Any) -> frozenset[str]:
        key = getattr(obj, "__func__", obj)
        if key in self._memo:
            return self._memo[key]
        # A cycle of calls ends here (what the caller needs is added where it started;
        # anything missed is caught by the fast lane's Guard).
        self._memo[key] = frozenset()
        found = set(HELPERS.get(_name(key), ()))
        try:
            source = textwrap.dedent(inspect.getsource(key))
        except (OSError, TypeError):
            source = ""
        module = inspect.getmodule(key)
        names = vars(module) if module else {}
        for node in self._nodes(source):
            for value in self._refers_to(node, names):
                if (marker := _program(value)) is not None:
                    found.add(marker)
                elif _ours(value) and value is not key:
                    found |= self.of(value)
        self._memo[key] = frozenset(found)
        return self._memo[key]

    @staticmethod
    def _nodes(source: str) -> Iterable[ast.AST]:
        """Every node of a function's or class's body, not of its decorators (a
        parametrize list is data for the test, not what it runs)."""
        tree = ast.parse(source) if source else ast.Module(body=[], type_ignores=[])
        for top in tree.body:
            if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                for part in top.body:
                    yield from ast.walk(part)
            else:
                yield from ast.walk(top)

    @staticmethod
    def _refers_to(node: ast.AST, names: Mapping[str, Any]) -> Iterable[Any]:
        """The values `node` stands for that can be known without running it: a
        module-level name, a module's attribute (`fake.build`), a program named where
        programs are named (an argument, `require_tool("promtool")`; the first word of
        an argv list), a module of the suite named in a string (a child process)."""
        if isinstance(node, ast.Name) and node.id in names:
            if not inspect.ismodule(names[node.id]):  # a module's used parts count
                yield names[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = names.get(node.value.id)
            if inspect.ismodule(owner):
                yield getattr(owner, node.attr, None)
        elif isinstance(node, ast.Call):
            yield from (a.value for a in node.args if isinstance(a, ast.Constant))
        elif isinstance(node, ast.List | ast.Tuple) and node.elts:
            if isinstance(node.elts[0], ast.Constant):
                yield node.elts[0].value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield _suite_module(node.value)


def _fixture_functions(item: pytest.Item) -> Iterable[Callable[..., Any]]:
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for d in defs:
            yield d.func


def needs(item: pytest.Item, root: Path, calls: Needs) -> set[str]:
    """The lane markers `item` needs."""
    out: set[str] = set()
    rel = Path(str(item.path)).relative_to(root).as_posix()
    for prefix, markers in PATHS.items():
        if rel.startswith(prefix):
            out.update(markers)
    function = getattr(item, "function", None)
    for f in [function, *_fixture_functions(item)]:
        if f is not None and _ours(f):
            out |= calls.of(f)
    return out


def mark(items: list[pytest.Item], root: Path) -> None:
    calls = Needs()
    for item in items:
        for marker in sorted(needs(item, root, calls)):
            item.add_marker(marker)


class Guard:
    """In the fast lane: a test that starts a program of a lane marker it does not carry
    fails, at the call, with the marker it needs (subprocess.Popen: run, check_output and
    the rest go through it)."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self._popen_init = subprocess.Popen.__init__

    def install(self) -> None:
        guard = self
        original = self._popen_init

        def checked(popen: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            guard.check(args)
            original(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = checked  # type: ignore[method-assign]

    def check(self, args: Any) -> None:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        words = [os.fsdecode(a) for a in argv]
        first = words[0].split()[0] if words else ""
        marker = _program(first)
        if marker is None and any(words[i:i + 2] == ["-m", "gpu_exporter"]
                                  for i in range(len(words))):
            first, marker = "python -m gpu_exporter", "exporter"
        if marker is None or self.item is None:
            return
        if self.item.get_closest_marker(marker) is None:
            pytest.fail(f"{self.item.nodeid} runs {os.path.basename(first)}, which needs "
                        f"the `{marker}` marker: teach tests/lanes.py where it comes from "
                        f"(PATHS or HELPERS), so that `make check` leaves it out",
                        pytrace=False)
