"""Safe small reads of sysfs and procfs files, and listings of their numbered entries.

One open and one read per file (a sysfs attribute, a /proc seq file hands out its whole
value in the first read), NUL padding and surrounding white space stripped. A file that
is missing, is not a regular file (a directory fails the read; a FIFO is opened
non-blocking, so it never blocks), or cannot be read (permission, EIO/ENODEV from a card
that is going away, EOPNOTSUPP) is *absent*: None. Text that is present but does not
parse is absent too, and is recorded in `Problems` so that the collector reports it
(logged once, collector_success 0).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# sysfs attributes are at most one page; gpu_metrics blobs are a few hundred bytes.
MAX_READ_BYTES = 8192

_DIGITS = {10: re.compile(r"[0-9]+"), 16: re.compile(r"(?:0[xX])?[0-9a-fA-F]+")}
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass
class Problems:
    """Garbage found while reading: (key, message) pairs for `sink.fail`."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, path: Path | str, message: str) -> None:
        self.items.append((str(path), f"{path}: {message}"))


def read_bytes(path: Path | str, limit: int = MAX_READ_BYTES) -> bytes | None:
    """The raw content of a file (one read), or None when absent/unreadable. Opened
    non-blocking: a FIFO reads as empty instead of waiting for a writer, a directory
    fails the read."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_text(path: Path | str) -> str | None:
    """The value as text, NUL padding and ASCII white space stripped (what the kernel
    pads with; other control bytes are content, garbage to parse); None when absent,
    unreadable or empty."""
    raw = read_bytes(path)
    if raw is None:
        return None
    text = raw.split(b"\0", 1)[0].strip().decode("utf-8", "replace")
    return text or None


def read_int(path: Path | str, problems: Problems, *, base: int = 10,
             maximum: int = 1 << 64) -> int | None:
    """A non-negative integer no greater than `maximum`; anything else present in the
    file is garbage: None plus a problem."""
    text = read_text(path)
    if text is None:
        return None
    return parse_int(text, path, problems, base=base, maximum=maximum)


def parse_int(text: str, where: Path | str, problems: Problems, *, base: int = 10,
              maximum: int = 1 << 64) -> int | None:
    # int() alone would also take "1_000", "+5", " 5" and non-ASCII digits
    digits = _DIGITS[base]
    if text.startswith("-") and digits.fullmatch(text[1:]):
        problems.add(where, f"negative value {text[:40]}")
        return None
    if not digits.fullmatch(text):
        problems.add(where, f"not an integer: {text[:40]!r}")
        return None
    value = int(text, base)
    if value > maximum:
        problems.add(where, f"value {value} is out of range (over {maximum})")
        return None
    return value


def read_uevent(path: Path | str) -> dict[str, str]:
    """KEY=value lines of a `uevent` file; {} when absent."""
    text = read_text(path)
    out: dict[str, str] = {}
    if text is None:
        return out
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def numbered(folder: Path | str, prefix: str, suffix: str = "") -> list[int]:
    """The N of every `<prefix>N<suffix>` entry of a folder, sorted: temp1_input ...,
    hwmon0 ..., tile0 ...; [] when the folder cannot be listed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    pattern = re.compile(re.escape(prefix) + r"(\d+)" + re.escape(suffix))
    out = []
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)
