"""The package's layers, declared once in pyproject.toml ([[tool.gpu-exporter.layers]]) as
one folder each, against its imports as written: a module's folder is its layer, no module
imports from a layer above its own, and no import cycle exists anywhere in the package.
Imports are read with ast, every one of them: at the top, inside functions, under
TYPE_CHECKING."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import REPO

PACKAGE = "gpu_exporter"
LAYERS: list[dict[str, object]] = tomllib.loads(
    (REPO / "pyproject.toml").read_text())["tool"]["gpu-exporter"]["layers"]


def module_files(top: Path = REPO) -> dict[str, Path]:
    """Every module of the package under `top` by dotted name (a package by its own
    name), with its path relative to `top`."""
    out = {}
    for path in sorted((top / PACKAGE).rglob("*.py")):
        path = path.relative_to(top)
        parts = path.with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = module_files()


def imports(module: str, path: Path, known: set[str],
            top: Path = REPO) -> Iterator[tuple[str, int]]:
    """The package's modules that `module` names in an import, with the line: `from a
    import b` names a.b where that is a module, else a."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse((top / path).read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield (sub if sub in known else source), node.lineno


def ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


# The two modules at the top of the package, outside every folder: the version (imported
# by every layer) and `python -m gpu_exporter`.
TOP_LEVEL = {PACKAGE: "model", f"{PACKAGE}.__main__": "commands"}


def layer_of(module: str) -> int:
    """Index in LAYERS (0 is the top) of the module's layer: the folder of the package it
    sits in, right under gpu_exporter/."""
    parts = module.split(".")
    top = TOP_LEVEL.get(module)
    for index, layer in enumerate(LAYERS):
        if layer["name"] == top or (top is None and len(parts) > 1
                                    and layer["folder"] == parts[1]):
            return index
    raise LookupError(module)


def graph(modules: dict[str, Path], top: Path = REPO) -> dict[str, dict[str, int]]:
    """Module -> the modules it imports (with a line). Importing a.b.c also runs the
    __init__ of a.b (and a): those edges count too, except into the importer's own
    packages, which are running already."""
    known = set(modules)
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module, path in modules.items():
        for target, line in imports(module, path, known, top):
            for t in [target, *ancestors(target)]:
                if t in known and t != module and t not in ancestors(module):
                    edges[module].setdefault(t, line)
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as a
    sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def upward(modules: dict[str, Path], top: Path = REPO) -> list[str]:
    """Each import of a module from a layer above its own, as 'file:line: a (layer) ->
    b (layer)'. Only the module named counts here (a package __init__ run on the way is
    its own module, checked where it imports)."""
    known = set(modules)
    out = []
    for module, path in modules.items():
        mine = layer_of(module)
        for target, line in imports(module, path, known, top):
            theirs = layer_of(target)
            if theirs < mine:
                out.append(f"{path}:{line}: {module} "
                           f"({LAYERS[mine]['name']}) imports {target} "
                           f"({LAYERS[theirs]['name']})")
    return out


def test_every_module_is_in_a_layer_folder_and_every_folder_is_a_layer() -> None:
    unplaced = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError:
            unplaced.append(module)
    assert not unplaced, f"move these into a layer's folder: {unplaced}"
    folders = [layer["folder"] for layer in LAYERS]
    assert len(folders) == len(set(folders)), "a folder is listed in two layers"
    on_disk = sorted(p.name for p in (REPO / PACKAGE).iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert on_disk == sorted(folders)  # type: ignore[type-var]
    loose = sorted(p.name for p in (REPO / PACKAGE).glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], "a module outside every layer's folder"


def test_no_module_imports_from_a_layer_above_it() -> None:
    assert upward(MODULES) == []


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph(MODULES)) == []


# The checks themselves, on a package written for the purpose: each must find what it is
# for, or the two tests above could pass by finding nothing.
TOY = {
    "__init__.py": "",
    "sources/__init__.py": "",
    "sources/nvml/__init__.py": "",
    # a function-level import, relative, upwards into the collectors' package
    "sources/nvml/devices.py": "def f():\n    from ...collectors import base\n",
    "collectors/__init__.py": "from gpu_exporter.collectors import nvidia\n",
    "collectors/base.py": "",
    "collectors/nvidia.py": "import gpu_exporter.sources.nvml.devices\n",
}


def test_the_checks_find_an_upward_import_and_a_cycle_through_a_package_init(
        tmp_path: Path) -> None:
    for rel, text in TOY.items():
        (tmp_path / PACKAGE / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PACKAGE / rel).write_text(text)
    modules = module_files(tmp_path)
    assert upward(modules, tmp_path) == [
        "gpu_exporter/sources/nvml/devices.py:2: gpu_exporter.sources.nvml.devices (sources) "
        "imports gpu_exporter.collectors.base (collectors)"]
    # nvml.devices -> collectors.base runs collectors/__init__, which imports
    # collectors.nvidia, which imports nvml.devices: the cycle the old import-order
    # trick in nvml/__init__.py kept alive.
    assert cycles(graph(modules, tmp_path)) == [
        ["gpu_exporter.collectors", "gpu_exporter.collectors.nvidia",
         "gpu_exporter.sources.nvml.devices"]]
