"""Checks the exporter on a machine with a real NVIDIA GPU: `bash scripts/check-real-gpu.sh`.

Runs the exporter (NVIDIA collector only) against the machine's NVML and compares what it
reports with what the GPU reports through other means:

- `nvidia-smi --query-gpu` for memory, power limit, temperature, utilization and the
  PCIe link (width and generation, current and maximum);
- `nvidia-smi nvlink -s` for the active NVLink links, where the GPU has links;
- GPM read directly through pynvml (its own samples, not the exporter's reader) over the
  same window as two scrapes of the exporter, idle and while a known matrix multiply
  keeps the GPU busy (FP16, 8192 x 8192, through torch or cupy; without them, FP16
  tensor-core mma.sync tiles in a loop, PTX loaded through the driver's libcuda.so.1): SM,
  tensor (HMMA) and DRAM activity must agree, and be what that load does to a GPU.

Every line says PASS, FAIL or NOT CHECKED (and why: a single GPU has no NVLink, MIG must
not be reconfigured on a lent machine, nothing to run the load with, a family the
exporter does not report). Exit status: 0 when nothing failed, 1 when something did, 2
when there is no NVIDIA GPU to check.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from gpu_exporter.collectors import REGISTRY

REPO = Path(__file__).resolve().parent.parent
# nvidia-smi's PCIe generation -> transfers per second of one lane
GEN_TRANSFERS = {1: 2.5e9, 2: 5e9, 3: 8e9, 4: 16e9, 5: 32e9, 6: 64e9}
# GPM metrics read directly: name -> (binding constant, the exporter's family and labels)
GPM_DIRECT = {
    "SM active": ("NVML_GPM_METRIC_SM_UTIL", "hw_gpu_sm_active_ratio", {}),
    "engine active": ("NVML_GPM_METRIC_GRAPHICS_UTIL", "hw_gpu_engine_active_ratio", {}),
    "tensor active": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "hw_gpu_tensor_active_ratio", {}),
    "HMMA tensor active": ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", "hw_gpu_pipe_active_ratio",
                           {"hw_gpu_pipe": "tensor_hmma"}),
    "DRAM active": ("NVML_GPM_METRIC_DRAM_BW_UTIL", "hw_gpu_dram_active_ratio", {}),
}
# What an FP16 matrix multiply that fills the GPU does to it, at the least.
UNDER_LOAD = {"SM active": 0.5, "tensor active": 0.2, "HMMA tensor active": 0.2}
IDLE_AT_MOST = 0.05
AGREE = 0.1  # exporter and direct GPM over (almost) the same window


@dataclass
class Report:
    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, verdict: str, what: str, detail: str = "") -> None:
        self.lines.append((verdict, what, detail))
        print(f"{verdict:<12} {what}" + (f": {detail}" if detail else ""), flush=True)

    def check(self, ok: bool, what: str, detail: str) -> None:
        self.add("PASS" if ok else "FAIL", what, detail)

    def skip(self, what: str, why: str) -> None:
        self.add("NOT CHECKED", what, why)

    @property
    def failed(self) -> bool:
        return any(v == "FAIL" for v, _, _ in self.lines)


# ---- the exporter ------------------------------------------------------------------------
Sample = tuple[str, dict[str, str], float]


class Exporter:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])

    def scrape(self) -> list[Sample]:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as r:
            text = r.read().decode()
        return [(s.name, dict(s.labels), s.value)
                for fam in text_string_to_metric_families(text) for s in fam.samples]

    @contextmanager
    def running(self) -> Iterator[Exporter]:
        others = [f"--no-collector.{c.name}" for c in REGISTRY if c.name != "nvidia"]
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                [self.binary, f"--web.listen-address=127.0.0.1:{self.port}",
                 "--collector.nvidia", *others], stdout=log, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 60
                while True:
                    if proc.poll() is not None:
                        log.seek(0)
                        raise SystemExit(f"the exporter exited {proc.returncode}:\n"
                                         + log.read().decode(errors="replace"))
                    try:
                        self.scrape()
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
                yield self
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def value(samples: Sequence[Sample], name: str, **labels: str) -> float | None:
    found = [v for n, lab, v in samples
             if n == name and all(lab.get(k) == want for k, want in labels.items())]
    return found[0] if len(found) == 1 else None


def has_family(samples: Sequence[Sample], name: str) -> bool:
    return any(n == name for n, _, _ in samples)


# ---- nvidia-smi ---------------------------------------------------------------------------
SMI_FIELDS = ("uuid", "memory.total", "enforced.power.limit", "temperature.gpu",
              "utilization.gpu", "pcie.link.width.current", "pcie.link.width.max",
              "pcie.link.gen.current", "pcie.link.gen.max")


def smi_query(smi: str) -> dict[str, dict[str, float | None]]:
    """nvidia-smi --query-gpu, by UUID; [N/A] and [Not Supported] are None."""
    res = subprocess.run([smi, f"--query-gpu={','.join(SMI_FIELDS)}",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True)
    out: dict[str, dict[str, float | None]] = {}
    for row in csv.reader(io.StringIO(res.stdout)):
        cells = [c.strip() for c in row]
        if len(cells) != len(SMI_FIELDS):
            continue
        values: dict[str, float | None] = {}
        for name, cell in zip(SMI_FIELDS[1:], cells[1:], strict=True):
            try:
                values[name] = float(cell)
            except ValueError:
                values[name] = None
        out[cells[0]] = values
    return out


def smi_nvlink_active(smi: str, index: int) -> int | None:
    """Active NVLink links by `nvidia-smi nvlink -s`; None when the GPU has none."""
    res = subprocess.run([smi, "nvlink", "-s", "-i", str(index)], capture_output=True,
                         text=True, timeout=60)
    links = re.findall(r"Link \d+: (.*)", res.stdout)
    if not links:
        return None
    return sum(1 for state in links if "inactive" not in state.lower())


def compare_smi(report: Report, smi: str | None, samples: Sequence[Sample],
                gpus: Sequence[tuple[int, str]]) -> None:
    if smi is None:
        report.skip("nvidia-smi comparisons (memory, power limit, temperature, PCIe link, "
                    "NVLink)", "nvidia-smi is not installed")
        return
    table = smi_query(smi)
    for index, uuid in gpus:
        row = table.get(uuid)
        if row is None:
            report.check(False, f"GPU {index}", f"nvidia-smi does not list {uuid}")
            continue
        g = f"GPU {index}"

        def near(what: str, ours: float | None, theirs: float | None, tol: float,
                 g: str = g) -> None:
            if ours is None or theirs is None:
                report.skip(f"{g} {what}", f"exporter {ours}, nvidia-smi {theirs}")
            else:
                report.check(abs(ours - theirs) <= tol, f"{g} {what}",
                             f"exporter {ours:g}, nvidia-smi {theirs:g}")

        limit = value(samples, "hw_gpu_memory_limit_bytes", hw_id=uuid)
        near("memory size (MiB)", None if limit is None else limit / 2**20,
             row["memory.total"], 1)
        near("power limit (W)", value(samples, "hw_gpu_power_limit_watts", hw_id=uuid),
             row["enforced.power.limit"], 1)
        near("temperature (C)",
             value(samples, "hw_gpu_temperature_celsius", hw_id=uuid, sensor="die"),
             row["temperature.gpu"], 3)
        pcie = {
            "PCIe current link width": ("hw_gpu_pcie_current_link_width",
                                        row["pcie.link.width.current"], 1.0),
            "PCIe max link width": ("hw_gpu_pcie_max_link_width",
                                    row["pcie.link.width.max"], 1.0),
            "PCIe current link speed (GT/s)": (
                "hw_gpu_pcie_current_link_transfers_per_second",
                _gen(row["pcie.link.gen.current"]), 1e9),
            "PCIe max link speed (GT/s)": ("hw_gpu_pcie_max_link_transfers_per_second",
                                           _gen(row["pcie.link.gen.max"]), 1e9),
        }
        for what, (family, theirs, scale) in pcie.items():
            if not has_family(samples, family):
                report.skip(f"{g} {what}", f"the exporter reports no {family}")
                continue
            ours = value(samples, family, hw_id=uuid)
            near(what, None if ours is None else ours / scale,
                 None if theirs is None else theirs / scale, 0)
        active = smi_nvlink_active(smi, index)
        if active is None:
            report.skip(f"{g} NVLink", "this GPU has no NVLink links (a single GPU: "
                        "nothing to compare)")
        elif not has_family(samples, "hw_gpu_nvlink_links"):
            report.skip(f"{g} NVLink", "the exporter reports no hw_gpu_nvlink_links")
        else:
            ours = value(samples, "hw_gpu_nvlink_links", hw_id=uuid, nvlink_state="active")
            report.check(ours == active, f"{g} NVLink active links",
                         f"exporter {ours}, nvidia-smi nvlink -s {active}")


def _gen(gen: float | None) -> float | None:
    return None if gen is None else GEN_TRANSFERS.get(int(gen))


# ---- GPM, read directly --------------------------------------------------------------------
class DirectGpm:
    """GPM of one GPU through pynvml's own calls: a sample now, a sample later, metrics."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.ids = {name: getattr(pynvml, const) for name, (const, _, _) in GPM_DIRECT.items()
                    if hasattr(pynvml, const)}
        self.first = pynvml.nvmlGpmSampleAlloc()
        self.second = pynvml.nvmlGpmSampleAlloc()

    def start(self) -> None:
        pynvml.nvmlGpmSampleGet(self.handle, self.first)

    def finish(self) -> dict[str, float | None]:
        """Ratios 0..1 since start(); None where NVML gives none."""
        pynvml.nvmlGpmSampleGet(self.handle, self.second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.ids)
        request.sample1 = self.first
        request.sample2 = self.second
        for i, mid in enumerate(self.ids.values()):
            request.metrics[i].metricId = mid
        pynvml.nvmlGpmMetricsGet(request)
        out: dict[str, float | None] = {}
        for i, name in enumerate(self.ids):
            m = request.metrics[i]
            ok = m.nvmlReturn == pynvml.NVML_SUCCESS and m.value == m.value  # not NaN
            out[name] = m.value / 100.0 if ok else None
        return out

    def close(self) -> None:
        for s in (self.first, self.second):
            pynvml.nvmlGpmSampleFree(s)


def gpm_window(exporter: Exporter, direct: DirectGpm, seconds: float
               ) -> tuple[list[Sample], dict[str, float | None], float]:
    """The exporter's values and the direct ones over the same `seconds`: each side
    samples right after the other, at both ends (the exporter's first scrape comes more
    than 100 ms after its last, so that it takes a new sample rather than serving the
    last values)."""
    time.sleep(0.2)
    exporter.scrape()
    direct.start()
    t0 = time.monotonic()
    time.sleep(seconds)
    samples = exporter.scrape()
    values = direct.finish()
    return samples, values, time.monotonic() - t0


def compare_gpm(report: Report, exporter: Exporter, index: int, uuid: str, handle: Any,
                label: str, seconds: float) -> dict[str, float | None]:
    direct = DirectGpm(handle)
    try:
        samples, values, took = gpm_window(exporter, direct, seconds)
    finally:
        direct.close()
    g = f"GPU {index} {label}"
    window = value(samples, "gpu_exporter_gpm_window_seconds", hw_id=uuid)
    report.check(window is not None and abs(window - took) < 0.5 * seconds,
                 f"{g}: GPM window",
                 f"exporter {window if window is None else round(window, 3)} s, between "
                 f"the scrapes {took:.3f} s")
    for name, (_, family, labels) in GPM_DIRECT.items():
        ours = value(samples, family, hw_id=uuid, **labels)
        theirs = values.get(name)
        if theirs is None and ours is None:
            report.skip(f"{g}: {name}", "NVML gives no value for it on this GPU")
        elif theirs is None or ours is None:
            report.check(False, f"{g}: {name}", f"exporter {ours}, direct GPM {theirs}")
        else:
            report.check(abs(ours - theirs) <= AGREE, f"{g}: {name}",
                         f"exporter {ours:.3f}, direct GPM {theirs:.3f}")
    return values


# ---- the load ------------------------------------------------------------------------------
# Without torch or cupy: FP16 tensor-core matrix multiplies (mma.sync m16n8k16, sm_80 and
# newer) in a loop, as PTX the driver compiles itself, through libcuda.so.1 alone.
PTX = r"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry hmma_loop(.param .u64 out, .param .u32 iters)
{
    .reg .b32 a<4>;
    .reg .b32 b<2>;
    .reg .f32 c<4>;
    .reg .f32 d<4>;
    .reg .u32 i, n, t;
    .reg .u64 p, o;
    .reg .pred more;
    ld.param.u64 p, [out];
    ld.param.u32 n, [iters];
    mov.b32 a0, 0x3c003c00;
    mov.b32 a1, 0x3c003c00;
    mov.b32 a2, 0x3c003c00;
    mov.b32 a3, 0x3c003c00;
    mov.b32 b0, 0x00010001;
    mov.b32 b1, 0x00010001;
    mov.f32 c0, 0f00000000;
    mov.f32 c1, 0f00000000;
    mov.f32 c2, 0f00000000;
    mov.f32 c3, 0f00000000;
    mov.f32 d0, 0f00000000;
    mov.f32 d1, 0f00000000;
    mov.f32 d2, 0f00000000;
    mov.f32 d3, 0f00000000;
    mov.u32 i, 0;
LOOP:
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
        {c0,c1,c2,c3}, {a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3};
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
        {d0,d1,d2,d3}, {a0,a1,a2,a3}, {b0,b1}, {d0,d1,d2,d3};
    add.u32 i, i, 1;
    setp.lt.u32 more, i, n;
    @more bra LOOP;
    add.f32 c0, c0, c1;
    add.f32 c0, c0, c2;
    add.f32 c0, c0, c3;
    add.f32 c0, c0, d0;
    mov.u32 t, %tid.x;
    cvt.u64.u32 o, t;
    shl.b64 o, o, 2;
    add.u64 p, p, o;
    st.global.f32 [p], c0;
    ret;
}
"""

LOAD = textwrap.dedent("""
    import sys, time
    seconds = float(sys.argv[1])
    ptx = sys.argv[2]
    try:
        import torch
        a = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
        b = torch.randn(8192, 8192, dtype=torch.float16, device="cuda")
        def step():
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
        runner = "torch"
    except ImportError:
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            a = cupy.random.rand(8192, 8192, dtype=cupy.float32).astype(cupy.float16)
            b = cupy.random.rand(8192, 8192, dtype=cupy.float32).astype(cupy.float16)
            def step():
                for _ in range(8):
                    cupy.matmul(a, b)
                cupy.cuda.Device().synchronize()
            runner = "cupy"
        else:
            import ctypes
            cu = ctypes.CDLL("libcuda.so.1")
            def ok(name, *args):
                rc = getattr(cu, name)(*args)
                if rc != 0:
                    text = ctypes.c_char_p()
                    cu.cuGetErrorString(rc, ctypes.byref(text))
                    raise SystemExit(f"{name}: {rc} {text.value}")
            ok("cuInit", 0)
            dev, ctx = ctypes.c_int(), ctypes.c_void_p()
            ok("cuDeviceGet", ctypes.byref(dev), 0)
            ok("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            ok("cuCtxSetCurrent", ctx)
            sms = ctypes.c_int()
            ok("cuDeviceGetAttribute", ctypes.byref(sms), 16, dev)  # multiprocessors
            module, fn = ctypes.c_void_p(), ctypes.c_void_p()
            ok("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(ptx.encode()))
            ok("cuModuleGetFunction", ctypes.byref(fn), module, b"hmma_loop")
            out = ctypes.c_uint64()
            ok("cuMemAlloc_v2", ctypes.byref(out), ctypes.c_size_t(4 * 128))
            iters = ctypes.c_uint32(1 << 16)
            params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(out), ctypes.c_void_p),
                                           ctypes.cast(ctypes.byref(iters), ctypes.c_void_p))
            def step():
                # 8 blocks of 4 warps per SM
                ok("cuLaunchKernel", fn, 8 * sms.value, 1, 1, 128, 1, 1, 0, None, params,
                   None)
                ok("cuCtxSynchronize")
            runner = "PTX mma.sync through libcuda"
    step()
    print("ready", runner.replace(" ", "_"), flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        step()
""")


def load_runner() -> str | None:
    for module in ("torch", "cupy"):
        res = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
        if res.returncode == 0:
            return module
    res = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"],
                         capture_output=True)
    return "libcuda" if res.returncode == 0 else None


@contextmanager
def matmul_load(uuid: str, seconds: float) -> Iterator[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid}
    proc = subprocess.Popen([sys.executable, "-c", LOAD, str(seconds), PTX], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if line[:1] != ["ready"]:
            proc.kill()
            raise RuntimeError(proc.communicate()[1].strip()[-2000:] or "no output")
        time.sleep(1.0)  # past the ramp-up
        yield line[1].replace("_", " ")
    finally:
        proc.kill()
        proc.wait()


# ---- main ----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exporter", default=str(Path(sys.executable).parent / "gpu-exporter"))
    ap.add_argument("--window", type=float, default=2.0,
                    help="seconds between the two scrapes a GPM comparison spans")
    ap.add_argument("--load-gpus", default="0",
                    help="NVML indices of the GPUs to load in turn (comma-separated)")
    args = ap.parse_args(argv)
    report = Report()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"no NVIDIA GPU to check here: NVML answers {exc}", file=sys.stderr)
        return 2
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append((index, str(pynvml.nvmlDeviceGetUUID(handle)), handle))
    if not gpus:
        print("no NVIDIA GPU to check here: NVML lists none", file=sys.stderr)
        return 2
    print(f"{len(gpus)} GPU(s), driver {pynvml.nvmlSystemGetDriverVersion()}, "
          f"nvidia-ml-py with NVML_GPM_METRIC_MAX {getattr(pynvml, 'NVML_GPM_METRIC_MAX', '-')}")
    smi = shutil.which("nvidia-smi")
    runner = load_runner()
    load_gpus = {int(x) for x in args.load_gpus.split(",") if x.strip()}
    with Exporter(args.exporter).running() as exporter:
        samples = exporter.scrape()
        for index, uuid, _ in gpus:
            report.check(value(samples, "hw_gpu_up", hw_id=uuid) == 1, f"GPU {index} up",
                         uuid)
        compare_smi(report, smi, samples, [(i, u) for i, u, _ in gpus])
        for index, uuid, handle in gpus:
            g = f"GPU {index}"
            mig = _mig_mode(handle)
            if mig:
                report.skip(f"{g} MIG", "in MIG mode: the whole GPU is compared, its GPU "
                            "instances are not (their values need a load inside each)")
            else:
                report.skip(f"{g} MIG", "not in MIG mode, and MIG must not be reconfigured "
                            "on a lent machine")
            state = _feature_state(samples, uuid)
            try:
                supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            except (pynvml.NVMLError, AttributeError) as exc:  # an older driver or binding
                report.check(state == "unavailable", f"{g} GPM",
                             f"NVML answers {exc!r}; the exporter's nvidia.gpm state: {state}")
                continue
            if not supported:
                report.check(state == "disabled", f"{g} GPM",
                             f"the GPU has no GPM; the exporter's nvidia.gpm state: {state}")
                continue
            report.check(state == "enabled", f"{g} GPM feature state", str(state))
            busy = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            idle = compare_gpm(report, exporter, index, uuid, handle,
                               "idle" if not busy else "as found", args.window)
            if index not in load_gpus:
                continue
            if runner is None:
                report.skip(f"{g} GPM under a known load", "neither torch, cupy nor the "
                            "driver's libcuda.so.1 is there to run the matrix multiply")
                continue
            if mig:
                report.skip(f"{g} GPM under a known load", "in MIG mode a load runs inside "
                            "one GPU instance, not on the whole GPU")
                continue
            if not busy:
                sm = idle.get("SM active")
                report.check(sm is not None and sm <= IDLE_AT_MOST, f"{g} idle: SM active",
                             f"{sm} (at most {IDLE_AT_MOST} with no process on the GPU)")
            try:
                with matmul_load(uuid, 3 * args.window + 10) as used:
                    loaded = compare_gpm(report, exporter, index, uuid, handle,
                                         f"FP16 matmul ({used})", args.window)
                    smi_now = smi_query(smi)[uuid] if smi else {}
                    util = value(exporter.scrape(), "hw_gpu_utilization_ratio", hw_id=uuid,
                                 hw_gpu_task="general")
            except RuntimeError as exc:
                report.skip(f"{g} GPM under a known load", f"the load did not start: {exc}")
                continue
            for name, least in UNDER_LOAD.items():
                got = loaded.get(name)
                report.check(got is not None and got >= least, f"{g} under load: {name}",
                             f"{got} (at least {least})")
            theirs = smi_now.get("utilization.gpu")
            report.check(util is not None and util >= 0.9
                         and (theirs is None or theirs >= 90),
                         f"{g} under load: utilization",
                         f"exporter {util}, nvidia-smi {theirs} %")
    pynvml.nvmlShutdown()
    failed = [w for v, w, _ in report.lines if v == "FAIL"]
    skipped = sum(1 for v, _, _ in report.lines if v == "NOT CHECKED")
    print(f"\n{len(report.lines) - len(failed) - skipped} passed, {len(failed)} failed, "
          f"{skipped} not checked")
    return 1 if report.failed else 0


def _mig_mode(handle: Any) -> bool:
    try:
        return bool(pynvml.nvmlDeviceGetMigMode(handle)[0])
    except pynvml.NVMLError:
        return False


def _feature_state(samples: Sequence[Sample], uuid: str) -> str | None:
    """The GPU's nvidia.gpm state: its own entry, or the one without hw_id that the
    exporter gives when every GPU is in the same state."""
    for name, labels, v in samples:
        if (name == "gpu_exporter_feature_status" and labels.get("feature") == "nvidia.gpm"
                and labels.get("hw_id", uuid) == uuid and v == 1):
            return labels.get("state")
    return None


if __name__ == "__main__":
    sys.exit(main())
