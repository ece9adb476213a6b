"""The one way the exporter reads a file of procfs, sysfs, tracefs or a process's tree:
it never waits on the file and never holds more of it than its caller's cap.

- Regular files only. The path is `stat`ed before it is opened, so a device node is
  never opened (opening one runs its driver: a watchdog arms, a tape rewinds), and the
  open file is `fstat`ed again (the path may have been swapped in between).
- Opened with O_NONBLOCK: a FIFO put where a file should be is refused by the stat, and
  should one be swapped in, the open returns at once instead of waiting for a writer.
- Size-capped: a file whose size (as `stat` tells it: a sparse 1 GB file says so) is over
  the cap is refused unread; a file that says 0 (procfs) or 4096 (sysfs) is read up to
  the cap plus one byte, and refused when that byte comes. `head` reads only the start
  of a file that may legitimately be long (`/proc/stat`'s first line), and is the one
  read of a sysfs attribute (`readers.file_values`).

- Held (`HeldFile`): a value read every scrape (a power meter, an energy counter) may
  be opened once, checked once, and read from its start each time with `pread`: the
  open descriptor names one inode, which no later swap of the path can turn into a
  FIFO or a device, so the check of the open holds for every read after it.

A refused file raises `Refused`, an OSError with a message that says why ("is a FIFO,
not a regular file", "is larger than 1048576 bytes"), so that every caller that already
turns an OSError into a missing value, a `sink.fail` or a feature state reports it.
"""

from __future__ import annotations

import errno
import os
import stat

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_S_ISREG = stat.S_ISREG

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


class Refused(OSError):
    """A file the exporter will not read: not a regular file, or over its size cap."""

    def __init__(self, path: str | os.PathLike[str], why: str, code: int = errno.EINVAL
                 ) -> None:
        super().__init__(code, why, os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


def _check(path: str | os.PathLike[str], st: os.stat_result, limit: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused(path, f"is {_kind(st.st_mode)}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise Refused(path, f"is larger than {limit} bytes ({st.st_size})", errno.EFBIG)


def _open(path: str | os.PathLike[str], limit: int | None) -> int:
    _check(path, os.stat(path), limit)
    fd = os.open(path, _FLAGS)
    try:
        _check(path, os.fstat(fd), limit)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole file, at most `limit` bytes; OSError when it is missing or unreadable,
    `Refused` when it is not a regular file or longer than `limit`."""
    fd = _open(path, limit)
    try:
        chunks: list[bytes] = []
        got = 0
        while True:
            want = limit + 1 - got
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            # A short read is not the end: a seq_file (mounts, diskstats) hands out about
            # a page a read. Read until the kernel says end of file.
            if got > limit:
                raise Refused(path, f"is larger than {limit} bytes", errno.EFBIG)
        return b"".join(chunks)
    finally:
        os.close(fd)


def head(path: str | os.PathLike[str], size: int, *, stat_first: bool = True,
         whole: bool = False) -> bytes:
    """At most the first `size` bytes of a regular file however long it is: one read,
    which is the whole of a sysfs attribute or a one-record procfs file (stat, status,
    fdinfo), and the start of a longer one. `stat_first=False`: opened (non-blocking)
    before it is checked, one system call less, for the hundreds of sysfs attributes a
    scrape reads: a sysfs has no device node, and one put in a fake tree is opened but
    never read. `whole`: the file is meant to fit (a sysfs value): one whose size says
    otherwise (a sparse 1 GB file) is refused, not read in part."""
    if stat_first:
        _check(path, os.stat(path), None)
    fd = os.open(path, _FLAGS)
    try:
        # inline, not _check: this runs for every sysfs value of every scrape
        st = os.fstat(fd)
        if not _S_ISREG(st.st_mode):
            raise Refused(path, f"is {_kind(st.st_mode)}, not a regular file")
        if whole and st.st_size > size:
            raise Refused(path, f"is larger than {size} bytes ({st.st_size})", errno.EFBIG)
        return os.read(fd, size)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], limit: int) -> str:
    """`read_capped` decoded as UTF-8, an invalid byte replaced (file contents are
    bytes; names in them need not be UTF-8)."""
    return read_capped(path, limit).decode("utf-8", "replace")


def open_regular(path: str | os.PathLike[str]) -> int:
    """A descriptor of a regular file (no size cap: an ELF library to map), opened
    without waiting and without opening a device; the caller closes it."""
    return _open(path, None)


class HeldFile:
    """A sysfs attribute read every scrape through one descriptor: opened (and checked,
    as `head` checks) at its first read, then read from offset 0 with one `pread` each
    time. A sysfs attribute hands out its value afresh at offset 0 (kernfs files are
    seq_files, and seq_read_iter restarts its iterator there: fs/seq_file.c), so this
    reads what open/read/close would, in one system call instead of three (four with
    the check). A read that fails (ENODEV: the driver unloaded, the device gone) closes
    the descriptor and raises; the next read opens the path again. The caller closes it
    when it stops reading (a finalizer closes one it forgot)."""

    __slots__ = ("_fd", "path", "size")

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self._fd: int | None = None

    def read(self) -> bytes:
        """At most `size` bytes from the start of the file; OSError when it cannot be
        opened or read, `Refused` when it is not a regular file or longer than `size`."""
        fd = self._fd
        if fd is None:
            fd = os.open(self.path, _FLAGS)
            try:
                st = os.fstat(fd)
                if not _S_ISREG(st.st_mode):
                    raise Refused(self.path, f"is {_kind(st.st_mode)}, not a regular file")
                if st.st_size > self.size:
                    raise Refused(self.path, f"is larger than {self.size} bytes "
                                             f"({st.st_size})", errno.EFBIG)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        try:
            return os.pread(fd, self.size, 0)
        except BaseException:
            self.close()
            raise

    # bound here: a finalizer run while the interpreter exits may find `os` torn down
    _close = staticmethod(os.close)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self._close(fd)

    def __del__(self) -> None:
        self.close()
