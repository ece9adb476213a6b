"""The table of every probed symbol in docs/ebpf.md, generated from abi.py:
`python scripts/gen-probe-table.py docs/ebpf.md` (part of `make docs`) rewrites what lies
between the markers and leaves the rest of the file alone; a build tool, outside the
runtime package."""

from __future__ import annotations

import sys
from pathlib import Path

from gpu_exporter.model import ebpf_abi as abi

BEGIN = ("<!-- probes:begin (generated from gpu_exporter/model/ebpf_abi.py by `make docs`; "
         "do not edit) -->")
END = "<!-- probes:end -->"
HIP_BEGIN = ("<!-- hip-probes:begin (generated from gpu_exporter/model/ebpf_abi.py by "
             "`make docs`; do not edit) -->")
HIP_END = "<!-- hip-probes:end -->"
CUDA_PROBES = abi.RUNTIME_PROBES + abi.DRIVER_PROBES


def _detail(p: abi.Probe) -> str:
    """What the probe's constant (its cookie's argument) adds to its program's count."""
    if "copy" in p.program:
        if p.arg == abi.MEMCPY_FROM_ARGS:
            return "; `cuda_memcpy_kind` from the `kind` argument" if p.program == "copy" else ""
        return f"; `cuda_memcpy_kind=\"{abi.MEMCPY_KIND_NAMES[p.arg]}\"`"
    if p.program == "alloc":
        return f"; `{abi.MEM_NAMES[p.arg]}` memory"
    if p.program == "sync":
        return f"; `cuda_sync_call=\"{abi.SYNC_NAMES[p.arg]}\"`"
    if p.program == "graph_add_kernel" and p.arg == abi.GRAPH_ADD_NODE_PARAMS:
        return "; a child graph node: the child graph's kernel nodes as they are then"
    return ""


def rows(probes: tuple[abi.Probe, ...] = CUDA_PROBES) -> list[tuple[str, str, str, str]]:
    """(cuda_call, symbols, API, what a successful call counts), one per documented call
    and kind of count, in probe order; the _v2/_ptsz/_ptds/_spt symbols of a call
    together."""
    out: dict[tuple[str, bool, str, int], list[abi.Probe]] = {}
    for p in probes:
        out.setdefault((p.call, p.driver, p.program, p.arg), []).append(p)
    table = []
    for (call, driver, program, _), group in out.items():
        release = "ROCm" if group[0].hip else "CUDA"
        symbols = ", ".join(f"`{p.symbol}`" + (f" ({release} {p.since}+)" if p.since else "")
                            for p in group)
        api = ("module" if driver else "runtime") if group[0].hip else (
            "driver" if driver else "runtime")
        counts = abi.HIP_COUNTS.get(program) if group[0].hip else None
        table.append((f"`{call}`", symbols, api,
                      (counts or abi.COUNTS[program]) + _detail(group[0])))
    return table


def render() -> str:
    lines = [BEGIN, "", "| `cuda_call` | symbols probed | API | a successful call counts |",
             "|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows()]
    lines += ["", f"{len(CUDA_PROBES)} symbols, each with an entry and a return probe: "
              "a call that returns an error counts once in `gpu_cuda_errors_total` instead. "
              "A driver call made inside a probed runtime call is not counted again.",
              "", END]
    return "\n".join(lines)


def render_hip() -> str:
    """The HIP table (libamdhip64): `module` is the hipModule* side (a module launch made
    inside a runtime launch is not counted again)."""
    lines = [HIP_BEGIN, "", "| `cuda_call` | symbols probed | API | a successful call counts |",
             "|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows(abi.HIP_PROBES)]
    lines += ["", f"{len(abi.HIP_PROBES)} symbols, each with an entry and a return probe: "
              "a call that returns an error counts once in `gpu_cuda_errors_total` instead, "
              "under its `hipError_t` name (`__hipRegisterFunction` returns nothing: never "
              "an error). Symbols marked ROCm x.y+ are not in ROCm 5.2.", "", HIP_END]
    return "\n".join(lines)


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + body + tail


def update(text: str) -> str:
    text = _between(text, BEGIN, END, render())
    if HIP_BEGIN in text:
        text = _between(text, HIP_BEGIN, HIP_END, render_hip())
    return text


def main(argv: list[str]) -> None:
    for name in argv:
        path = Path(name)
        path.write_text(update(path.read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
