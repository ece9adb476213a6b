"""Generates docs/metrics.md from the catalogue's label schemas: `python
scripts/gen-metrics-doc.py > docs/metrics.md` (`make docs`); a build tool, outside the
runtime package."""

from __future__ import annotations

import sys

from gpu_exporter.model import catalogue as c
from gpu_exporter.model.labels import LabelSet, Scope

_SCOPES = {
    Scope.DEVICE: ("Device families", "the device labels"),
    Scope.PROCESS: ("Per-process families", "the device labels and the process labels"),
    Scope.CUDA: ("CUDA activity (eBPF)",
                 "the device labels when the device of the call is certain (NVML is "
                 "the judge: see docs/ebpf.md)"),
    Scope.HOST: ("Host families", ""),
    Scope.SELF: ("Exporter self-metrics", ""),
}


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _label(labels: LabelSet, name: str) -> str:
    values = dict(labels.values).get(name)
    text = f"`{name}`" + (" = " + " \\| ".join(f"`{v}`" for v in values) if values else "")
    return text if name in labels.required else text + " (optional)"


def _label_set(labels: LabelSet) -> str:
    always = [n for n in labels.names if n in labels.required]
    known = [n for n in labels.names if n not in labels.required]
    parts = [_names(tuple(always))] if always else []
    if known:
        parts.append(f"when known {_names(tuple(known))}")
    return "; ".join(parts)


def render() -> str:
    lines = [
        "# Metric reference",
        "",
        "<!-- Generated from the label schemas in gpu_exporter/model/catalogue.py and "
        "gpu_exporter/model/labels.py by `make docs`; do not edit. -->",
        "",
        "Every series also carries the resource labels: `host_name`, `service_name` when "
        "`OTEL_SERVICE_NAME` is set, and one label per `OTEL_RESOURCE_ATTRIBUTES` key. "
        "A value the hardware does not report is absent, never 0.",
        "",
        f"**Device labels**: {_label_set(Scope.DEVICE.joined)}. `hw_id` is absent for a "
        "GPU that no source identifies, `hw_parent` and `gpu_mig_profile` are on MIG "
        "instances, the `k8s_*` labels on a GPU allocated to a pod with "
        "`--processes.kubernetes-device-labels`.",
        "",
        f"**Process labels**: {_label_set(Scope.PROCESS.emitted)}.",
        "",
        "**fixed**: the name appears in public queries and rules and never changes. "
        "**(optional)**: a label a series carries only when its value is known.",
        "",
        "**DCGM**: the dcgm-exporter field a family equals, to translate queries "
        "(`rate()` of a counter where DCGM serves a rate).",
    ]
    for scope, (title, carries) in _SCOPES.items():
        metrics = [m for m in c.CATALOGUE if m.scope is scope]
        if not metrics:
            continue
        lines += ["", f"## {title}", ""]
        if carries:
            lines += [f"Series carry {carries} besides their own.", ""]
        dcgm = any(m.dcgm for m in metrics)
        lines += ["| name | type | unit | labels | meaning | sources |"
                  + (" DCGM |" if dcgm else ""),
                  "|---|---|---|---|---|---|" + ("---|" if dcgm else "")]
        for m in metrics:
            name = f"`{m.name}`" + (" **fixed**" if m.fixed else "")
            labels = ", ".join(_label(m.own, n) for n in m.own.names)
            lines.append(
                f"| {name} | {m.kind.value} | {m.unit} | {labels} | {m.help} | {m.sources} |"
                + (f" {m.dcgm} |" if dcgm else "")
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
