#!/usr/bin/env python3
"""The exporter's probes on NVIDIA's real CUDA libraries (as root, bcc and kernel headers
as for tests/ebpf; no GPU needed):

    .venv/bin/python scripts/check-real-cuda-probes.py ROOT

ROOT holds the Debian packages libcudart11.0 and libcuda1 unpacked (CONTRIBUTING.md,
"NVIDIA's real libraries"; scripts/gen-cuda-errors.py unpacks the same). A process loads
both libraries with ctypes and waits; the real exporter (eBPF collector only) attaches;
the process then calls the completion-point entry points of issue #27 with bogus
handles, which the real libraries fail without a GPU. Checks that every symbol of
tests/fixtures/cuda/real-symbols.txt took its entry and return probe (the exporter's
log: "attached N probes"), and that each failed call counted once in
gpu_cuda_errors_total under its documented name. Exits non-zero otherwise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.ebpf.conftest import attached, only_ebpf_args, wait_until  # noqa: E402
from tests.helpers import exporter, find, parse  # noqa: E402

CALLS = {  # documented name: the ctypes call, on the runtime (rt) or the driver (cu)
    "cudaEventQuery": "rt.cudaEventQuery(None)",
    "cudaStreamQuery": "rt.cudaStreamQuery(None)",
    "cudaEventDestroy": "rt.cudaEventDestroy(None)",
    "cudaEventRecord": "rt.cudaEventRecord(None, None)",
    "cudaEventSynchronize": "rt.cudaEventSynchronize(None)",
    "cudaEventElapsedTime": "rt.cudaEventElapsedTime(ctypes.byref(f), None, None)",
    "cudaStreamDestroy": "rt.cudaStreamDestroy(None)",
    "cuEventQuery": "cu.cuEventQuery(None)",
    "cuEventDestroy": "cu.cuEventDestroy_v2(None)",
    "cuEventElapsedTime": "cu.cuEventElapsedTime(ctypes.byref(f), None, None)",
    "cuStreamDestroy": "cu.cuStreamDestroy_v2(None)",
}


def main() -> None:
    lib = Path(sys.argv[1]) / "usr/lib/x86_64-linux-gnu"
    sides = [line.split()[1] for line in
             (REPO / "tests/fixtures/cuda/real-symbols.txt").read_text().splitlines()
             if line and not line.startswith("#")]
    want = {"libcudart": 2 * sides.count("runtime"), "libcuda": 2 * sides.count("driver")}
    child = "\n".join([
        "import ctypes, sys",
        f"cu = ctypes.CDLL({str(lib / 'nvidia/current/libcuda.so.1')!r})",
        f"rt = ctypes.CDLL({str(lib / 'libcudart.so.11.0')!r})",
        "f = ctypes.c_float()",
        "print('ready', flush=True)",
        "sys.stdin.readline()",
        *(f"print({name!r}, {call}, flush=True)" for name, call in CALLS.items()),
    ])
    args = [*only_ebpf_args(), "--collector.ebpf", "--ebpf.rescan-interval=0.2",
            "--ebpf.pid-label"]
    failed = []
    with exporter(args) as exp:
        p = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        wait_until(lambda: sum(str(lib) in a for a in attached(exp)) >= 2, "probes", 60)
        out, _ = p.communicate("go\n", timeout=60)
        print(out, end="")
        rcs = dict(line.split() for line in out.splitlines())

        def counted() -> dict[str, float]:
            s = parse(exp.scrape())
            return {x.labels["cuda_call"]: x.value
                    for x in find(s, "gpu_cuda_errors_total", process_pid=str(p.pid))}
        wait_until(lambda: len(counted()) >= len(CALLS), "errors", 30)
        errors = counted()
        for name in CALLS:
            ok = rcs[name] != "0" and errors.get(name) == 1
            print(f"{name}: returned {rcs[name]}, counted {errors.get(name)}"
                  + ("" if ok else "  <- FAILED"))
            if not ok:
                failed.append(name)
        for line in exp.logs().splitlines():
            if str(lib) in line and "attached" in line:
                n = int(line.split("attached ", 1)[1].split()[0])
                side = "libcuda" if "libcuda.so" in line else "libcudart"
                print(f"{side}: {n} probes attached, {want[side]} wanted")
                if n != want[side]:
                    failed.append(side)
    if failed:
        sys.exit(f"failed: {failed}")


if __name__ == "__main__":
    main()
