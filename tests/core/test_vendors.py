"""The vendor seam: every GPU vendor is registered once, in `gpu_exporter/model/vendors.py`
(slug, gpu_index order, PCI ids, collector), and CONTRIBUTING's "a GPU vendor" recipe
lists every place a new vendor touches. These hold both true: the registry agrees with
the `Vendor` type, the collectors, the PCI discovery and the spec, and no other module of
the package spells out a list of vendors (which a new vendor would have to be added to)."""

from __future__ import annotations

import ast
import re
from typing import get_args

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.collectors.sysfs_gpus import SysfsGpuCollector
from gpu_exporter.model import vendors
from gpu_exporter.model.records import VENDOR_ORDER, Vendor
from gpu_exporter.readers.sysfs import pci
from tests.helpers import REPO

RECIPE = re.search(r"^\| a GPU vendor \| (.+) \|$",
                   (REPO / "CONTRIBUTING.md").read_text(), re.M)


def test_the_registry_is_the_vendor_type_in_gpu_index_order() -> None:
    assert tuple(v.slug for v in vendors.VENDORS) == get_args(Vendor)
    assert {v.slug: i for i, v in enumerate(vendors.VENDORS)} == VENDOR_ORDER
    assert all(v.slug == v.slug.lower() and v.slug.isalpha() for v in vendors.VENDORS)


def test_pci_discovery_knows_every_vendor_from_the_registry() -> None:
    assert pci.VENDOR_IDS is vendors.VENDOR_IDS
    assert pci.GPU_DRIVERS is vendors.GPU_DRIVERS
    for v in vendors.VENDORS:
        assert v.pci_vendor_ids and all(pci.VENDOR_IDS[i] == v.slug for i in v.pci_vendor_ids)


def test_each_vendor_has_its_registered_collector() -> None:
    by_name = {c.name: c for c in REGISTRY}
    for v in vendors.VENDORS:
        collector = by_name[v.collector]
        if issubclass(collector, SysfsGpuCollector):
            assert collector.vendor == v.slug
            assert collector.vendor_id in v.pci_vendor_ids
            assert set(collector.drivers) == set(v.drivers)


def test_the_spec_states_the_registry_order() -> None:
    spec = (REPO / "spec" / "metrics.md").read_text()
    line = next(x for x in spec.splitlines() if x.startswith("| `gpu_index` |"))
    positions = [line.find(v.name.split(" (")[0]) for v in vendors.VENDORS]
    assert -1 not in positions and positions == sorted(positions), (line, positions)


def test_no_other_module_lists_the_vendors() -> None:
    """A literal naming two vendors or more (a tuple, dict, set or list of slugs) is a
    list a new vendor would have to join: only the registry may have one."""
    slugs = set(get_args(Vendor))
    offenders = []
    for path in sorted((REPO / "gpu_exporter").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel == "gpu_exporter/model/vendors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                items: list[ast.expr | None] = list(node.keys)
            elif isinstance(node, ast.Tuple | ast.Set | ast.List):
                items = list(node.elts)
            else:
                continue
            named = {i.value for i in items if isinstance(i, ast.Constant)} & slugs
            if len(named) >= 2:
                offenders.append(f"{rel}:{node.lineno} {sorted(named)}")
    assert offenders == []


def test_the_recipe_names_every_place_a_vendor_touches() -> None:
    assert RECIPE, "CONTRIBUTING.md has a row `a GPU vendor`"
    row = RECIPE.group(1)
    for place in ("gpu_exporter/model/vendors.py", "`Vendor`", "`VENDORS`",
                  "gpu_exporter/collectors/<vendor>.py", "gpu_exporter/collectors/__init__.py",
                  "spec/metrics.md", "gpu_exporter/readers/sysfs/<vendor>.py",
                  "gpu_exporter/sources/<library>/", "gpu_exporter/sources/library/",
                  "sink.gpu()", "pyproject.toml"):
        assert place in row, place
    for path in re.findall(r"`(gpu_exporter/[\w/.]+)`", row):
        assert (REPO / path).exists(), path
