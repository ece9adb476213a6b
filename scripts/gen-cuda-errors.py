#!/usr/bin/env python3
"""Writes gpu_exporter/sources/ebpf/cuda_errors.py, tests/fixtures/cuda/error-names.txt and
tests/fixtures/cuda/real-symbols.txt from NVIDIA's real libraries: the CUDA runtime
(libcudart) and driver (libcuda) name every error code themselves (cudaGetErrorName,
cuGetErrorName; neither needs a GPU or a driver), and their dynamic symbol tables say
which entry points they export.

    python3 scripts/gen-cuda-errors.py [ROOT]

What it downloads (into a temporary folder; nothing is installed):
- the Debian packages libcudart11.0 (CUDA 11.8) and libcuda1 (driver 535), non-free
  (see CONTRIBUTING.md, "NVIDIA's real libraries"), with apt-get download, unless ROOT
  holds them unpacked already;
- NVIDIA's runtime wheels on PyPI, WHEELS below, with pip download: each holds the real
  libcudart of its CUDA release and the toolkit's cuda.h.

Runtime names: cudaGetErrorName of each libcudart. Driver names: cuGetErrorName of
libcuda 535; no newer libcuda is published where it can be fetched without installing
a driver, so the codes of CUDA 12 and 13 come from the CUresult enum of their cuda.h.
cuGetErrorName returns the enum's identifier: this script stops if any name libcuda 535
gives differs from the newest header's identifier for that code. The tables are the
union, each code named by the newest source that names it.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvidia_wheels import wheel_files  # noqa: E402  (scripts/nvidia_wheels.py)

from gpu_exporter.model import ebpf_abi as abi  # noqa: E402
from gpu_exporter.sources.ebpf.elf import ElfFile  # noqa: E402

LIBS = "usr/lib/x86_64-linux-gnu"
PACKAGES = ("libcudart11.0", "libcuda1")
# The newest runtime wheel of each CUDA major release after 11 (bump to cover a newer
# release): (requirement, libcudart's name in the wheel).
WHEELS = (("nvidia-cuda-runtime-cu12==12.9.79", "libcudart.so.12"),
          ("nvidia-cuda-runtime==13.5.37", "libcudart.so.13"))
CODES = range(1, 10000)  # cudaErrorUnknown is 999; no code of either enum is above it
FIXTURE = REPO / "tests/fixtures/cuda/error-names.txt"

Names = dict[int, str]


def unpack(into: Path) -> Path:
    """apt-get download of the non-free packages, with an apt configuration of our own
    (the machine's sources plus non-free), then dpkg-deb -x: nothing is installed."""
    state = into / "apt"
    for d in ("lists/partial", "cache/archives/partial", "debs"):
        (state / d).mkdir(parents=True, exist_ok=True)
    uri = next(line.split()[1] for line in
               Path("/etc/apt/sources.list.d/debian.sources").read_text().splitlines()
               if line.startswith("URIs:"))
    (state / "nf.sources").write_text(
        f"Types: deb\nURIs: {uri}\nSuites: bookworm bookworm-updates\n"
        "Components: main non-free contrib\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    opts = ["-o", "Dir::Etc::sourcelist=/dev/null", "-o", f"Dir::Etc::sourceparts={state}",
            "-o", f"Dir::State::Lists={state}/lists", "-o", f"Dir::Cache={state}/cache"]
    subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True)
    subprocess.run(["apt-get", *opts, "download", *PACKAGES], check=True,
                   cwd=state / "debs", capture_output=True)
    root = into / "root"
    for deb in (state / "debs").glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def version(root: Path, package: str) -> str:
    changelog = root / "usr/share/doc" / package / "changelog.Debian.gz"
    out = subprocess.run(["zcat", str(changelog)], capture_output=True, text=True)
    return out.stdout.split("(", 1)[1].split(")", 1)[0] if out.stdout else "?"


def runtime_names(lib: Path) -> Names:
    rt = ctypes.CDLL(str(lib))
    rt.cudaGetErrorName.restype = ctypes.c_char_p
    found = {code: rt.cudaGetErrorName(code).decode() for code in CODES}
    named = {code: name for code, name in found.items() if name.startswith("cudaError")}
    # Unknown codes read "unrecognized error code"; a runtime that named nothing would
    # want a driver, and its table would be silently empty.
    if "cudaErrorNoDevice" not in named.values():
        sys.exit(f"{lib}: cudaGetErrorName named no code")
    return named


def driver_names(lib: Path) -> Names:
    drv = ctypes.CDLL(str(lib))
    out = ctypes.c_char_p()
    driver = {}
    for code in CODES:
        if drv.cuGetErrorName(code, ctypes.byref(out)) == 0 and out.value:
            driver[code] = out.value.decode()
    return driver


def header_names(cuda_h: Path) -> Names:
    """The CUresult enum of a cuda.h, success left out."""
    enum = re.search(r"typedef enum cudaError_enum\s*\{(.*?)\}\s*CUresult;",
                     cuda_h.read_text(), re.S)
    if not enum:
        sys.exit(f"{cuda_h}: no CUresult enum")
    body = re.sub(r"/\*.*?\*/", "", enum.group(1), flags=re.S)
    members = re.findall(r"^\s*(CUDA_\w+)\s*=\s*([^,\s]+)", body, re.M)
    names = {int(value): name for name, value in members}  # every value is decimal
    names.pop(0, None)
    return names


def union(sources: list[tuple[str, Names]]) -> Names:
    """Each code by the last (newest) source that names it."""
    merged: Names = {}
    for _, names in sources:
        merged.update(names)
    return merged


def table(name: str, codes: dict[int, str]) -> str:
    rows = "".join(f"    {code}: \"{text}\",\n" for code, text in sorted(codes.items()))
    return f"{name}: Final[dict[int, str]] = {{\n{rows}}}\n"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(sys.argv[1]) if len(sys.argv) > 1 else unpack(Path(tmp))
        rt_version, drv_version = (version(root, p) for p in PACKAGES)
        runtime = [(f"libcudart {rt_version}", runtime_names(root / LIBS / "libcudart.so.11.0"))]
        driver = [(f"libcuda {drv_version}",
                   driver_names(root / LIBS / "nvidia/current/libcuda.so.1"))]
        wheels = []
        for i, (requirement, soname) in enumerate(WHEELS):
            wheel_version, (lib, cuda_h) = wheel_files(
                requirement, Path(tmp) / f"wheel{i}", "/" + soname, "/include/cuda.h")
            wheels.append(f"{requirement.split('==')[0]} {wheel_version}")
            runtime.append((f"libcudart {wheel_version}", runtime_names(lib)))
            driver.append((f"cuda.h {wheel_version}", header_names(cuda_h)))
        newest = driver[-1][1]
        differ = {c: (n, newest.get(c)) for c, n in driver[0][1].items() if newest.get(c) != n}
        if differ:
            sys.exit(f"libcuda {drv_version}'s names are not cuda.h's identifiers: {differ}")
        rt_table, drv_table = union(runtime), union(driver)
        for side, sources, merged in (("runtime", runtime, rt_table),
                                      ("driver", driver, drv_table)):
            renamed = {c: [n[c] for _, n in sources if c in n] for c in merged}
            for code, seen in renamed.items():
                if len(set(seen)) > 1:
                    print(f"{side} {code}: named {seen}; the newest kept")
        out = REPO / "gpu_exporter/sources/ebpf/cuda_errors.py"
        doc = textwrap.fill(
            "The names of CUDA error codes, as the CUDA libraries name them (generated by "
            "scripts/gen-cuda-errors.py; do not edit): runtime codes from cudaGetErrorName "
            f"of NVIDIA's {', '.join(s for s, _ in runtime)}; driver codes from "
            f"cuGetErrorName of {driver[0][0]} and, for CUDA 12 and 13, from the CUresult "
            f"enum of {', '.join(s for s, _ in driver[1:])}, whose identifiers are what "
            "cuGetErrorName returns. Each code has the newest name given. libcudart 11.8 "
            "and libcuda are Debian's packages, the others come from the PyPI wheels "
            f"{' and '.join(wheels)}. A code newer than these is reported by its number.",
            width=88)
        out = REPO / "gpu_exporter/sources/ebpf/cuda_errors.py"
        out.write_text(
            f'"""{doc}"""\n\n'
            "from typing import Final\n\n"
            "# cudaError_t, returned by the runtime API (cuda*)\n"
            + table("RUNTIME", rt_table)
            + "\n# CUresult, returned by the driver API (cu*)\n"
            + table("DRIVER", drv_table))
        names = ["# error names as NVIDIA's libraries and headers give them, oldest source first:",
                 "# side, source, code, name (written by scripts/gen-cuda-errors.py)"]
        for side, sources in (("runtime", runtime), ("driver", driver)):
            for source, found in sources:
                names += [f"{side}\t{source}\t{code}\t{name}"
                          for code, name in sorted(found.items())]
        FIXTURE.write_text("\n".join(names) + "\n")
        wanted = {p.symbol for p in abi.ALL_PROBES}
        lines = [f"# exported by libcudart {rt_version} (runtime) and libcuda {drv_version} "
                 "(driver), among the names gpu-exporter probes",
                 "# written by scripts/gen-cuda-errors.py"]
        for label, lib_path in (("runtime", LIBS + "/libcudart.so.11.0"),
                                ("driver", LIBS + "/nvidia/current/libcuda.so.1")):
            for symbol in sorted(ElfFile.open(str(root / lib_path)).functions(wanted)):
                lines.append(f"{symbol} {label}")
        fixture = REPO / "tests/fixtures/cuda/real-symbols.txt"
        fixture.parent.mkdir(parents=True, exist_ok=True)
        fixture.write_text("\n".join(lines) + "\n")
        print(f"{len(rt_table)} runtime and {len(drv_table)} driver error names "
              f"({len(runtime[0][1])} and {len(driver[0][1])} from libcudart {rt_version} "
              f"and libcuda {drv_version}); {len(lines) - 2} probed symbols found in the "
              "real libraries")


if __name__ == "__main__":
    main()
