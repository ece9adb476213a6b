"""readers.files, the one reader of procfs/sysfs files: regular files only, never
waiting, never more than the cap; what it refuses says why."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_exporter.readers import file_values, files

CAP = 4096


def _in_thread(fn: Callable[[], object]) -> object:
    """Run `fn` on a daemon thread and wait at most 10 s: a read that blocks on a FIFO
    leaves the thread behind and fails here instead of hanging the suite."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the read is still waiting after 10 s"
    return out[0]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "stat"
    os.mkfifo(fifo)
    got = _in_thread(lambda: files.read_capped(fifo, CAP))
    assert isinstance(got, files.Refused), got
    assert "is a FIFO, not a regular file" in str(got) and str(fifo) in str(got)
    got = _in_thread(lambda: files.head(fifo, CAP))
    assert isinstance(got, files.Refused), got


def test_a_held_file_is_checked_once_and_read_afresh_from_its_start(tmp_path: Path
                                                                   ) -> None:
    """A value read every scrape through one descriptor: a change written in place is
    read (pread from offset 0), a swap of the path is not seen while it is held (the
    descriptor names its inode: nothing swapped in can be a FIFO or a device), a closed
    one opens the path again, and what the path then holds is checked again."""
    value = tmp_path / "energy_uj"
    value.write_text("1000\n")
    held = files.HeldFile(str(value), CAP)
    assert held.read() == b"1000\n"
    value.write_text("2000000\n")  # in place, as the kernel's value changes
    assert held.read() == b"2000000\n"
    value.rename(tmp_path / "old")
    os.mkfifo(value)
    assert held.read() == b"2000000\n"  # its own inode still
    held.close()
    got = _in_thread(held.read)
    assert isinstance(got, files.Refused), got
    assert "is a FIFO, not a regular file" in str(got)
    value.unlink()
    with pytest.raises(FileNotFoundError):
        held.read()
    value.write_text("1" * (CAP + 1))
    with pytest.raises(files.Refused, match="is larger than"):
        held.read()


def test_a_fifo_with_a_writer_is_not_read_either(tmp_path: Path) -> None:
    fifo = tmp_path / "meminfo"
    os.mkfifo(fifo)
    # A writer holding the FIFO open: a plain open() would then read what it writes.
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, b"MemTotal: 1 kB\n")
        assert file_values.read_bytes(fifo) is None
    finally:
        os.close(writer)


def test_a_device_is_never_read(tmp_path: Path) -> None:
    """A link to /dev/zero where a file should be: reading it would hand out zeros up
    to the cap. procfs files are checked before they are opened (opening some devices
    has effects of its own); sysfs values, hundreds a scrape, right after."""
    (tmp_path / "power1_average").symlink_to("/dev/zero")
    with pytest.raises(files.Refused, match="is a character device"):
        files.read_capped(tmp_path / "power1_average", CAP)
    with pytest.raises(files.Refused, match="is a character device"):
        files.head(tmp_path / "power1_average", CAP, stat_first=False)
    assert file_values.read_bytes(tmp_path / "power1_average") is None


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(files.Refused, match="is a folder"):
        files.read_capped(tmp_path, CAP)


def test_a_sparse_huge_file_is_refused_unread(tmp_path: Path) -> None:
    huge = tmp_path / "meminfo"
    with open(huge, "wb") as f:
        f.truncate(1 << 30)
    with pytest.raises(files.Refused, match=r"is larger than 4096 bytes \(1073741824\)"):
        files.read_capped(huge, CAP)
    # head() reads only the start of a file however long: one read of `size`
    assert files.head(huge, 16) == b"\0" * 16


def test_a_file_that_says_size_0_is_read_up_to_the_cap(tmp_path: Path) -> None:
    """procfs files say size 0: the cap holds while reading."""
    maps = Path(f"/proc/{os.getpid()}/maps")
    assert os.stat(maps).st_size == 0
    with pytest.raises(files.Refused, match="is larger than 64 bytes"):
        files.read_capped(maps, 64)
    whole = files.read_capped(maps, 64 * 1024 * 1024)
    assert whole.count(b"\n") > 10  # more than one read's worth, all of it


def test_a_file_within_the_cap_is_read_whole(tmp_path: Path) -> None:
    body = b"x" * (CAP - 1) + b"\n"
    (tmp_path / "f").write_bytes(body)
    assert files.read_capped(tmp_path / "f", CAP) == body
    (tmp_path / "g").write_bytes(body + b"y")
    with pytest.raises(files.Refused):
        files.read_capped(tmp_path / "g", CAP)


def test_missing_and_unreadable_stay_plain_os_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        files.read_capped(tmp_path / "nope", CAP)
    assert file_values.read_bytes(tmp_path / "nope") is None


def test_a_refused_sysfs_value_is_a_problem_with_its_reason(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "temp1_input")
    problems = file_values.Problems()
    assert file_values.read_int(tmp_path / "temp1_input", problems) is None
    assert problems.items == [(str(tmp_path / "temp1_input"),
                               f"{tmp_path / 'temp1_input'}: not read: is a FIFO, not a "
                               "regular file")]


# Reads that are not of procfs/sysfs/tracefs or a process's files, each with why.
NOT_SYSTEM_FILES = {
    "gpu_exporter/http/webconfig.py": "the operator's --web.config.file and the TLS files it names",
    "gpu_exporter/sources/ebpf/loader.py": "the BPF program's source, package data",
    "gpu_exporter/model/xid_catalog.py": "NVIDIA's Xid Catalog, package data",
}


def _direct_reads(path: Path) -> list[str]:
    import ast

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n.split(".")[0] == "psutil" for n in names):
                out.append(f"{node.lineno}: psutil")
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "open":
            out.append(f"{node.lineno}: open()")
        elif isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and (
                fn.value.id == "os" and fn.attr == "open"):
            out.append(f"{node.lineno}: os.open()")
        elif isinstance(fn, ast.Attribute) and fn.attr in ("read_text", "read_bytes") \
                and not node.args:  # pathlib's, not readers.files/readers.file_values
            out.append(f"{node.lineno}: .{fn.attr}()")
    return out


def test_every_system_file_is_read_through_readers_files() -> None:
    """No open(), os.open(), Path.read_text()/read_bytes() or psutil outside
    readers/files.py: a read that bypasses it can wait on a FIFO or read a huge file."""
    repo = Path(__file__).resolve().parents[2]
    found = {}
    for path in sorted((repo / "gpu_exporter").rglob("*.py")):
        rel = str(path.relative_to(repo))
        if rel == "gpu_exporter/readers/files.py" or rel in NOT_SYSTEM_FILES:
            continue
        reads = _direct_reads(path)
        if reads:
            found[rel] = reads
    assert found == {}, found
