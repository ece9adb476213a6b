"""Scenarios for the fake HLML library (`fake_hlml.c`), and building it with the system C
compiler. A scenario is the line-based file the library parses (README.md); the library
re-reads it when it changes, so `Scenario.write()` after a change is all a test needs to
lose a device or hang a call while the exporter runs."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_hlml.c"
LIBRARY = "libhlml.so"
ENV_VAR = "FAKE_HLML_SCENARIO"
DEFAULT_BUILD_DIR = HERE / "build"  # git-ignored (tests/**/build/)
GIB = 1024**3

# HLML enums (pyhlml hlml_types): temperature sensors, clocks, ECC, row causes.
TEMP_AIP, TEMP_BOARD, TEMP_OTHER, TEMP_HBM, TEMP_VRM, TEMP_CTEMP = range(6)
CLOCK_SOC = 0
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1
ECC_VOLATILE, ECC_AGGREGATE = 0, 1
THROTTLE_POWER, THROTTLE_THERMAL = 0x1, 0x2


@dataclass
class Nic:
    """One port of the card's NICs: link up or down, and its counters by HLML's name."""

    port: int
    up: bool = True
    external: bool = False
    counters: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        parts = [f"nic {self.port} {int(self.up)}"]
        if self.external:
            parts.append("external=1")
        parts.extend(f"{k}={v}" for k, v in self.counters.items())
        return " ".join(parts)


@dataclass
class Device:
    """One Gaudi. `values` holds HLML's raw numbers (mW, mJ, MHz, %, bytes; keys as in
    README.md); a key left out makes its function answer NOT_SUPPORTED. `listed=False`:
    HLML does not list the device (a Gaudi on the bus the library does not answer for)."""

    name: str
    uuid: str
    pci_bus_id: str  # 0000:b3:00.0
    serial: str | None = None
    values: dict[str, int] = field(default_factory=dict)
    nics: list[Nic] = field(default_factory=list)
    listed: bool = True
    lost: bool = False
    errors: dict[str, str] = field(default_factory=dict)  # function or "*" -> CODE
    hangs: dict[str, float] = field(default_factory=dict)  # function or "*" -> seconds


@dataclass
class Scenario:
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = "1.21.1-a7d8b71"
    hlml_version: str | None = "1.21.1"
    init_error: str | None = None
    path: Path | None = None

    def render(self) -> str:
        out = ["# fake HLML scenario (tests/fake_hlml/README.md)"]
        for key, val in (("driver_version", self.driver_version),
                         ("hlml_version", self.hlml_version), ("init_error", self.init_error)):
            if val is not None:
                out.append(f"{key} {val}")
        for i, d in enumerate(self.devices):
            out.append(f"device {i}")
            out.extend(f"  {line}" for line in _device_lines(d))
        return "\n".join(out) + "\n"

    def write(self, path: Path | None = None) -> Path:
        """Write atomically (a new inode each time, so the library notices at once)."""
        target = Path(path or self.path or "")
        if not str(target):
            raise ValueError("first write() needs a path")
        self.path = target
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(self.render())
        os.replace(tmp, target)
        return target

    def hang(self, index: int, function: str, seconds: float | None) -> Path:
        """`function` ("*" for all) sleeps `seconds` on device `index` (None: no more)."""
        if seconds is None:
            self.devices[index].hangs.pop(function, None)
        else:
            self.devices[index].hangs[function] = seconds
        return self.write()


def _device_lines(d: Device) -> Iterable[str]:
    if d.listed:
        yield f"uuid {d.uuid}"
    yield f"name {d.name}"
    yield f"pci_bus_id {d.pci_bus_id}"
    if d.serial is not None:
        yield f"serial {d.serial}"
    for k, v in d.values.items():
        yield f"{k} {v}"
    for nic in d.nics:
        yield nic.line()
    if d.lost:
        yield "lost 1"
    for fn, code in d.errors.items():
        yield f"error {fn} {code}"
    for fn, seconds in d.hangs.items():
        yield f"hang {fn} {seconds}"


def gaudi2(index: int, pci_bus_id: str) -> Device:
    """A Gaudi 2 (HL-225) with every value the exporter reads, in HLML's units."""
    return Device(
        name="HL-225", uuid=f"01P0-HL2080A0-15-TNQ7{index:02d}-03-07-0{index}",
        pci_bus_id=pci_bus_id, serial=f"AN5100{index:04d}",
        values={
            "util_aip": 40 + index, "memory_total": 96 * GIB, "memory_used": 12 * GIB + index,
            "power_mw": 350_500 + index, "power_limit_mw": 600_000,
            "power_default_limit_mw": 550_000, "energy_mj": 7_200_000_123 + index,
            f"temp_{TEMP_AIP}": 41 + index, f"temp_{TEMP_BOARD}": 33, f"temp_{TEMP_HBM}": 45,
            f"clock_{CLOCK_SOC}": 1600, f"max_clock_{CLOCK_SOC}": 1800,
            f"ecc_{ECC_CORRECTED}_{ECC_AGGREGATE}": 3, f"ecc_{ECC_UNCORRECTED}_{ECC_AGGREGATE}": 0,
            f"ecc_{ECC_CORRECTED}_{ECC_VOLATILE}": 1, f"ecc_{ECC_UNCORRECTED}_{ECC_VOLATILE}": 0,
            "pcie_replay": 7, "throttle_reasons": 0, "replaced_rows_0": 2,
            "replaced_rows_1": 1, "replaced_rows_pending": 0, "minor": index,
        },
        nics=[Nic(port, up=port != 3, external=port in (1, 8, 22),
                  counters={"rx_crc_errors": port, "tx_dropped_packets": 2 * port})
              for port in range(24)],
    )


def build(out_dir: Path | None = None) -> Path:
    """Compile the fake into `out_dir/<hash>/libhlml.so` and return the library's path
    (for --gaudi.hlml-library). Named by a hash of the source: an unchanged source is
    not rebuilt."""
    out_dir = DEFAULT_BUILD_DIR if out_dir is None else out_dir
    cc = shutil.which(os.environ.get("CC", "cc"))
    assert cc, "no C compiler: install gcc (scripts/apt-packages.txt)"
    tag = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:12]
    lib = Path(out_dir) / tag / LIBRARY
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    part = lib.with_name(f"{LIBRARY}.{os.getpid()}.part")  # parallel builders don't collide
    res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
                          "-o", str(part), str(SOURCE), "-lpthread"],
                         capture_output=True, text=True)
    assert res.returncode == 0, f"building the fake HLML failed:\n{res.stderr}"
    os.replace(part, lib)
    return lib
