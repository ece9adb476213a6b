"""Scenarios for the fake NVML library, and building it with the system C compiler.

A scenario is written as the line-based file `fake_nvml.c` parses (see README.md); the
library re-reads it when it changes, so `Scenario.write()` after a change is all a test
needs to lose a GPU, hang a call or load the driver while the exporter runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
SONAME = "libnvidia-ml.so.1"
ENV_VAR = "FAKE_NVML_SCENARIO"

# NVML clock event reason bits (nvml.h nvmlClocksEventReason*)
REASON_GPU_IDLE = 0x1
REASON_APPLICATIONS_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SYNC_BOOST = 0x10
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80
REASON_DISPLAY_CLOCK = 0x100

GIB = 1024**3
MIB = 1024**2

# NVML GPM metric ids (nvml.h nvmlGpmMetricId_t): what `Device.gpm` is keyed by.
GPM_GRAPHICS_UTIL = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_INTEGER_UTIL = 4
GPM_ANY_TENSOR_UTIL = 5
GPM_DFMA_TENSOR_UTIL = 6
GPM_HMMA_TENSOR_UTIL = 7
GPM_DMMA_TENSOR_UTIL = 8
GPM_IMMA_TENSOR_UTIL = 9
GPM_DRAM_BW_UTIL = 10
GPM_FP64_UTIL = 11
GPM_FP32_UTIL = 12
GPM_FP16_UTIL = 13
# What the fake answers nvmlGpm*: hide these (fake.build(omit=GPM_FUNCTIONS)) for a
# driver older than GPM.
GPM_FUNCTIONS = (
    "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet",
    "nvmlGpmMetricsGet", "nvmlGpmQueryDeviceSupport",
)


@dataclass
class Mig:
    """A MIG device of a parent GPU (`mig <parent> <slot>` section)."""

    slot: int
    uuid: str
    name: str  # what NVML names a MIG device: "<parent name> MIG <profile>"
    gpu_instance_id: int
    compute_instance_id: int
    values: dict[str, int | str] = field(default_factory=dict)  # e.g. memory_total
    lines: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class NvLink:
    """One NVLink of a GPU (`nvlink` line): its NVML state and cumulative counters, summed
    by the library into the all-links fields."""

    state: str = "active"  # active | inactive | sleep | active_traffic_disabled
    tx_kib: int = 0
    rx_kib: int = 0
    crc_flit: int = 0
    crc_data: int = 0
    replay: int = 0
    recovery: int = 0
    ecc_data: int = 0

    def line(self) -> str:
        return (f"nvlink {self.state} {self.tx_kib} {self.rx_kib} {self.crc_flit} "
                f"{self.crc_data} {self.replay} {self.recovery} {self.ecc_data}")


@dataclass
class Device:
    """One GPU. `values` holds the raw NVML numbers (units as NVML gives them: mW, mJ,
    MHz, percent); a key left out makes that NVML call answer NOT_SUPPORTED."""

    name: str
    uuid: str
    pci_bus_id: str  # as NVML writes it: 00000000:3B:00.0
    serial: str | None = None
    vbios: str | None = None
    values: dict[str, int | str] = field(default_factory=dict)
    fans: list[int] = field(default_factory=list)  # percent per fan
    lost: bool = False
    errors: dict[str, str] = field(default_factory=dict)  # function or "*" -> CODE
    hangs: dict[str, float] = field(default_factory=dict)  # function or "*" -> seconds
    field_errors: dict[int, str] = field(default_factory=dict)  # field id -> CODE
    xids: list[int] = field(default_factory=list)  # XID events, each delivered once
    # (kind "compute"|"graphics", pid, used bytes or None, gpu instance, compute instance)
    processes: list[tuple[str, int, int | None, int | None, int | None]] = field(
        default_factory=list
    )
    # (pid, timestamp µs, sm %, mem %, enc %, dec %)
    process_utilization: list[tuple[int, int, int, int, int, int]] = field(
        default_factory=list
    )
    migs: list[Mig] = field(default_factory=list)
    nvlinks: list[NvLink] = field(default_factory=list)  # none: a GPU without NVLink
    # GPM (values["gpm_supported"] = 1 turns it on): percent by metric id, for the whole
    # GPU and per MIG GPU instance id; a float or "nan"; a metric left out answers
    # NOT_SUPPORTED in its own entry, an entry of gpm_errors answers that CODE.
    gpm: dict[int, float | str] = field(default_factory=dict)
    gpm_errors: dict[int, str] = field(default_factory=dict)
    gpu_instance_gpm: dict[int, dict[int, float | str]] = field(default_factory=dict)
    gpu_instance_gpm_errors: dict[tuple[int, int], str] = field(default_factory=dict)


@dataclass
class Scenario:
    devices: list[Device] = field(default_factory=list)
    driver_version: str | None = "550.54.15"
    nvml_version: str | None = "12.550.54.15"
    cuda_driver_version: int | None = 12040
    init_error: str | None = None  # e.g. DRIVER_NOT_LOADED, NO_PERMISSION
    call_delay_us: int = 0
    gpm_version: int | None = None  # GPM struct version the driver expects (default 1)
    gpm_metric_max: int | None = None  # highest GPM metric id + 1 it knows (default 333)
    path: Path | None = None

    def render(self) -> str:
        out: list[str] = ["# fake NVML scenario (tests/fake_nvml/README.md)"]
        for key, val in (
            ("driver_version", self.driver_version),
            ("nvml_version", self.nvml_version),
            ("cuda_driver_version", self.cuda_driver_version),
            ("init_error", self.init_error),
            ("call_delay_us", self.call_delay_us or None),
            ("gpm_version", self.gpm_version),
            ("gpm_metric_max", self.gpm_metric_max),
        ):
            if val is not None:
                out.append(f"{key} {val}")
        for i, d in enumerate(self.devices):
            out.append(f"device {i}")
            out.extend(_device_lines(d))
            for m in d.migs:
                out.append(f"mig {i} {m.slot}")
                out.append(f"  uuid {m.uuid}")
                out.append(f"  name {m.name}")
                out.append(f"  gpu_instance_id {m.gpu_instance_id}")
                out.append(f"  compute_instance_id {m.compute_instance_id}")
                out.extend(f"  {k} {v}" for k, v in m.values.items())
                out.extend(f"  {k} {v}" for k, v in m.lines)
        return "\n".join(out) + "\n"

    def lose(self, index: int, lost: bool = True) -> Path:
        """GPU `index` answers GPU_IS_LOST to everything (or comes back); written at once."""
        self.devices[index].lost = lost
        return self.write()

    def hang(self, index: int, function: str, seconds: float | None) -> Path:
        """`function` ("*" for all) sleeps `seconds` on GPU `index` (None: no more)."""
        if seconds is None:
            self.devices[index].hangs.pop(function, None)
        else:
            self.devices[index].hangs[function] = seconds
        return self.write()

    def write(self, path: Path | None = None) -> Path:
        """Write atomically (a new inode each time, so the library notices at once)."""
        target = path or self.path
        if target is None:
            raise ValueError("first write() needs a path")
        target = Path(target)
        self.path = target
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(self.render())
        os.replace(tmp, target)
        return target


def _device_lines(d: Device) -> Iterable[str]:
    yield f"  name {d.name}"
    yield f"  uuid {d.uuid}"
    yield f"  pci_bus_id {d.pci_bus_id}"
    if d.serial is not None:
        yield f"  serial {d.serial}"
    if d.vbios is not None:
        yield f"  vbios {d.vbios}"
    for k, v in d.values.items():
        yield f"  {k} {v}"
    for pct in d.fans:
        yield f"  fan {pct}"
    if d.lost:
        yield "  lost 1"
    for fn, code in d.errors.items():
        yield f"  error {fn} {code}"
    for fn, seconds in d.hangs.items():
        yield f"  hang {fn} {seconds}"
    for fid, code in d.field_errors.items():
        yield f"  field_error {fid} {code}"
    for xid in d.xids:
        yield f"  xid {xid}"
    for kind, pid, used, gi, ci in d.processes:
        extra = f" {gi} {ci}" if gi is not None and ci is not None else ""
        yield f"  process {kind} {pid} {'-' if used is None else used}{extra}"
    for pid, ts, sm, mem, enc, dec in d.process_utilization:
        yield f"  process_util {pid} {ts} {sm} {mem} {enc} {dec}"
    for link in d.nvlinks:
        yield f"  {link.line()}"
    for mid, pct in d.gpm.items():
        yield f"  gpm {mid} {pct}"
    for mid, code in d.gpm_errors.items():
        yield f"  gpm_error {mid} {code}"
    for gi, metrics in d.gpu_instance_gpm.items():
        for mid, pct in metrics.items():
            yield f"  gpm_gi {gi} {mid} {pct}"
    for (gi, mid), code in d.gpu_instance_gpm_errors.items():
        yield f"  gpm_gi_error {gi} {mid} {code}"


# ---- ready-made scenarios ---------------------------------------------------------------
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_BUS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


H100_NVLINKS = 18  # NVLink 4 on H100 SXM


def h100(i: int) -> Device:
    """An H100 SXM with every value NVML gives, distinct per GPU so that a mix-up shows:
    PCIe Gen5 x16, 18 active NVLinks (link l of GPU i moved (i+1)·10⁶ + l KiB each way,
    GPU i's link 3 counts i replays)."""
    return Device(
        name=H100_NAME,
        uuid=f"GPU-{i:08x}-1111-2222-3333-4444555566{i:02d}",
        pci_bus_id=f"00000000:{H100_BUS[i % 8].upper()}:00.0",
        serial=f"165232300{i:04d}",
        vbios="96.00.89.00.01",
        values={
            "board_part_number": "692-2G520-0200-000",
            "util_gpu": 80 + i,  # %
            "util_memory": 40 + i,  # % (memory controller)
            "util_encoder": 0,
            "util_decoder": 5 + i,
            "memory_total": 80 * GIB,  # 85899345920 bytes
            "memory_reserved": 512 * MIB,
            "memory_used": (40 + i) * GIB,
            "power_usage_mw": 512_345 + i * 1000,
            "power_limit_mw": 700_000,
            "energy_mj": 123_456_789 + i,
            "temp_gpu": 50 + i,
            "temp_memory": 60 + i,
            "clock_graphics_mhz": 1980,
            "clock_sm_mhz": 1980,
            "clock_memory_mhz": 2619,
            "clock_video_mhz": 1545,
            "ecc_mode": 1,
            "ecc_corrected": i,
            "ecc_uncorrected": 0,
            "retired_pages_pending": 0,
            "remapped_rows_corrected": i,
            "remapped_rows_uncorrected": 0,
            "remapped_rows_pending": 0,
            "remapped_rows_failure": 0,
            "recovery_action": 0,  # NVML_GPU_RECOVERY_ACTION_NONE
            "pcie_replay": 2 * i,
            "pcie_tx_bytes": 1_000_000_000 + i,
            "pcie_rx_bytes": 2_000_000_000 + i,
            "clocks_event_reasons": REASON_SW_POWER_CAP if i == 1 else 0,
            "mig_mode": 0,
            "pcie_gen_current": 5,
            "pcie_gen_max": 5,
            "pcie_gen_gpu_max": 5,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
            "pcie_correctable_errors": i,
            "pcie_nonfatal_errors": 0,
            "pcie_fatal_errors": 0,
            "gpm_supported": 1,
        },
        nvlinks=[NvLink("active", (i + 1) * 10**6 + link, 2 * (i + 1) * 10**6 + link,
                        replay=i if link == 3 else 0)
                 for link in range(H100_NVLINKS)],
        gpm=h100_gpm(i),
    )


def gb200_tray() -> Scenario:
    """A GB200 compute tray: two superchip modules, each one Grace and two Blackwell
    GPUs. Every GPU gives its module's id (nvmlDeviceGetPlatformInfo) and the module's
    power (NVML's module scope): 1900 W for module 0, 2100 W for module 1, the same on
    both GPUs of a module."""
    devices = []
    for i in range(4):
        d = h100(i)
        d.name = "NVIDIA GB200"
        module = i // 2
        d.values["module_id"] = module
        d.values["module_power_mw"] = 1_900_000 + module * 200_000
        devices.append(d)
    return Scenario(devices=devices)


def h100_gpm(i: int) -> dict[int, float | str]:
    """GPM percentages of a busy H100 (a half-precision training step), distinct per GPU."""
    return {
        GPM_GRAPHICS_UTIL: 85 + i, GPM_SM_UTIL: 60 + i, GPM_SM_OCCUPANCY: 30 + i,
        GPM_INTEGER_UTIL: 10 + i, GPM_ANY_TENSOR_UTIL: 40 + i, GPM_DFMA_TENSOR_UTIL: 0,
        GPM_HMMA_TENSOR_UTIL: 35 + i, GPM_DMMA_TENSOR_UTIL: 0.5, GPM_IMMA_TENSOR_UTIL: 4.25,
        GPM_DRAM_BW_UTIL: 50 + i, GPM_FP64_UTIL: 2, GPM_FP32_UTIL: 20 + i, GPM_FP16_UTIL: 5,
    }


def h100x8() -> Scenario:
    devices = [h100(i) for i in range(8)]
    # GPU 2 is hot and throttled by hardware (degraded); GPU 3 has an uncorrected error.
    devices[2].values["clocks_event_reasons"] = REASON_HW_THERMAL | REASON_SW_THERMAL
    devices[3].values["ecc_uncorrected"] = 1
    return Scenario(devices=devices)


def rtx4080() -> Scenario:
    """A GeForce card as NVML reports it: two fans, but no ECC, no serial number, no
    energy counter, no memory temperature, no PCIe byte counters and no MIG."""
    d = Device(
        name="NVIDIA GeForce RTX 4080",
        uuid="GPU-4080aaaa-bbbb-cccc-dddd-eeeeffff0000",
        pci_bus_id="00000000:01:00.0",
        serial=None,  # consumer boards answer NOT_SUPPORTED
        vbios="95.03.1E.00.8C",
        values={
            "util_gpu": 12,
            "util_memory": 7,
            "util_encoder": 30,
            "util_decoder": 0,
            "memory_total": 16 * GIB,
            "memory_reserved": 300 * MIB,
            "memory_used": 2 * GIB,
            "power_usage_mw": 35_120,
            "power_limit_mw": 320_000,
            "temp_gpu": 41,
            "clock_graphics_mhz": 210,
            "clock_sm_mhz": 210,
            "clock_memory_mhz": 405,
            "clock_video_mhz": 765,
            "pcie_replay": 0,
            "clocks_event_reasons": REASON_GPU_IDLE,
            # idle: Gen2 of a Gen4 x16 link (the sysfs capture of this card says 5.0 GT/s)
            "pcie_gen_current": 2,
            "pcie_gen_max": 4,
            "pcie_gen_gpu_max": 4,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
        },
        fans=[30, 32],
    )
    return Scenario(devices=[d])


def mig_a100() -> Scenario:
    """An A100 40GB with MIG on: one 3g.20gb and two 1g.5gb instances, each a device of
    its own."""
    name = "NVIDIA A100-SXM4-40GB"
    parent = Device(
        name=name,
        uuid="GPU-a100a100-0000-1111-2222-333344445555",
        pci_bus_id="00000000:07:00.0",
        serial="1324720005678",
        vbios="92.00.45.00.03",
        values={
            "board_part_number": "692-2G506-0200-002",
            "memory_total": 40 * GIB,
            "memory_reserved": 400 * MIB,
            "memory_used": 12 * GIB,
            "power_usage_mw": 250_000,
            "power_limit_mw": 400_000,
            "energy_mj": 987_654_321,
            "temp_gpu": 45,
            "temp_memory": 52,
            "clock_graphics_mhz": 1410,
            "clock_sm_mhz": 1410,
            "clock_memory_mhz": 1215,
            "clock_video_mhz": 1275,
            "ecc_mode": 1,
            "ecc_corrected": 0,
            "ecc_uncorrected": 0,
            "pcie_replay": 0,
            "clocks_event_reasons": 0,
            "mig_mode": 1,
            "pcie_gen_current": 4,
            "pcie_gen_max": 4,
            "pcie_gen_gpu_max": 4,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
        },
        nvlinks=[NvLink("active", 5000 + link, 6000 + link) for link in range(12)],
        # NVML_FI_DEV_POWER_AVERAGE exists on Ampere except GA100 and newer: not here
        # (nvmlDeviceGetPowerUsage answers the instant power instead).
        field_errors={185: "NOT_SUPPORTED"},
    )
    profiles = [("3g.20gb", 1, 20), ("1g.5gb", 5, 5), ("1g.5gb", 6, 5)]
    for slot, (profile, gi, gib) in enumerate(profiles):
        parent.migs.append(Mig(
            slot=slot,
            uuid=f"MIG-{slot:08x}-aaaa-bbbb-cccc-ddddeeeeff{slot:02d}",
            name=f"{name} MIG {profile}",
            gpu_instance_id=gi,
            compute_instance_id=0,
            values={"memory_total": gib * GIB, "memory_used": (slot + 1) * GIB},
        ))
    return Scenario(devices=[parent])


def mig_h100() -> Scenario:
    """An H100 with MIG on and GPM: GPU instance 1 (3g.40gb) with one compute instance,
    GPU instance 2 (2g.20gb) split into two compute instances (1c.2g.20gb each), and GPU
    instance 5 with no compute instance at all (so no MIG device)."""
    parent = h100(0)
    parent.uuid = "GPU-h100a100-0000-1111-2222-333344445555"
    parent.values["mig_mode"] = 1
    for key in ("util_gpu", "util_memory", "util_encoder", "util_decoder"):
        del parent.values[key]  # NVML reports no utilization for a GPU in MIG mode
    parent.gpu_instance_gpm = {
        1: {GPM_GRAPHICS_UTIL: 70, GPM_SM_UTIL: 55, GPM_ANY_TENSOR_UTIL: 25,
            GPM_DRAM_BW_UTIL: 33},
        2: {GPM_GRAPHICS_UTIL: 90, GPM_SM_UTIL: 80, GPM_ANY_TENSOR_UTIL: 60,
            GPM_DRAM_BW_UTIL: 45},
        5: {GPM_GRAPHICS_UTIL: 10, GPM_SM_UTIL: 5},
    }
    for slot, (profile, gi, ci) in enumerate(
            [("3g.40gb", 1, 0), ("1c.2g.20gb", 2, 0), ("1c.2g.20gb", 2, 1)]):
        parent.migs.append(Mig(
            slot=slot,
            uuid=f"MIG-{slot:08x}-9999-bbbb-cccc-ddddeeeeff{slot:02d}",
            name=f"{H100_NAME} MIG {profile}",
            gpu_instance_id=gi,
            compute_instance_id=ci,
            values={"memory_total": 40 * GIB if gi == 1 else 20 * GIB,
                    "memory_used": (slot + 1) * GIB},
        ))
    return Scenario(devices=[parent])


# ---- building the library ---------------------------------------------------------------
DEFAULT_BUILD_DIR = HERE / "build"  # git-ignored (tests/**/build/)


def build(out_dir: Path | None = None, omit: Iterable[str] = ()) -> Path:
    """Compile the fake into `out_dir/<variant>/libnvidia-ml.so.1` and return that
    directory (for LD_LIBRARY_PATH). `omit` hides functions, as an older driver lacks
    them. The variant directory is named by a hash of the source and `omit`, so a
    changed source is rebuilt and an unchanged one is not."""
    out_dir = DEFAULT_BUILD_DIR if out_dir is None else out_dir
    cc = shutil.which(os.environ.get("CC", "cc"))
    assert cc, "no C compiler: install gcc (scripts/apt-packages.txt)"
    omitted = sorted(omit)
    tag = hashlib.sha1((SOURCE.read_text() + ",".join(omitted)).encode()).hexdigest()[:12]
    lib_dir = Path(out_dir) / tag
    lib = lib_dir / SONAME
    if lib.exists():
        return lib_dir
    lib_dir.mkdir(parents=True, exist_ok=True)
    part = lib_dir / f"{SONAME}.{os.getpid()}.part"  # parallel builders don't collide
    args = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
            f"-Wl,-soname,{SONAME}", "-o", str(part), str(SOURCE), "-lpthread"]
    if omitted:
        script = lib_dir / f"hide.{os.getpid()}.map"
        script.write_text("{ global: *; local: " + " ".join(f"{n};" for n in omitted) + " };\n")
        args.append(f"-Wl,--version-script={script}")
    res = subprocess.run(args, capture_output=True, text=True)
    assert res.returncode == 0, f"building the fake NVML failed:\n{res.stderr}"
    os.replace(part, lib)
    return lib_dir


_loaded: Path | None = None


def load_in_process(scenario_path: Path) -> Path:
    """Make this process's pynvml use the fake (benchmarks, reader tests): load it by
    path first (dlopen then finds it by its soname, libnvidia-ml.so.1, when pynvml asks
    for that name)."""
    global _loaded
    os.environ[ENV_VAR] = str(scenario_path)
    if _loaded is None:
        lib_dir = build()
        ctypes.CDLL(str(lib_dir / SONAME), mode=ctypes.RTLD_GLOBAL)
        _loaded = lib_dir
    return _loaded


def env(lib_dir: Path | None, scenario_path: Path | None) -> Mapping[str, str]:
    """Environment for an exporter process that should load the fake. lib_dir None:
    the library is absent (on a host without a real driver in the default search path)."""
    out = {"LD_LIBRARY_PATH": str(lib_dir) if lib_dir is not None else "/nonexistent/nvml"}
    if scenario_path is not None:
        out[ENV_VAR] = str(scenario_path)
    return out
