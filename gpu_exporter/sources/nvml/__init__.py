"""The one NVML stack of the exporter (`nvidia-ml-py` over libnvidia-ml.so.1), shared by
the nvidia and processes collectors.

- `calls`: how NVML's answers are sorted (absent, device lost, NVML gone, a failure),
  the one error type (`NvmlUnavailable`) and the one version-fallback mechanism.
- `devices`: a GPU's identity, MIG devices and per-device capabilities, read once.
- `fields`: the field-values batch as a table, with per-field fallbacks.
- `values`: one scrape of one GPU's values.
- `nvlink`: the NVLink rows of the field-values batch, per link.
- `pcie`: the PCIe link NVML reports, and its error counts (NVML's, else the kernel's AER
  counters through `readers.sysfs.pcie`).
- `processes`: one scrape of one GPU's processes and their utilization.
- `gpm`: SM, tensor-pipe and DRAM activity through GPM (Hopper and newer), per GPU and
  MIG GPU instance, one sample kept per target between scrapes.
- `events`: the XID event listener (NVIDIA's Xid Catalog, each code's immediate action,
  is data of the model layer: `gpu_exporter/model/xid_catalog.py`).
- per-GPU calls run in lanes (`sources.library.lanes`, shared with HLML), so that one
  hung or lost GPU costs only itself.
- `stack`: one NVML session for the process: init, discovery (checked against the GPUs
  the driver lists, `readers.procfs.nvidia_driver`, and those on the PCI bus,
  `readers.sysfs.nvidia_bus`), retries, features.

Readers here return records in base units; only collectors know Prometheus.
"""
