"""Generates docs/metrics.md from the catalogue: `python -m gpu_exporter.docs`."""

from __future__ import annotations

import sys

from gpu_exporter import catalogue as c

_SCOPE_TITLES = {
    c.Scope.DEVICE: ("Device families", "device labels (`" + "`, `".join(c.DEVICE_LABELS)
                     + "`; MIG instances add `hw_parent`, `gpu_mig_profile`) and resource labels"),
    c.Scope.PROCESS: ("Per-process families", "device labels, `" + "`, `".join(c.PROCESS_LABELS)
                      + "` (when known) and resource labels"),
    c.Scope.CUDA: ("CUDA activity (eBPF)", "their own labels, device labels when the device "
                   "is known, resource labels"),
    c.Scope.HOST: ("Host families", "their own labels and resource labels"),
    c.Scope.SELF: ("Exporter self-metrics", "their own labels and resource labels"),
}


def render() -> str:
    lines = [
        "# Metric reference",
        "",
        "<!-- Generated from gpu_exporter/catalogue.py by `make docs`; do not edit. -->",
        "",
        "Every series also carries the resource labels: `host_name`, `service_name` when "
        "`OTEL_SERVICE_NAME` is set, and one label per `OTEL_RESOURCE_ATTRIBUTES` key. "
        "A value the hardware does not report is absent, never 0.",
        "",
        "**fixed**: the name appears in public queries and rules and never changes.",
    ]
    for scope, (title, carries) in _SCOPE_TITLES.items():
        metrics = [m for m in c.CATALOGUE if m.scope is scope]
        if not metrics:
            continue
        lines += ["", f"## {title}", "", f"Series carry {carries}.", "",
                  "| name | type | unit | labels | meaning | sources |",
                  "|---|---|---|---|---|---|"]
        for m in metrics:
            name = f"`{m.name}`" + (" **fixed**" if m.fixed else "")
            labels = ", ".join(f"`{label}`" for label in m.labels) or ""
            lines.append(
                f"| {name} | {m.kind.value} | {m.unit} | {labels} | {m.help} | {m.sources} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
