#!/usr/bin/env python3
"""Generate the flag reference of docs/configuration.md from the CLI's own option
definitions: the global options (`gpu_exporter/model/settings.py`, `cli.GLOBAL_OPTIONS`), one
switch per collector and each collector's `options`, in the order `--help` lists them.

    .venv/bin/python scripts/gen-flags-doc.py          # rewrite the section (make docs)
    .venv/bin/python scripts/gen-flags-doc.py --check  # exit 1 while it is out of date

Only what lies between the markers is rewritten; the text around them (the input table
with each flag's accepted and refused values, the failure policy) is written by hand.
A build tool: it lives here, not in the runtime package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.commands import cli
from gpu_exporter.model.settings import Option

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "configuration.md"
BEGIN = ("<!-- flags:begin (generated from the CLI's option definitions by `make docs`, "
         "scripts/gen-flags-doc.py; do not edit) -->")
END = "<!-- flags:end -->"
HEAD = "| flag | environment | default | meaning |\n|---|---|---|---|"


def _cell(text: str) -> str:
    """Help text as a table cell: a pipe would end the cell, `<x>` would be taken for
    HTML and a lone `*` for emphasis."""
    return text.replace("|", "\\|").replace("<", "\\<").replace("*", "\\*")


def _default(opt: Option[Any]) -> str:
    value = opt.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"`{value:g}`"
    if value == "":
        return "none"
    return "`" + str(value).replace("|", "\\|") + "`"


def _row(opt: Option[Any]) -> str:
    flag = f"`--{opt.name}`" + (f" / `--no-{opt.name}`" if opt.is_flag else "")
    envs = [cli.env_name(opt.name), *cli.EXTRA_ENVVARS.get(opt.name, ())]
    env = ", ".join(f"`{e}`" for e in envs)
    return f"| {flag} | {env} | {_default(opt)} | {_cell(opt.help)} |"


def _table(title: str, options: list[Option[Any]]) -> list[str]:
    return [f"### {title}", "", HEAD, *(_row(o) for o in options), ""]


def render() -> str:
    every = cli.every_option()
    switches = [o for o in every if o.name in {f"collector.{c.name}" for c in REGISTRY}]
    lines = [BEGIN, "",
             f"{len(every)} flags, as `gpu-exporter --help` lists them. Accepted and refused "
             "values of each: [Inputs](#inputs).", ""]
    lines += _table("Global", list(cli.GLOBAL_OPTIONS))
    lines += _table("Collectors on and off", switches)
    # A collector's own options, under the collectors that declare them (amd and intel
    # share their PCI discovery options).
    owners: dict[Option[Any], list[str]] = {}
    for cls in REGISTRY:
        for opt in cls.options:
            owners.setdefault(opt, []).append(cls.name)
    groups: dict[tuple[str, ...], list[Option[Any]]] = {}
    for opt in cli.collector_options():
        groups.setdefault(tuple(owners[opt]), []).append(opt)
    for names, options in groups.items():
        which = " and ".join(f"`{n}`" for n in names)
        lines += _table(f"Collector{'s' if len(names) > 1 else ''} {which}", options)
    return "\n".join([*lines, END])


def update(text: str) -> str:
    """`text` with the generated section in place of what lies between the markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no {BEGIN!r} ... {END!r} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + render() + tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1, changing nothing, when the section is out of date")
    parser.add_argument("--doc", type=Path, default=DOC, help="the page (default: %(default)s)")
    args = parser.parse_args()
    text = args.doc.read_text()
    try:
        new = update(text)
    except ValueError as exc:
        print(f"{args.doc}: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if new != text:
            print(f"{args.doc}: the flag reference is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.doc.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
