"""Files under /sys: sysfs, hwmon and the PCI bus (AMD, Intel, PCIe links and AER, the
NVIDIA GPUs on the bus)."""
