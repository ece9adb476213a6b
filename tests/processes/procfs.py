"""Writes fake /proc trees: the lowest layer under the process readers (plain files)."""

from __future__ import annotations

from pathlib import Path


def write_process(
    procfs: Path, pid: int, *, comm: str, cgroup: str = "0::/\n", start: int = 1000,
    fdinfo: dict[int, str] | None = None,
) -> None:
    """One process as the kernel shows it: stat (with comm in parentheses, field 22 the
    start time), comm, cgroup, and optionally open DRM files (fd -> fdinfo text)."""
    d = procfs / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    # Fields 3..21, then starttime (22), then a few more, as in a real stat line.
    middle = " ".join(["S"] + ["0"] * 18)
    (d / "stat").write_text(f"{pid} ({comm}) {middle} {start} 0 0 0\n")
    (d / "comm").write_text(comm + "\n")
    (d / "cgroup").write_text(cgroup)
    if fdinfo is not None:
        (d / "fdinfo").mkdir(exist_ok=True)
        (d / "fd").mkdir(exist_ok=True)
        for fd, text in fdinfo.items():
            (d / "fdinfo" / str(fd)).write_text(text)
            link = d / "fd" / str(fd)
            if not link.is_symlink():  # what the kernel shows for an open render node
                link.symlink_to("/dev/dri/renderD128")


def remove_process(procfs: Path, pid: int) -> None:
    d = procfs / str(pid)
    for p in sorted(d.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    d.rmdir()
