"""GpuReading -> samples of the hw_gpu_* families: one mapping for every vendor."""

from __future__ import annotations

from gpu_exporter import catalogue as c
from gpu_exporter.collectors.base import Sample
from gpu_exporter.records import GpuReading

_STATES = ("ok", "degraded", "failed")


def device_labels(reading: GpuReading, gpu_index: int) -> dict[str, str]:
    ident = reading.identity
    labels: dict[str, str | None] = {
        c.HW_ID: ident.hw_id,
        c.HW_NAME: ident.name,
        c.HW_VENDOR: ident.vendor,
        c.GPU_INDEX: str(gpu_index),
        c.GPU_PCI_ADDRESS: ident.pci_address or "",
    }
    if ident.parent_hw_id is not None:
        labels[c.HW_PARENT] = ident.parent_hw_id
        labels[c.GPU_MIG_PROFILE] = ident.mig_profile or ""
    # A GPU not identified yet has no hw_id (or name) label rather than an empty one.
    return {k: v for k, v in labels.items() if v is not None and (v or k != c.HW_NAME)}


def samples(reading: GpuReading) -> list[Sample]:
    """Every sample of one device, labelled only with their own labels; the caller joins
    the device labels (device=identity.key)."""
    hw_id = reading.identity.key
    out: list[Sample] = []

    def add(metric: c.Metric, value: float | None, **labels: str) -> None:
        if value is not None:
            out.append(Sample(metric, labels, float(value), hw_id))

    ident = reading.identity
    info = {
        c.HW_MODEL: ident.model,
        c.HW_DRIVER_VERSION: ident.driver_version,
        c.HW_FIRMWARE_VERSION: ident.firmware_version,
        c.HW_SERIAL_NUMBER: ident.serial_number,
    }
    add(c.HW_GPU_INFO, 1, **{k: v for k, v in info.items() if v})
    add(c.HW_GPU_UP, 1 if reading.up else 0)
    for task, ratio in reading.utilization_ratio.items():
        add(c.HW_GPU_UTILIZATION, ratio, hw_gpu_task=task)
    add(c.HW_GPU_MEMORY_USAGE, reading.memory_usage_bytes)
    add(c.HW_GPU_MEMORY_LIMIT, reading.memory_limit_bytes)
    if reading.memory_usage_bytes is not None and reading.memory_limit_bytes:
        add(c.HW_GPU_MEMORY_UTILIZATION, reading.memory_usage_bytes / reading.memory_limit_bytes)
    add(c.HW_GPU_MEMORY_CONTROLLER_UTILIZATION, reading.memory_controller_utilization_ratio)
    add(c.HW_GPU_POWER_DRAW, reading.power_draw_watts)
    add(c.HW_GPU_POWER_LIMIT, reading.power_limit_watts)
    add(c.HW_GPU_ENERGY, reading.energy_consumed_joules)
    for sensor, celsius in reading.temperature_celsius.items():
        add(c.HW_GPU_TEMPERATURE, celsius, sensor=sensor)
    for fan, ratio in reading.fan_speed_ratio.items():
        add(c.HW_GPU_FAN_SPEED_RATIO, ratio, fan=fan)
    for fan, rpm in reading.fan_speed_rpm.items():
        add(c.HW_GPU_FAN_SPEED_RPM, rpm, fan=fan)
    for domain, hertz in reading.clock_hertz.items():
        add(c.HW_GPU_CLOCK, hertz, hw_gpu_clock_domain=domain)
    for direction, nbytes in reading.io_bytes.items():
        add(c.HW_GPU_IO, nbytes, network_io_direction=direction)
    for error_type, count in reading.errors.items():
        add(c.HW_ERRORS, count, hw_type="gpu", error_type=error_type)
    for xid, count in sorted(reading.xid_errors.items()):
        add(c.HW_GPU_XID_ERRORS, count, xid=str(xid))
    for reason, active in sorted(reading.throttle_active.items()):
        add(c.HW_GPU_CLOCK_THROTTLE, 1 if active else 0, reason=reason)
    if reading.state is not None:
        for state in _STATES:
            add(c.HW_STATUS, 1 if state == reading.state else 0, hw_type="gpu", hw_state=state)
    return out
