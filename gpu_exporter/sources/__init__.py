"""Sources of readings: hardware and kernel sources to typed, base-unit records (no
Prometheus here), one folder per kind of source: `nvml` (what NVML answers), `sysfs` (files
under /sys), `procfs` (files under /proc), `kubelet` (its PodResources API and its pods'
folders), `ebpf` (uprobes on CUDA); `files` is the one bounded reader of system files
they all read through."""
