"""GpuReading -> the hw_gpu_* families: one mapping for every vendor, one emit line per
reading field, and the device labels of an identity."""

from __future__ import annotations

from gpu_exporter.model import catalogue as c
from gpu_exporter.model import xid_catalog
from gpu_exporter.model.labels import DeviceLabels, known
from gpu_exporter.model.metric_types import Emitted
from gpu_exporter.model.records import (
    NVLINK_STATES,
    VGPU_LICENSE_STATES,
    GpmReading,
    GpuReading,
    HealthState,
    NvlinkReading,
)

_STATES: tuple[HealthState, ...] = ("ok", "degraded", "failed")


def device_labels(reading: GpuReading, gpu_index: int) -> DeviceLabels:
    ident = reading.identity
    labels: DeviceLabels = {"hw_vendor": ident.vendor, "gpu_index": str(gpu_index)}
    # A GPU not identified (yet) has no hw_id, name or address label rather than an
    # empty one.
    if ident.hw_id is not None:
        labels["hw_id"] = ident.hw_id
    if ident.name:
        labels["hw_name"] = ident.name
    if ident.pci_address:
        labels["gpu_pci_address"] = ident.pci_address
    if ident.parent_hw_id is not None:
        labels["hw_parent"] = ident.parent_hw_id
        labels["gpu_mig_profile"] = ident.mig_profile or ""
    return labels


def emit(r: GpuReading, out: Emitted) -> None:
    """Every sample of one device; the exporter joins its device labels (device=key)."""
    dev = r.identity.key
    ident = r.identity
    info = known(c.GpuInfoLabels, hw_model=ident.model, hw_driver_version=ident.driver_version,
                 hw_firmware_version=ident.firmware_version,
                 hw_serial_number=ident.serial_number, gpu_pci_bus_id=ident.nvml_bus_id,
                 gpu_instance_id=None if ident.gpu_instance_id is None
                 else str(ident.gpu_instance_id))
    c.HW_GPU_INFO.emit(out, 1, info, dev)
    c.HW_GPU_UP.emit(out, 1 if r.up else 0, {}, dev)
    for task, ratio in r.utilization_ratio.items():
        c.HW_GPU_UTILIZATION.emit(out, ratio, {"hw_gpu_task": task}, dev)
    c.HW_GPU_MEMORY_USAGE.emit(out, r.memory_usage_bytes, {}, dev)
    c.HW_GPU_MEMORY_LIMIT.emit(out, r.memory_limit_bytes, {}, dev)
    c.HW_GPU_MEMORY_RESERVED.emit(out, r.memory_reserved_bytes, {}, dev)
    if r.memory_usage_bytes is not None and r.memory_limit_bytes:
        c.HW_GPU_MEMORY_UTILIZATION.emit(
            out, r.memory_usage_bytes / r.memory_limit_bytes, {}, dev)
    c.HW_GPU_MEMORY_CONTROLLER_UTILIZATION.emit(
        out, r.memory_controller_utilization_ratio, {}, dev)
    c.HW_GPU_POWER_DRAW.emit(out, r.power_draw_watts, {}, dev)
    c.HW_GPU_POWER_LIMIT.emit(out, r.power_limit_watts, {}, dev)
    c.HW_GPU_ENERGY.emit(out, r.energy_consumed_joules, {}, dev)
    for sensor, celsius in r.temperature_celsius.items():
        c.HW_GPU_TEMPERATURE.emit(out, celsius, {"sensor": sensor}, dev)
    for fan, ratio in r.fan_speed_ratio.items():
        c.HW_GPU_FAN_SPEED_RATIO.emit(out, ratio, {"fan": fan}, dev)
    for fan, rpm in r.fan_speed_rpm.items():
        c.HW_GPU_FAN_SPEED_RPM.emit(out, rpm, {"fan": fan}, dev)
    for domain, hertz in r.clock_hertz.items():
        c.HW_GPU_CLOCK.emit(out, hertz, {"hw_gpu_clock_domain": domain}, dev)
    for direction, nbytes in r.io_bytes.items():
        c.HW_GPU_IO.emit(out, nbytes, {"network_io_direction": direction}, dev)
    for error_type, count in r.errors.items():
        c.HW_ERRORS.emit(out, count, {"hw_type": "gpu", "error_type": error_type}, dev)
    for xid, count in sorted(r.xid_errors.items()):
        c.HW_GPU_XID_ERRORS.emit(out, count, {"xid": str(xid), "action": xid_catalog.action(xid)},
                                 dev)
    c.HW_GPU_XID_LAST.emit(out, r.last_xid, {}, dev)
    _repair(r, out, dev)
    for reason, active in sorted(r.throttle_active.items()):
        c.HW_GPU_CLOCK_THROTTLE.emit(out, 1 if active else 0, {"reason": reason}, dev)
    if r.state is not None:
        for state in _STATES:
            c.HW_STATUS.emit(out, 1 if state == r.state else 0,
                             {"hw_type": "gpu", "hw_state": state}, dev)
    if r.pcie_link is not None:
        link = r.pcie_link
        c.HW_GPU_PCIE_CURRENT_LINK_WIDTH.emit(out, link.current_width_lanes, {}, dev)
        c.HW_GPU_PCIE_MAX_LINK_WIDTH.emit(out, link.max_width_lanes, {}, dev)
        c.HW_GPU_PCIE_CURRENT_LINK_TRANSFERS.emit(
            out, link.current_transfers_per_second, {}, dev)
        c.HW_GPU_PCIE_MAX_LINK_TRANSFERS.emit(out, link.max_transfers_per_second, {}, dev)
    if r.nvlink is not None:
        _nvlink(r.nvlink, out, dev)
    for (scope, nic_link), ports in sorted(r.nic_links.items()):
        c.HW_GPU_NIC_LINKS.emit(out, ports, {"nic_link_state": nic_link, "nic_scope": scope},
                                dev)
    if r.gpm is not None:
        _gpm(r.gpm, r, {}, out)
    for instance, gpm in sorted(r.gpm_instances.items()):
        _gpm(gpm, r, {"gpu_instance_id": str(instance)}, out)


def _repair(r: GpuReading, out: Emitted, dev: str) -> None:
    """What the GPU needs: the one recovery action the driver gives, at 1 (the others are
    not written as 0: eight series per GPU that said nothing, cut for the series budget of
    issue #31); the licence state, one at 1 and the others 0."""
    if r.recovery_action is not None:
        c.HW_GPU_RECOVERY_ACTION.emit(out, 1, {"action": r.recovery_action}, dev)
    for severity, rows in r.remapped_rows.items():
        c.HW_GPU_MEMORY_REMAPPED_ROWS.emit(out, rows, {"error_type": severity}, dev)
    c.HW_GPU_MEMORY_ROW_REMAP_PENDING.emit(out, _flag(r.row_remap_pending), {}, dev)
    c.HW_GPU_MEMORY_ROW_REMAP_FAILURE.emit(out, _flag(r.row_remap_failure), {}, dev)
    for severity, pages in r.retired_pages.items():
        c.HW_GPU_MEMORY_RETIRED_PAGES.emit(out, pages, {"error_type": severity}, dev)
    c.HW_GPU_MEMORY_RETIRED_PAGES_PENDING.emit(out, _flag(r.retired_pages_pending), {}, dev)
    if r.vgpu_license_state is not None:
        for state in VGPU_LICENSE_STATES:
            c.HW_GPU_VGPU_LICENSE_STATE.emit(out, 1 if state == r.vgpu_license_state else 0,
                                             {"state": state}, dev)


def _flag(value: bool | None) -> int | None:
    return None if value is None else int(value)


def _nvlink(n: NvlinkReading, out: Emitted, dev: str) -> None:
    """All links counted by state, or (per link) each link 1 in its state and 0 in the
    others; traffic and errors for all links together or per link (`nvlink` label)."""
    if n.per_link:
        for number, current in sorted(n.states.items()):
            for state in NVLINK_STATES:
                c.HW_GPU_NVLINK_LINKS.emit(out, 1 if state == current else 0,
                                           {"nvlink_state": state, "nvlink": str(number)}, dev)
    else:
        for state, count in n.links_by_state().items():
            c.HW_GPU_NVLINK_LINKS.emit(out, count, {"nvlink_state": state}, dev)
    for (link, direction), nbytes in n.io_bytes.items():
        io: c.NvlinkIoLabels = {"network_io_direction": direction}
        if link is not None:
            io["nvlink"] = str(link)
        c.HW_GPU_NVLINK_IO.emit(out, nbytes, io, dev)
    for (link, error_type), count in n.errors.items():
        error: c.ErrorLabels = {"hw_type": "gpu", "error_type": error_type}
        if link is not None:
            error["nvlink"] = str(link)
        c.HW_ERRORS.emit(out, count, error, dev)


def _gpm(g: GpmReading, r: GpuReading, labels: c.GpmLabels, out: Emitted) -> None:
    dev = r.identity.key
    c.HW_GPU_ENGINE_ACTIVE.emit(out, g.engine_active_ratio, labels, dev)
    c.HW_GPU_SM_ACTIVE.emit(out, g.sm_active_ratio, labels, dev)
    c.HW_GPU_SM_OCCUPANCY.emit(out, g.sm_occupancy_ratio, labels, dev)
    c.HW_GPU_TENSOR_ACTIVE.emit(out, g.tensor_active_ratio, labels, dev)
    for pipe, ratio in g.pipe_active_ratio.items():
        c.HW_GPU_PIPE_ACTIVE.emit(out, ratio, {**labels, "hw_gpu_pipe": pipe}, dev)
    c.HW_GPU_DRAM_ACTIVE.emit(out, g.dram_active_ratio, labels, dev)
    if r.identity.hw_id is not None:
        c.GPM_WINDOW.emit(out, g.window_seconds, {**labels, "hw_id": r.identity.hw_id})
