"""What each GPU needs now, and why, from one scrape's device series: what `doctor`
prints per GPU. The same signals the action alerts read (alerts/gpu-alerts.rules.yml):
the driver's recovery action, the memory repair state, the XIDs counted since the
exporter started with their Xid Catalog action, and whether the GPU answers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Most urgent first: what to do is the first of these any reason asks for.
ORDER = ("replace the GPU", "reboot the node", "reset the GPU", "bring the GPU back",
         "restart the application", "investigate", "none")
_RECOVERY = {
    "gpu_reset": "reset the GPU", "drain_and_reset": "reset the GPU",
    "bus_reset": "reset the GPU", "node_reboot": "reboot the node",
    "system_reboot": "reboot the node", "drain_p2p": "investigate",
    "recover_imex_domain": "investigate", "unknown": "investigate",
}
_FAILED = ("investigate", "its health state is failed (e.g. uncorrected ECC errors pending)")
_XID = {"restart_app": "restart the application", "reset_gpu": "reset the GPU",
        "restart_bm": "reboot the node", "unknown": "investigate"}


@dataclass
class GpuNeed:
    gpu: str  # "GPU 3 0000:5d:00.0 GPU-…"
    reasons: list[tuple[str, str]] = field(default_factory=list)  # (action, why)

    @property
    def action(self) -> str:
        return min((a for a, _ in self.reasons), key=ORDER.index, default="none")


def needs(families: Iterable[Any]) -> list[GpuNeed]:
    """Per GPU (in gpu_index order), what it needs, from prometheus_client metric
    families (their samples: name, labels, value)."""
    gpus: dict[tuple[int, str], GpuNeed] = {}
    for family in families:
        for s in family.samples:
            labels = s.labels
            if "gpu_index" not in labels or "hw_parent" in labels:
                continue  # not a GPU series, or a MIG device (its parent tells)
            key = (int(labels["gpu_index"]), labels.get("gpu_pci_address", ""))
            gpu = gpus.setdefault(key, GpuNeed(" ".join(
                x for x in (f"GPU {labels['gpu_index']}", labels.get("gpu_pci_address"),
                            labels.get("hw_id")) if x)))
            why = _reason(s.name, labels, s.value)
            if why is not None:
                gpu.reasons.append(why)
    for gpu in gpus.values():
        # A failed health state says no more than the reasons beside it, when there are.
        if len(gpu.reasons) > 1:
            gpu.reasons = [r for r in gpu.reasons if r[1] != _FAILED[1]]
    return [gpus[k] for k in sorted(gpus)]


def _reason(name: str, labels: dict[str, str], value: float) -> tuple[str, str] | None:
    if name == "hw_gpu_up" and value == 0:
        return ("bring the GPU back", "it does not answer (hw_gpu_up 0): see nvidia.pci and "
                "nvidia.nvml above, and the GpuDown runbook")
    if name == "hw_gpu_recovery_action" and value == 1 and labels["action"] != "none":
        action = labels["action"]
        return (_RECOVERY.get(action, "investigate"),
                f"the driver's recovery action is {action}")
    if name == "hw_gpu_memory_row_remap_failure" and value == 1:
        return ("replace the GPU", "a memory row could not be remapped: no spare rows left")
    if name == "hw_gpu_memory_row_remap_pending" and value == 1:
        return ("reset the GPU", "a memory row remap is pending until the next reset")
    if name == "hw_gpu_memory_retired_pages_pending" and value == 1:
        return ("reset the GPU", "a page retirement is pending until the next reset")
    if name == "hw_gpu_xid_errors_total" and value > 0 and labels["action"] != "ignore":
        action = labels["action"]
        return (_XID.get(action, "investigate"),
                f"XID {labels['xid']} x{value:g} (Xid Catalog: {action})")
    if name == "hw_status" and labels.get("hw_state") == "failed" and value == 1:
        return _FAILED
    return None


def report(gpus: list[GpuNeed]) -> str:
    """One line per GPU: what it needs and why."""
    if not gpus:
        return ""
    width = max(len(g.gpu) for g in gpus)
    lines = ["GPUs: what each needs now"]
    for g in gpus:
        why = "; ".join(w for _, w in g.reasons)
        lines.append(f"  {g.gpu:<{width}}  {g.action}" + (f": {why}" if why else ""))
    return "\n".join(lines) + "\n"
