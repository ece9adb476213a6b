"""NVML's process lists of every GPU of the current session, read once per scrape for
every collector that needs them (the processes collector's memory per process, the eBPF
collector's device of each CUDA call), in the NVML stack's own lanes
(`NvmlStack.process_lanes`): a GPU whose process call hangs costs only itself, and is
`busy` (not asked again) until that call returns.

A round is begun by whichever collector asks first (through the scrape's inputs,
`collectors/inputs.py`), and finished by one of them; each GPU's job reads its lists and,
where the processes collector lent its sampler (`NvmlStack.utilization`), its utilization
samples since the previous scrape, in the same job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

from gpu_exporter.sources.library.lanes import Outcome, Run
from gpu_exporter.sources.nvml.devices import NvmlDevice
from gpu_exporter.sources.nvml.processes import (
    DeviceProcesses,
    UtilizationState,
    read_lists,
    with_utilization,
)
from gpu_exporter.sources.nvml.stack import NvmlStack, Session

# NVML's process reads end this long before the scrape deadline, for the rest of the
# collectors' work (see collectors/nvidia.py).
RETURN_MARGIN_SECONDS = 0.15


@dataclass(frozen=True)
class ProcessLists:
    """Every GPU's process lists at one scrape (never changed once made)."""

    session: Session
    devices: Mapping[int, NvmlDevice]  # the session's GPUs when the round began, by index
    # GPUs still stuck in a process call of an earlier scrape: not asked this time
    busy: frozenset[int]
    # by NVML index: the GPU's lists (with utilization where sampled), or its exception;
    # a GPU absent (and not busy) did not answer within the scrape timeout
    results: Mapping[int, Outcome[DeviceProcesses]]


class ProcessRound:
    """One scrape's round of process reads, started; `finish` once."""

    def __init__(self, stack: NvmlStack, deadline: float) -> None:
        """Starts a job per GPU of the live session. Raises NvmlUnavailable, StackBusy
        (from `NvmlStack.session`)."""
        self.session = stack.session(deadline)
        self.devices = dict(sorted(self.session.devices.items()))
        sampler = stack.utilization
        states = (sampler.states(self.session.generation, self.devices)
                  if sampler is not None else {})
        self._run: Run[int, DeviceProcesses] = stack.process_lanes.start(
            [(index, partial(_read, dev, states.get(index)))
             for index, dev in self.devices.items()])

    def finish(self, deadline: float) -> ProcessLists:
        """Waits for the GPUs until `deadline`; what they answered by then."""
        results = self._run.finish(deadline)
        return ProcessLists(self.session, self.devices, frozenset(self._run.busy), results)


def _read(dev: NvmlDevice, state: UtilizationState | None) -> DeviceProcesses:
    lists = read_lists(dev)
    return lists if state is None else with_utilization(dev, state, lists)
