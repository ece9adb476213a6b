"""CDI spec files that any DRA driver (or anyone who may write /etc/cdi or /var/run/cdi)
can lay down are parsed with bounds on their shape, not only their bytes: a nesting
limit, no YAML alias, a node budget. A spec past them is a problem naming its file and
is skipped; the other specs' devices stay (issue #32, docs/hostile-input.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from gpu_exporter.readers.kubelet import cdi
from tests.processes.test_dra import CLAIM_UID, VENDOR, nvidia_claim_spec

MIB = 1 << 20
REAL = f"{VENDOR}/claim={CLAIM_UID}-gpu-1"


def nested_json(size: int = 400_000) -> bytes:
    """The attack of the issue: 400 KB of nested brackets (RecursionError before)."""
    return b"[" * (size // 2) + b"]" * (size // 2)


def _pad(body: str, size: int) -> bytes:
    line = "# " + "x" * 998 + "\n"
    return (line * max(0, (size - len(body)) // len(line)) + body).encode()


def merge_laughs(size: int = 744_000) -> bytes:
    """A "billion laughs" of merge keys: each level merges the one below nine times, which
    PyYAML's constructor copies (RSS past 700 MB in 20 s and growing, before)."""
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    lines += [f"m{n}: &m{n}\n  <<: [" + ", ".join([f"*m{n - 1}"] * 9) + "]"
              for n in range(1, 30)]
    return _pad("\n".join(lines) + "\n", size)


def alias_laughs(size: int = 744_000) -> bytes:
    """The classic one: lists of aliases of lists, nine wide and 30 deep, in a spec."""
    lines = ["kind: evil.example.com/x", "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 30)]
    lines.append("devices: [*l29, *l29]")
    return _pad("\n".join(lines) + "\n", size)


def _spec(path: Path, text: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    assert len(text) < cdi.MAX_SPEC_BYTES  # under the byte cap: the shape is the bound


@pytest.mark.parametrize(("name", "text", "reason"), [
    ("nested.json", nested_json(), "nested deeper than 32 levels (200000)"),
    # libyaml's scanner stops at 1,000 levels of flow nesting before a node is built
    ("nested.yaml", b"a: " + b"[" * 100_000 + b"]" * 100_000, "maximum nesting depth"),
    ("flow.yaml", b"a: " + b"[" * 40 + b"]" * 40, "nested deeper than 32"),
    ("block.yaml", "".join(f"{'  ' * i}k:\n" for i in range(40)).encode(),
     "nested deeper than 32"),
    ("merge.yaml", merge_laughs(), "an alias"),
    ("alias.yml", alias_laughs(), "an alias"),
    ("wide.yaml", b"- {a: b}\n" * 40_000, "more than 100000 nodes"),
    ("two.yaml", b"kind: a/b\n---\nkind: c/d\n", "more than one YAML document"),
    ("key.yaml", b"? [a, b]\n: c\n", "a mapping key that is not a string"),
])
def test_a_hostile_spec_is_a_problem_naming_it_and_the_real_claim_stays(
        tmp_path: Path, name: str, text: bytes, reason: str) -> None:
    run = tmp_path / "run-cdi"
    nvidia_claim_spec(run, CLAIM_UID, {"gpu-1": 1})
    _spec(run / name, text)
    devices = cdi.load([str(run)])
    (problem,) = devices.problems
    assert problem.startswith(f"{run / name}: not read: "), problem
    assert reason in problem and "\n" not in problem
    assert cdi.resolver(devices, str(tmp_path), {1: "GPU-one"})(REAL) == "GPU-one"


def test_specs_within_the_bounds_read_as_before(tmp_path: Path) -> None:
    """What the Go CDI library writes (and the tests' specs) reads as yaml.safe_load read
    it, for the names and paths the resolver uses; a null hostPath falls back to path."""
    run = tmp_path / "run-cdi"
    spec = nvidia_claim_spec(run, CLAIM_UID, {"gpu-1": 1, "gpu-2": 2},
                             driver_root="/run/nvidia/driver")
    expected = yaml.safe_load(spec.read_text())
    got = cdi._parse(str(spec), spec.read_bytes())
    assert got["kind"] == expected["kind"]
    assert [d["name"] for d in got["devices"]] == [d["name"] for d in expected["devices"]]
    assert cdi.load([str(run)]).nodes == {
        f"{VENDOR}/claim={CLAIM_UID}-gpu-{n}": (f"/run/nvidia/driver/dev/nvidia{n}",)
        for n in (1, 2)}
    _spec(run / "nulls.yaml", b"kind: a.com/b\ndevices:\n- name: x\n  containerEdits:\n"
          b"    deviceNodes:\n    - {path: /dev/nvidia3, hostPath: null}\n"
          b"    - {path: /dev/nvidia4, hostPath: }\n    - {path: /dev/nvidia5, hostPath: ~}\n")
    assert cdi.load([str(run)]).nodes["a.com/b=x"] == tuple(
        f"/dev/nvidia{n}" for n in (3, 4, 5))
    # 31 levels of nesting and an anchor without an alias are within the bounds
    deep = "kind: a.com/c\ndevices: [{name: y}]\nextra: &e " + "[" * 30 + "]" * 30 + "\n"
    _spec(run / "deep.yaml", deep.encode())
    _spec(run / "deep.json", json.dumps(
        {"kind": "a.com/d", "devices": [{"name": "z"}], "x": "[[[" * 1000,
         "y": json.loads("[" * 29 + "]" * 29)}).encode())
    devices = cdi.load([str(run)])
    assert devices.problems == []
    assert {"a.com/c=y", "a.com/d=z"} <= devices.nodes.keys()


# The subprocess loads the specs five times (the collector reads them each scrape with a
# claim) and reports its peak RSS and its RSS after each load. The peak is VmHWM, which
# exec starts afresh (ru_maxrss keeps the forked parent's: pytest's own size).
_MEASURE = textwrap.dedent("""
    import json, os, sys
    from gpu_exporter.readers.kubelet import cdi
    def rss(field="VmRSS"):
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith(field + ":"))
        return int(line.split()[1]) * 1024
    before, after = rss(), []
    for _ in range(5):
        devices = cdi.load(sys.argv[1:-1])
        after.append(rss())
    print(json.dumps({
        "peak": rss("VmHWM"),
        "before": before, "after": after, "problems": devices.problems,
        "resolved": cdi.resolver(devices, "/nonexistent", {1: "GPU-one"})(sys.argv[-1])}))
""")


def test_peak_rss_while_parsing_hostile_specs_stays_under_150_mb_and_flat(
        tmp_path: Path) -> None:
    """The issue's measure: a nested JSON and an aliased YAML of ~744 KB, under the 1 MiB
    cap, beside a real claim: the claim resolves, the process peaks under 150 MB and its
    RSS is flat from one load to the next (before: RecursionError; 1.6 GB, kept)."""
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    _spec(etc / "nested.json", nested_json())
    _spec(etc / "laughs.yaml", merge_laughs())
    _spec(run / "aliases.yaml", alias_laughs())
    nvidia_claim_spec(run, CLAIM_UID, {"gpu-1": 1})
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(etc), str(run), REAL],
                         capture_output=True, text=True, timeout=50, check=True,
                         cwd=Path(__file__).parents[2])
    got = json.loads(out.stdout)
    assert got["resolved"] == "GPU-one"
    assert sorted(Path(p.split(":")[0]).name for p in got["problems"]) == [
        "aliases.yaml", "laughs.yaml", "nested.json"]
    assert got["peak"] < 150 * MIB, got
    assert max(got["after"]) - min(got["after"]) < 4 * MIB, got
    assert got["after"][-1] - got["before"] < 16 * MIB, got
