"""Safe small reads of sysfs and procfs files, and listings of their (numbered) entries.

One open and one read per file (a sysfs attribute, a /proc seq file hands out its whole
value in the first read) through `readers.files` (regular files only, never waiting, at
most a cap), NUL padding and surrounding white space stripped. A file that is missing,
is not a regular file (a FIFO, a device, a folder: never read, logged once with the
reason, a problem where the caller collects them), or cannot be read (permission,
EIO/ENODEV from a card that is going away, EOPNOTSUPP) is *absent*: None. Text that is
present but does not parse is absent too, and is recorded in `Problems` so that the
collector reports it (logged once, collector_success 0).

Paths may be `str` (what the readers keep for the files they read every scrape: joining
strings costs a fraction of building Path objects) or Path.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Generic, TypeVar

from gpu_exporter.model.logs import log_once
from gpu_exporter.model.records import GpuReading
from gpu_exporter.readers import files

# sysfs attributes are at most one page; gpu_metrics blobs are a few hundred bytes.
MAX_READ_BYTES = 8192

_DIGITS = {10: re.compile(r"[0-9]+"), 16: re.compile(r"(?:0[xX])?[0-9a-fA-F]+")}
# A value is at most 2^64 (20 decimal digits, 16 hex digits after "0x"): a longer one is
# out of range before it is converted. int() of 5,000 digits raised ValueError (Python's
# 4,300-digit limit), which took the whole power collector down; no digit count costs
# more than the check of its length.
_MAX_LENGTH = {10: 20, 16: 18}
log = logging.getLogger("gpu_exporter.readers")
L = TypeVar("L")
_VALUE_FIELDS = tuple(f.name for f in fields(GpuReading)
                      if f.name not in ("identity", "up", "state"))


@dataclass(frozen=True)
class Unreadable:
    """Why a whole source cannot be read (a missing mount, a privilege), and what the
    operator can do about it: a collector turns it into a feature state."""

    reason: str
    fix: str


@dataclass
class Problems:
    """Garbage found while reading: (key, message) pairs for `sink.fail`."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, path: Path | str, message: str) -> None:
        self.items.append((str(path), f"{path}: {message}"))


def read_bytes(path: Path | str, limit: int = MAX_READ_BYTES,
               problems: Problems | None = None) -> bytes | None:
    """The raw content of a file (one read, at most `limit` bytes: `readers.files.head`),
    or None when absent/unreadable/refused (a FIFO, a device, a folder, a file whose size
    is over `limit` is never read: it is added to `problems` when given, else logged
    once)."""
    try:
        return files.head(path, limit, stat_first=False, whole=True)
    except files.Refused as exc:
        if problems is not None:  # the collector reports it (a failure, logged once)
            problems.add(path, f"not read: {exc.strerror}")
        else:
            log_once(log, f"refused:{path}", logging.WARNING, "not read: %s", exc)
        return None
    except OSError:
        return None


def read_value(path: Path | str, problems: Problems | None = None) -> bytes | None:
    """The value's bytes: up to the first NUL, ASCII white space stripped (what the
    kernel pads with; other control bytes are content, garbage to parse); None when
    absent, unreadable or empty."""
    raw = read_bytes(path, problems=problems)
    if raw is None:
        return None
    return raw.split(b"\0", 1)[0].strip() or None


def read_text(path: Path | str) -> str | None:
    """The value as text (see read_value); None when absent, unreadable or empty."""
    value = read_value(path)
    return None if value is None else value.decode("utf-8", "replace")


def read_int(path: Path | str, problems: Problems, *, base: int = 10,
             maximum: int = 1 << 64) -> int | None:
    """A non-negative integer no greater than `maximum`; anything else present in the
    file is garbage: None plus a problem."""
    value = read_value(path, problems)
    if value is None:
        return None
    # bytes.isdigit() is ASCII digits only: the common case needs no regular expression.
    if base == 10 and value.isdigit() and len(value) <= _MAX_LENGTH[10]:
        number = int(value)
        if number <= maximum:
            return number
    return parse_int(value.decode("utf-8", "replace"), path, problems, base=base,
                     maximum=maximum)


def read_held_int(held: files.HeldFile, problems: Problems, *, maximum: int = 1 << 64
                  ) -> int | None:
    """`read_int` of a value read every scrape through its held descriptor
    (`files.HeldFile`): the same answers, absent or garbage alike."""
    try:
        raw = held.read()
    except files.Refused as exc:
        problems.add(held.path, f"not read: {exc.strerror}")
        return None
    except OSError:
        return None
    value = raw.split(b"\0", 1)[0].strip()
    if not value:
        return None
    if value.isdigit() and len(value) <= _MAX_LENGTH[10]:
        number = int(value)
        if number <= maximum:
            return number
    return parse_int(value.decode("utf-8", "replace"), held.path, problems,
                     maximum=maximum)


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
    if len(text) > _MAX_LENGTH[base]:
        problems.add(where, f"value of {len(text)} digits is out of range (over {maximum})")
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


def listing(folder: Path | str) -> frozenset[str]:
    """The names in a folder; empty when it cannot be listed (absent, not a folder, no
    permission)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def numbered(names: Iterable[str], prefix: str, suffix: str = "") -> list[int]:
    """The N of every `<prefix>N<suffix>` among `names` (a `listing`), sorted:
    temp1_input ..., hwmon0 ..., tile0 ..."""
    pattern = re.compile(re.escape(prefix) + r"([0-9]+)" + re.escape(suffix))
    out = []
    for name in names:
        m = pattern.fullmatch(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def has_values(reading: GpuReading) -> bool:
    """Whether a reading holds any value: a card none of whose files could be read (its
    driver answers with errors, its files are gone) did not answer."""
    for name in _VALUE_FIELDS:
        value = getattr(reading, name)
        if value is not None and value != {}:
            return True
    return False


class Layouts(Generic[L]):
    """What each card has (which files, which hwmon channels), listed once per card and
    kept, so that a scrape opens only the value files: rebuilt after `relist_seconds`
    (files that appear later, a driver reloaded in between) and after `forget` (a read
    that found the card down)."""

    def __init__(self, relist_seconds: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.relist_seconds = relist_seconds
        self._clock = clock
        self._kept: dict[str, tuple[float, L]] = {}

    def get(self, key: str, build: Callable[[], L]) -> L:
        now = self._clock()
        kept = self._kept.get(key)
        if kept is None or now - kept[0] >= self.relist_seconds:
            kept = self._kept[key] = (now, build())
        return kept[1]

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)

    def keep_only(self, keys: Iterable[str]) -> None:
        """Drop the layouts of cards no longer read (unplugged, out of their grace)."""
        wanted = set(keys)
        for key in [k for k in self._kept if k not in wanted]:
            del self._kept[key]
