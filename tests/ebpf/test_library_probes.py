"""The engine's attacher alone (gpu_exporter/sources/ebpf/library_probes.py): the BPF program loaded
(loader.Program, real bcc), no event loop, no scan: the test hands it the files a scan
would find. What it attaches is judged by what this program's own maps count, which
another exporter's probes on the same files cannot change."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf.libraries import Candidate, FileId
from gpu_exporter.sources.ebpf.library_probes import DETACH_AFTER_MISSES, Attacher
from gpu_exporter.sources.ebpf.loader import Program
from tests.ebpf.conftest import Build, Workload, fresh_copy


def _file(path: str) -> FileId:
    st = os.stat(path)
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino


def _launches(bpf: Any, pid: int) -> int:
    """The launches process `pid` made, as the probes counted them."""
    n = sum(int(v.value) for k, v in bpf[b"stats"].items()
            if k.fam == abi.FAM_LAUNCH and k.tgid == pid)
    slots, shapes = bpf[b"proc_slots"], bpf[b"shapes"]
    for k, slot in slots.items():
        if int(k.value) == pid:
            n += sum(int(s.n) for s in shapes[shapes.Key(int(slot.value))].launches)
    return n


def test_a_file_is_probed_once_and_detached_after_rescans_without_it(
        cuda_build: Build, tmp_path: Path) -> None:
    import bcc

    d = fresh_copy(cuda_build, tmp_path / "img")
    lib = str(d / "libcudart.so.12")
    program = Program()
    program.load(bcc)
    attacher = Attacher(program, threading.Event())
    try:
        program.open(bcc, lambda *_: 0, lambda *_: 0)
        first = Workload([str(d / "workload"), "threads", "1", "7"])
        seen = Candidate(_file(lib), first.proc.pid, lib, lib)
        attacher.attach_new([seen, seen])  # two processes map it: one set of probes
        assert attacher.attached_libraries == [lib]
        first.go()
        assert _launches(program.bpf, first.proc.pid) == 7

        for _ in range(DETACH_AFTER_MISSES - 1):
            attacher.detach_unmapped(set())  # a rescan that did not find it
        attacher.detach_unmapped({seen.file})  # found again: the misses start over
        for _ in range(DETACH_AFTER_MISSES - 1):
            attacher.detach_unmapped(set())
        assert attacher.attached_libraries == [lib]
        attacher.detach_unmapped(set())
        assert attacher.attached_libraries == []
        attacher.shutdown()  # the detach under way, in the background, is done
        after = Workload([str(d / "workload"), "threads", "1", "5"])
        after.go()
        assert _launches(program.bpf, after.proc.pid) == 0
    finally:
        attacher.shutdown()
        program.unload(f.attachment for f in attacher.take_all())


def test_a_file_without_cuda_symbols_is_not_tried_again(cuda_build: Build,
                                                        tmp_path: Path) -> None:
    """Said once, then left: a file (device, inode) is not read again at each scan."""
    import bcc

    program = Program()
    program.load(bcc)
    attacher = Attacher(program, threading.Event())
    try:
        program.open(bcc, lambda *_: 0, lambda *_: 0)
        plain = tmp_path / "libplain.so"
        plain.write_bytes(Path("/bin/true").read_bytes())
        cand = Candidate(_file(str(plain)), os.getpid(), str(plain), str(plain))
        attacher.attach_new([cand])
        assert attacher.attached_libraries == []
        # The same file (inode) now holds CUDA symbols: tried again, it would be probed.
        plain.write_bytes((cuda_build.dir / "libcudart.so.12").read_bytes())
        assert _file(str(plain)) == cand.file
        attacher.attach_new([cand])
        assert attacher.attached_libraries == []
    finally:
        attacher.shutdown()
        program.unload(f.attachment for f in attacher.take_all())
