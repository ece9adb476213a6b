"""Which AMD GPU a HIP process's calls ran on (issue #23): DRM fdinfo is the judge, as NVML
is for CUDA (readers/procfs/fdinfo.py reads it). Every open amdgpu DRM file names its
GPU (`drm-pdev`); a process holding files of exactly one AMD GPU ran there. The view is
NVML's shape (reading.NvmlView: pid -> device keys, complete, device key by PCI address),
so the counters judge HIP calls by the same rules: one GPU, or several and the thread's
hipSetDevice ordinal turned into a GPU by what hipDeviceGetPCIBusId told the process.

A HIP process opens the render node of every GPU it can see (ROCr makes an agent of
each), so one GPU open means one GPU visible: under container or ROCR_VISIBLE_DEVICES /
HIP_VISIBLE_DEVICES isolation. A process that sees several GPUs has each of them open
whatever it computes on: only its ordinals tell (docs/ebpf.md)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from gpu_exporter.readers.procfs.fdinfo import DrmClient
from gpu_exporter.readers.sysfs.pci import drm_card_addresses
from gpu_exporter.sources.ebpf.reading import NvmlView

AMDGPU = "amdgpu"
HIP_RUNTIME = "libamdhip64"


def is_hip_runtime(path: str) -> bool:
    """A file named as AMD's HIP runtime (libamdhip64.so.6, libamdhip64-ab12cd.so)."""
    return os.path.basename(path).startswith(HIP_RUNTIME)


def amd_cards(sysfs: str) -> frozenset[str]:
    """PCI addresses of the cards the amdgpu driver has: none, no fdinfo walk."""
    return drm_card_addresses(sysfs, (AMDGPU,))


def amd_view(clients: Iterable[DrmClient]) -> NvmlView:
    """The AMD GPUs each process has open (device keys: PCI addresses, which the
    exporter joins to the GPU's labels), from one whole walk of the DRM clients."""
    devices_of: dict[int, set[str]] = {}
    for client in clients:
        if client.driver != AMDGPU:
            continue
        for pid in client.pids:
            devices_of.setdefault(pid, set()).add(client.pci_address)
    pcis = {pci for found in devices_of.values() for pci in found}
    return NvmlView({pid: frozenset(found) for pid, found in devices_of.items()}, True,
                    {pci: pci for pci in pcis})


def combined(nvml: NvmlView | None, amd: NvmlView | None) -> NvmlView | None:
    """NVML's view and AMD's together (a host may have both); complete only when both
    were read whole."""
    if nvml is None or amd is None:
        return amd if nvml is None else nvml
    devices = dict(nvml.devices_of)
    for pid, found in amd.devices_of.items():
        devices[pid] = devices.get(pid, frozenset()) | found
    return NvmlView(devices, nvml.complete and amd.complete, {**amd.by_pci, **nvml.by_pci})
