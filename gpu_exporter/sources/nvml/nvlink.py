"""NVLink through NVML field values: the rows one scrape adds to a GPU's field batch,
and what their answers mean.

Every NVLink value rides the one `nvmlDeviceGetFieldValues` batch a GPU is read with
(`nvml.fields`); per-link rows carry the link as their scope id. The number of links
(NVML_FI_DEV_NVLINK_LINK_COUNT, a row of the batch from discovery on) is fixed by the
hardware: discovery adds the rows for that many links; a GPU without NVLink answers
NOT_SUPPORTED (or 0) and gets none, and its `nvidia.nvlink` state says so.

- state of each link: NVML_FI_DEV_NVLINK_GET_STATE, scope = link, NVML_NVLINK_STATE_*
  (0 inactive, 1 active, 2 sleep, 3 active but traffic disabled);
- traffic: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB of payload (protocol overhead
  not counted), scope 0xFFFFFFFF for all links together, or a link;
- errors: the *_ERROR_COUNT_TOTAL fields (all links) for flow-control (flit) CRC, data
  CRC, replay, recovery and data ECC. Per link NVML has replay and recovery for every
  link (NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY/RECOVERY, scope = link), the others only for
  links 0 to 11: those three stay totals when series are split by link.

Per-link readings (`--collector.nvidia.nvlink-per-link`) replace the all-links ones,
never both: a sum over a GPU's series is its total either way. KiB become bytes here.
"""

from __future__ import annotations

from collections.abc import Mapping

import pynvml

from gpu_exporter.model.features import Availability
from gpu_exporter.model.records import (
    Direction,
    NvlinkErrorType,
    NvlinkReading,
    NvlinkState,
)
from gpu_exporter.model.settings import Option
from gpu_exporter.sources.nvml.calls import FIX_CHECK, FIX_UPDATE
from gpu_exporter.sources.nvml.fields import Field

PER_LINK = Option(
    "collector.nvidia.nvlink-per-link", bool, False,
    "Report NVLink traffic, states, replays and recoveries per link (label nvlink) "
    "instead of per GPU: up to 18 times the NVLink series.", is_flag=True)

FI_STATE = pynvml.NVML_FI_DEV_NVLINK_GET_STATE
FI_THROUGHPUT: Mapping[Direction, int] = {  # KiB
    "transmit": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    "receive": pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
}
FI_ERROR_TOTALS: Mapping[NvlinkErrorType, int] = {
    "nvlink_crc_flit": pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
    "nvlink_crc_data": pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    "nvlink_replay": pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
    "nvlink_recovery": pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    "nvlink_ecc_data": pynvml.NVML_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL,
}
FI_ERRORS_PER_LINK: Mapping[NvlinkErrorType, int] = {
    "nvlink_replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "nvlink_recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
}
# NVML's link states, as the `nvlink_state` label names them
STATES: Mapping[int, NvlinkState] = {
    pynvml.NVML_NVLINK_STATE_INACTIVE: "inactive",
    pynvml.NVML_NVLINK_STATE_ACTIVE: "active",
    pynvml.NVML_NVLINK_STATE_SLEEP: "sleep",
    # NVML_NVLINK_STATE_ACTIVE_TRAFFIC_DISABLED: not yet named in 12.570, the oldest
    # bindings of the range
    3: "active_traffic_disabled",
}
ALL_LINKS = 0xFFFFFFFF
_KIB = 1024
LINK_COUNT = "nvlink_links"  # the row of the base batch (`nvml.fields.FIELDS`)


def _name(what: str, link: int | None) -> str:
    return f"nvlink.{what}" if link is None else f"nvlink.{what}.{link}"


def rows(links: int, per_link: bool) -> tuple[Field, ...]:
    """The batch rows of a GPU with `links` links."""
    split = FI_ERRORS_PER_LINK if per_link else {}
    out = [Field(_name("state", link), FI_STATE, scope_id=link) for link in range(links)]
    out += [Field(_name(error, None), fid) for error, fid in FI_ERROR_TOTALS.items()
            if error not in split]
    scopes: list[tuple[int | None, int]] = (
        [(n, n) for n in range(links)] if per_link else [(None, ALL_LINKS)])
    for which, scope in scopes:
        out += [Field(_name(direction, which), fid, scope_id=scope)
                for direction, fid in FI_THROUGHPUT.items()]
        out += [Field(_name(error, which), fid, scope_id=scope)
                for error, fid in split.items()]
    return tuple(out)


def availability(links: float | None, absent: int | None, per_link: bool) -> Availability:
    """The `nvidia.nvlink` state of a GPU, by its answer to the link count."""
    if links:
        return Availability.enabled(f"{int(links)} links" + (", per link" if per_link else ""))
    if links is not None or absent in (pynvml.NVML_ERROR_NOT_SUPPORTED,
                                       pynvml.NVML_ERROR_INVALID_ARGUMENT,
                                       pynvml.NVML_ERROR_NOT_FOUND):
        return Availability.disabled("this GPU has no NVLink")
    if absent == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
        return Availability.unavailable(
            "this NVML library has no nvmlDeviceGetFieldValues: no NVLink values", FIX_UPDATE)
    why = str(pynvml.NVMLError(absent)) if absent is not None else "no answer"
    return Availability.unavailable(f"NVML gives no NVLink link count ({why})", FIX_CHECK)


def decode(values: Mapping[str, float], links: int, per_link: bool) -> NvlinkReading:
    """The answers to `rows(links, per_link)` (a row NVML did not answer is left out of
    `values`) as a reading in base units."""
    states: dict[int, NvlinkState] = {}
    for link in range(links):
        code = values.get(_name("state", link))
        state = None if code is None else STATES.get(int(code))
        if state is not None:  # a state newer than these is left out
            states[link] = state
    io: dict[tuple[int | None, Direction], int] = {}
    errors: dict[tuple[int | None, NvlinkErrorType], int] = {}
    split = FI_ERRORS_PER_LINK if per_link else {}
    for error in FI_ERROR_TOTALS:
        if error not in split and _name(error, None) in values:
            errors[(None, error)] = int(values[_name(error, None)])
    for which in (range(links) if per_link else (None,)):
        for direction in FI_THROUGHPUT:
            kib = values.get(_name(direction, which))
            if kib is not None:
                io[(which, direction)] = int(kib) * _KIB
        for error in split:
            count = values.get(_name(error, which))
            if count is not None:
                errors[(which, error)] = int(count)
    return NvlinkReading(states, io, errors, per_link)
