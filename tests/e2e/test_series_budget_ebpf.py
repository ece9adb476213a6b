"""The series budget with eBPF on (spec/series-budget.yml, `ebpf`): the CUDA families of the
end-to-end node, whose real uprobes count a real workload, cost at most the stated series
per kernel name and process, and per process. eBPF series grow with kernel names and
processes, not with GPUs, so that is how their budget is stated (tests/budget/ holds the
rest of the budget)."""

from __future__ import annotations

from collections import Counter

from tests.budget.measure import load_budget, scope
from tests.e2e.conftest import Stack
from tests.helpers import parse


def test_ebpf_series_per_kernel_and_process_within_budget(stack: Stack) -> None:
    cuda = [s for s in parse(stack.exporter.scrape()) if scope(s) == "cuda"]
    kernel = [s for s in cuda if "cuda_kernel_name" in s.labels]
    other = [s for s in cuda if "cuda_kernel_name" not in s.labels]
    pairs = {(s.labels.get("process_pid", s.labels.get("process_executable_name")),
              s.labels["cuda_kernel_name"]) for s in kernel}
    processes = {s.labels.get("process_pid", s.labels.get("process_executable_name"))
                 for s in other}
    assert pairs and processes, Counter(s.name for s in cuda)
    per_kernel = len(kernel) / len(pairs)
    per_process = len(other) / len(processes)
    budget = load_budget()["ebpf"]
    measured = f"measured {per_kernel:.1f} per kernel and process, {per_process:.1f} per process"
    assert per_kernel <= budget["per_kernel_per_process"], (
        f"{measured}: past spec/series-budget.yml; cut series or raise the budget there "
        f"(and in docs/performance.md) saying why")
    assert per_process <= budget["per_process"], measured
