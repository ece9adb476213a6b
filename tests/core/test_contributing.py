"""CONTRIBUTING's "where things go" table against the tree: the files and names each row
sends a newcomer to exist, and the families of each kind are emitted where it says; its
"layers and folders" table and its layers rule against pyproject.toml's layers."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict

import pytest

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.labels import Scope
from tests.helpers import REPO

TEXT = (REPO / "CONTRIBUTING.md").read_text()
TABLE = TEXT.split("## Where things go")[1].split("\n## ")[0]
ROWS = {m.group(1): m.group(2) for m in re.finditer(r"^\| (.+?) \| (.+) \|$", TABLE, re.M)}

# For each case the issue names: the files the row must name and what must be defined
# in them (a function, class or constant at the top of the file).
CASES: dict[str, dict[str, tuple[str, ...]]] = {
    "a device metric (any vendor)": {
        "gpu_exporter/model/catalogue.py": (),
        "gpu_exporter/model/records.py": ("GpuReading",),
        "gpu_exporter/sources/nvml/values.py": (),
        "gpu_exporter/readers/sysfs/amd.py": (),
        "gpu_exporter/readers/sysfs/intel.py": (),
        "gpu_exporter/collectors/hw_gpu.py": (),
    },
    "a process metric": {
        "gpu_exporter/model/catalogue.py": (),
        "gpu_exporter/model/labels.py": ("ProcessLabels",),
        "gpu_exporter/sources/nvml/processes.py": (),
        "gpu_exporter/readers/procfs/fdinfo.py": (),
        "gpu_exporter/collectors/processes.py": (),
    },
    "a collector": {
        "gpu_exporter/collectors/__init__.py": ("REGISTRY",),
        "gpu_exporter/collectors/base.py": ("Collector",),
    },
    "an eBPF probe": {
        "gpu_exporter/model/ebpf_abi.py": ("RUNTIME_PROBES", "DRIVER_PROBES"),
        "gpu_exporter/sources/ebpf/program.c": (),
        "tests/ebpf/csrc/": (),
        "tests/ebpf/": (),
        "scripts/gen-cuda-errors.py": (),
        "gpu_exporter/sources/ebpf/reading.py": (),
        "gpu_exporter/sources/ebpf/maps.py": (),
        "gpu_exporter/sources/ebpf/counters.py": (),
        "gpu_exporter/model/catalogue.py": (),
        "gpu_exporter/collectors/ebpf.py": (),
    },
    "an alert": {
        "alerts/gpu-alerts.rules.yml": (),
        "docs/runbooks.md": (),
        "alerts/tests/": (),
        "scripts/gen-k8s-rules.py": (),
        "pyproject.toml": (),
    },
    "a dashboard panel": {
        "dashboards/generate.py": ("fleet", "cost", "cuda", "health", "BOARDS",
                                   "timeseries", "stat", "table", "bargauge", "heatmap",
                                   "SEL", "JOB"),
    },
}

# Where each scope's families are emitted, as the rows say ("one emit line in …"), and
# the families emitted elsewhere on purpose.
EMITTED_IN = {
    Scope.DEVICE: "gpu_exporter/collectors/hw_gpu.py",
    Scope.PROCESS: "gpu_exporter/collectors/processes.py",
    Scope.CUDA: "gpu_exporter/collectors/ebpf.py",
}
ELSEWHERE = {
    # energy attribution joins every collector's readings: a step of its own, which the
    # exporter runs once every collector has returned
    c.PROCESS_GPU_ENERGY.name: "gpu_exporter/model/process_energy.py",
    c.HW_GPU_ENERGY_UNATTRIBUTED.name: "gpu_exporter/model/process_energy.py",
    # the kubelet's allocation of a device, which the processes collector asks for
    c.K8S_GPU_ALLOCATION_INFO.name: "gpu_exporter/collectors/processes.py",
}


def _defined(path: str) -> set[str]:
    tree = ast.parse((REPO / path).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _emitters() -> dict[str, set[str]]:
    """Family name -> the files with a `c.<FAMILY>.emit(` call (or a call of a local
    name bound to `c.<FAMILY>`)."""
    by_const = {k: v.name for k, v in vars(c).items() if isinstance(v, c.Family)}

    def family_of(node: ast.expr, aliases: dict[str, str]) -> str | None:
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "c"):
            return by_const.get(node.attr)
        return aliases.get(node.id) if isinstance(node, ast.Name) else None

    out: defaultdict[str, set[str]] = defaultdict(set)
    for path in sorted((REPO / "gpu_exporter").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        nodes = list(ast.walk(ast.parse(path.read_text())))
        aliases: dict[str, str] = {}
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                name = family_of(node.value, {})
                if name is not None:
                    aliases[node.targets[0].id] = name
        for node in nodes:
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "emit"):
                name = family_of(node.func.value, aliases)
                if name is not None:
                    out[name].add(rel)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_row_names_the_files_of_its_case_and_they_hold_what_it_says(case: str) -> None:
    row = ROWS[case]
    for path, names in CASES[case].items():
        assert path in row, (case, path)
        assert (REPO / path).exists(), path
        for name in names:
            assert f"`{name}" in row or f"{name}`" in row, (case, name)
            assert name in _defined(path), (path, name)


def test_every_path_the_table_names_exists() -> None:
    paths = set(re.findall(r"\b((?:gpu_exporter|alerts|dashboards|deploy|scripts|tests|docs)"
                           r"/[\w./<>-]*[\w/>])", TABLE))
    named = {p for case in CASES.values() for p in case}
    assert named - {"pyproject.toml"} <= paths, named - paths  # the parser sees the rows
    # `<vendor>`/`<name>` placeholders name a file to create, not one that exists.
    missing = sorted(p for p in paths if "<" not in p and not (REPO / p).exists())
    assert missing == []


def test_each_kind_of_family_is_emitted_where_the_table_says() -> None:
    emitters = _emitters()
    for fam in c.CATALOGUE:
        if fam.scope not in EMITTED_IN:
            continue
        expected = ELSEWHERE.get(fam.name, EMITTED_IN[fam.scope])
        assert emitters[fam.name] == {expected}, fam.name


def test_the_sources_row_names_every_folder_of_sources_and_readers() -> None:
    """Each kind of source has a folder of gpu_exporter/sources/ (libraries and probes) or
    gpu_exporter/readers/ (files and sockets); the row sends a newcomer to each, and both
    folders are layers of the layers table."""
    row = ROWS["a source of readings"]
    layers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["gpu-exporter"]
    assert {"sources", "readers"} <= {layer["folder"] for layer in layers["layers"]}
    for top in ("sources", "readers"):
        folders = sorted(p.name for p in (REPO / "gpu_exporter" / top).iterdir()
                         if (p / "__init__.py").exists())
        assert folders, f"no folder under gpu_exporter/{top}/"
        for name in folders:
            assert f"`{top}/{name}/`" in row, name


def _layers() -> list[tuple[str, str]]:
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["gpu-exporter"]
    return [(layer["name"], layer["folder"]) for layer in table["layers"]]


def test_the_layers_section_maps_each_layer_to_its_folder_in_order() -> None:
    section = TEXT.split("## Layers and folders")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\w+) \| `gpu_exporter/(\w+)/` \| .+ \|$", section, re.M)
    assert rows == _layers()
    for _, folder in rows:
        assert (REPO / "gpu_exporter" / folder / "__init__.py").exists(), folder


def test_the_layers_rule_lists_the_layers_of_pyproject() -> None:
    rules = " ".join(TEXT.split("## Rules of the house")[1].split("\n## ")[0].split())
    names = ", ".join(name for name, _ in _layers())
    assert f"`[[tool.gpu-exporter.layers]]`: {names})" in rules, names
