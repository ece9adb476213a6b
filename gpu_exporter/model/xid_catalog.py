"""NVIDIA's Xid Catalog as data: what each XID code asks of whoever runs the GPU.

`xid_catalog.csv` beside this module is the catalog's "Xids" sheet ("Analyzing Xid
Errors with the Xid Catalog", NVIDIA's deployment docs; source and date in its header).
The exporter labels each XID count with the code's immediate-action resolution bucket,
lower-cased (`restart_app`, `reset_gpu`, `restart_bm`, `workflow_xid_48`, ...), so that
alerts select by action and never list codes by hand. A code the table lacks, or for
which the catalog publishes no bucket, is `unknown`.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

UNKNOWN = "unknown"
GPUS = ("a100", "h100", "b100", "gb200")


@dataclass(frozen=True)
class XidEntry:
    xid: int
    mnemonic: str
    description: str
    applies_to: frozenset[str]  # of GPUS
    immediate: str  # the catalog's bucket as written ("RESTART_APP"); "" if none
    investigatory: str
    xid154_linkage: str

    @property
    def action(self) -> str:
        """The `action` label: the immediate bucket lower-cased, or "unknown"."""
        return self.immediate.lower() if self.immediate else UNKNOWN


def parse(lines: list[str]) -> dict[int, XidEntry]:
    """The table's rows by code; raises ValueError on a malformed row."""
    reader = csv.DictReader(line for line in lines if not line.startswith("#"))
    table: dict[int, XidEntry] = {}
    for row in reader:
        try:
            code = int(row["xid"])
            applies = frozenset(g for g in GPUS if row[g] == "YES")
            if any(row[g] not in ("YES", "NO") for g in GPUS):
                raise ValueError(f"applies-to columns must be YES or NO: {row}")
            immediate = row["immediate"].strip()
            if immediate and not immediate.replace("_", "").isalnum():
                raise ValueError(f"not a resolution bucket: {immediate!r}")
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed Xid catalog row {row}: {exc}") from None
        if code in table:
            raise ValueError(f"XID {code} twice in the catalog")
        table[code] = XidEntry(code, row["mnemonic"], row["description"], applies, immediate,
                               row["investigatory"], row["xid154_linkage"])
    return table


@cache
def table() -> Mapping[int, XidEntry]:
    text = resources.files(__package__).joinpath("xid_catalog.csv").read_text(encoding="utf-8")
    return parse(text.splitlines())


def action(xid: int) -> str:
    """What the catalog says to do first after XID `xid`; "unknown" when it does not say."""
    entry = table().get(xid)
    return entry.action if entry is not None else UNKNOWN
