"""The engine's scans alone (gpu_exporter/sources/ebpf/rescans.py) over the real /proc: the
processes the tracepoints name are scanned and their CUDA files probed, through the
attacher and the loaded BPF program (real bcc), with no event loop and no rescan of
every process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.sources.ebpf.libraries import Scanner
from gpu_exporter.sources.ebpf.library_probes import Attacher
from gpu_exporter.sources.ebpf.loader import Program
from gpu_exporter.sources.ebpf.names import NameCap
from gpu_exporter.sources.ebpf.rescans import Scans
from gpu_exporter.sources.ebpf.resolve import Resolver
from tests.ebpf.conftest import Build, Workload, fresh_copy


@pytest.fixture
def scans() -> Iterator[tuple[Scans, threading.Event]]:
    import bcc

    program = Program()
    program.load(bcc)
    stop = threading.Event()
    attacher = Attacher(program, stop)
    try:
        program.open(bcc, lambda *_: 0, lambda *_: 0)
        yield Scans("/proc", program, Scanner("/proc"), Resolver("/proc", NameCap(10)),
                    attacher, stop), stop
    finally:
        attacher.shutdown()
        program.unload(f.attachment for f in attacher.take_all())


def test_an_asked_process_has_its_cuda_files_probed_until_the_engine_stops(
        scans: tuple[Scans, threading.Event], cuda_build: Build, tmp_path: Path) -> None:
    s, stop = scans
    first = fresh_copy(cuda_build, tmp_path / "first")
    w = Workload([str(first / "workload"), "threads", "1", "1"])
    s.scan_asked()  # nobody asked: nothing probed
    assert s.attacher.attached_libraries == []
    s.ask(w.proc.pid)  # it exec'd or mapped a file
    s.scan_asked()
    assert s.attacher.attached_libraries == [f"{first}/libcuda.so.1",
                                                 f"{first}/libcudart.so.12"]
    w.go()

    later = fresh_copy(cuda_build, tmp_path / "later")
    w = Workload([str(later / "workload"), "threads", "1", "1"])
    stop.set()  # the engine closes: nothing new is attached
    s.ask(w.proc.pid)
    s.scan_asked()
    assert s.attacher.attached_libraries == [f"{first}/libcuda.so.1",
                                                 f"{first}/libcudart.so.12"]
    w.go()
