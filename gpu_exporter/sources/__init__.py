"""Sources of readings: what a library or a probe answers, to typed, base-unit records (no
Prometheus here), one folder per source: `nvml` (what NVML answers), `ebpf` (uprobes on
CUDA and HIP). Plain files and sockets (sysfs, procfs, the kubelet) are `readers`', which
sources may use."""
