"""YAML of the rule files the generators write (scripts/gen-k8s-rules.py,
scripts/gen-dcgm-compat.py): one dumper, so that both files read alike."""

from __future__ import annotations

import yaml


class Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line expressions and descriptions stay readable as block scalars.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


Dumper.add_representer(str, _str)

