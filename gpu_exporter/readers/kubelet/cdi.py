"""GPUs handed out through Kubernetes DRA, resolved with what the node holds: the CDI spec
files (Container Device Interface, github.com/cncf-tags/container-device-interface
SPEC.md) that the DRA drivers write, no API-server access.

A spec is JSON or YAML: `kind` (`vendor/class`), `devices` each with a `name` and
`containerEdits.deviceNodes` (`path`, optionally `hostPath`), and edits common to all its
devices. The kubelet names a claim's devices fully qualified, `<kind>=<name>`. NVIDIA's
DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin/cdi.go) writes
a transient spec per claim in /var/run/cdi whose devices carry `/dev/nvidia<minor>` only
(no NVIDIA_VISIBLE_DEVICES UUIDs); AMD's (ROCm/k8s-gpu-dra-driver) writes to /etc/cdi
with `/dev/dri/cardN`, `/dev/dri/renderD*` and the shared `/dev/kfd`.

A device node is mapped to a GPU through its name: `/dev/nvidia<minor>` through the
NVIDIA driver's minor numbers (given by the caller, from /proc/driver/nvidia), a DRM node
through sysfs (`class/drm/<node>/device`, the PCI device). Shared nodes (`/dev/kfd`,
`/dev/nvidiactl`, ...) name no GPU. A device none of whose nodes names a GPU is
unresolved, never guessed.

A MIG device (cmd/gpu-kubelet-plugin/cdi.go, GetDevNodesForMigDevice) carries its
parent's `/dev/nvidia<minor>` and two capability nodes, `/dev/nvidia-caps/nvidia-cap<N>`:
its GPU instance's and its compute instance's access. The driver numbers them in
`/proc/driver/nvidia-caps/mig-minors` (`gpu<minor>/gi<GI>/access <N>`,
`gpu<minor>/gi<GI>/ci<CI>/access <N>`; NVIDIA's MIG user guide, parsed the same way by
nvidia-container-toolkit internal/nvcaps/nvcaps.go). The device is the MIG device of
(parent minor, GI, CI), never its parent: a device whose capability nodes do not name
exactly one compute instance of a MIG device the caller knows is unresolved.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import yaml

from gpu_exporter.readers import files
from gpu_exporter.readers.sysfs.pci import normalize_pci_address

DEFAULT_DIRS = ("/etc/cdi", "/var/run/cdi")
MAX_SPEC_BYTES = 1 << 20
# A node's host path may sit under the driver's root: NVIDIA's DRA driver writes every
# node's hostPath through the toolkit's root transform (nvcdi/transform/root), so with
# the GPU operator's driver container it is /run/nvidia/driver/dev/nvidia0.
_NVIDIA = re.compile(r"(?:/.*)?/dev/nvidia([0-9]+)")
_DRM = re.compile(r"(?:/.*)?/dev/dri/((?:renderD|card)[0-9]+)")
_CAP = re.compile(r"(?:/.*)?/dev/nvidia-caps/nvidia-cap([0-9]+)")
_MIG_CAP = re.compile(r"gpu([0-9]+)/gi([0-9]+)(?:/ci([0-9]+))?/access")
MIG_MINORS = "driver/nvidia-caps/mig-minors"
# 32 GPUs x 15 GPU instances x 9 lines of about 25 bytes: 110 kB
MAX_MIG_MINORS_BYTES = 1 << 20
_SUFFIXES = (".json", ".yaml", ".yml")
# Any program may write a spec (every DRA driver's, not only a GPU one's): its shape is
# bounded before it is built, not only its bytes. A CDI spec is some 7 levels deep
# (spec, devices, device, containerEdits, deviceNodes, node, a value) and its writers
# (the Go CDI library's yaml/json marshalling) never emit an alias. A 400 KB file of
# nested brackets raised RecursionError out of json.loads; a 744 KB YAML of merge-key
# aliases (`<<: [*a, *a, ...]`, which PyYAML copies at each level) grew past 1.6 GB.
MAX_SPEC_DEPTH = 32
# Nodes (scalars and collections) of one YAML spec: a spec of 1,024 devices of 20 nodes
# each is 20,000.
MAX_SPEC_NODES = 100_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_NO_KEY = object()


class SpecRefused(ValueError):
    """A spec whose shape is past the bounds: skipped, a problem naming it."""


@dataclass
class CdiDevices:
    """Every device of the specs found, by qualified name: its device node paths."""

    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # malformed or duplicated specs
    skipped: list[str] = field(default_factory=list)  # of problems, files not read at all
    files: int = 0  # spec files read


def _device_nodes(edits: Any) -> tuple[str, ...]:
    if not isinstance(edits, dict):
        return ()
    out = []
    for node in edits.get("deviceNodes") or ():
        if isinstance(node, dict):
            path = node.get("hostPath") or node.get("path")
            if isinstance(path, str):
                out.append(path)
    return tuple(out)


def _json_depth(text: bytes) -> int:
    """The deepest nesting of brackets outside strings: json.loads recurses once per
    level, so it is measured before (in C-speed passes: 1 MiB of brackets in ~40 ms)."""
    brackets = _JSON_STRING.sub(b'""', text).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _yaml_spec(text: bytes) -> Any:
    """The spec built from its events (libyaml, streamed), refusing an alias, nesting
    past MAX_SPEC_DEPTH and more than MAX_SPEC_NODES nodes at the first event past the
    bound. Scalars stay strings (a plain empty or `null` one is None), tags are not
    followed: the spec is read for its names and paths only, and PyYAML's constructor
    took 2.5 s for 33,000 small mappings where this takes a tenth of that."""
    root: Any = None
    stack: list[Any] = []  # the open collections, innermost last
    keys: list[Any] = []  # per open mapping, the key waiting for its value
    nodes = documents = 0

    def add(value: Any) -> None:
        nonlocal root
        if not stack:
            root = value
        elif isinstance(stack[-1], list):
            stack[-1].append(value)
        elif keys[-1] is _NO_KEY:
            if not isinstance(value, str | None):
                raise SpecRefused("a mapping key that is not a string")
            keys[-1] = value
        else:
            stack[-1][keys[-1]] = value
            keys[-1] = _NO_KEY

    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            raise SpecRefused("an alias (*name): CDI specs are written without one")
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise SpecRefused("more than one YAML document")
        elif isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_SPEC_NODES:
                raise SpecRefused(f"more than {MAX_SPEC_NODES} nodes")
            if isinstance(event, yaml.ScalarEvent):
                plain = event.implicit[0] and not event.style  # libyaml: '', PyYAML: None
                add(None if plain and event.value in _NULLS else event.value)
                continue
            if len(stack) >= MAX_SPEC_DEPTH:
                raise SpecRefused(f"nested deeper than {MAX_SPEC_DEPTH} levels")
            collection: Any = {} if isinstance(event, yaml.MappingStartEvent) else []
            add(collection)
            stack.append(collection)
            keys.append(_NO_KEY)
        elif isinstance(event, yaml.CollectionEndEvent):
            stack.pop()
            keys.pop()
    return root


def _parse(path: str, text: bytes) -> Any:
    if path.endswith(".json"):
        depth = _json_depth(text)
        if depth > MAX_SPEC_DEPTH:
            raise SpecRefused(f"nested deeper than {MAX_SPEC_DEPTH} levels ({depth})")
        return json.loads(text)
    return _yaml_spec(text)


def load(dirs: Iterable[str]) -> CdiDevices:
    """The devices of every spec file in `dirs` (later directories take precedence, as
    in CDI; a name given twice in one directory is ambiguous: left out, a problem)."""
    out = CdiDevices()
    for folder in dirs:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        seen: dict[str, str] = {}
        ambiguous: set[str] = set()
        for name in names:
            if not name.endswith(_SUFFIXES):
                continue
            path = os.path.join(folder, name)
            try:
                spec = _parse(path, files.read_capped(path, MAX_SPEC_BYTES))
            except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
                reason = " ".join(str(exc).split())  # one line (libyaml's span three)
                out.problems.append(f"{path}: not read: {reason[:120]}")
                out.skipped.append(out.problems[-1])
                continue
            out.files += 1
            kind = spec.get("kind") if isinstance(spec, dict) else None
            devices = spec.get("devices") if isinstance(spec, dict) else None
            if not isinstance(kind, str) or not isinstance(devices, list):
                out.problems.append(f"{path}: not a CDI spec (no kind or devices)")
                out.skipped.append(out.problems[-1])
                continue
            for device in devices:
                if not isinstance(device, dict) or not isinstance(device.get("name"), str):
                    out.problems.append(f"{path}: a device without a name")
                    continue
                qualified = f"{kind}={device['name']}"
                if qualified in seen:
                    out.problems.append(f"{path}: {qualified} also in {seen[qualified]}")
                    ambiguous.add(qualified)
                    continue
                seen[qualified] = path
                out.nodes[qualified] = _device_nodes(device.get("containerEdits"))
        for qualified in ambiguous:
            out.nodes.pop(qualified, None)
    return out


@dataclass(frozen=True)
class MigCap:
    """What one `/dev/nvidia-caps/nvidia-cap<N>` grants: a GPU instance's access
    (`ci` None) or a compute instance's."""

    gpu_minor: int
    gi: int
    ci: int | None


def read_mig_minors(procfs: str) -> dict[int, MigCap]:
    """Capability minor -> the MIG instance it grants, from the driver's mig-minors
    file; {} where there is none (no NVIDIA driver, or one without MIG) or it cannot be
    read. `config` and `monitor` grant no instance: left out."""
    try:
        text = files.read_text(os.path.join(procfs, MIG_MINORS), MAX_MIG_MINORS_BYTES)
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, minor = line.partition(" ")
        m = _MIG_CAP.fullmatch(name)
        if m and minor.strip().isdigit():
            ci = m.group(3)
            out[int(minor)] = MigCap(int(m.group(1)), int(m.group(2)),
                                     None if ci is None else int(ci))
    return out


def _mig(caps: list[int], mig_minors: Mapping[int, MigCap],
         migs: Mapping[tuple[int, int, int], str]) -> str | None:
    """The MIG device the capability nodes grant: one compute instance, and the GPU
    instance it belongs to when that is given too; None for anything else."""
    granted = [mig_minors.get(n) for n in caps]
    compute = {g for g in granted if g is not None and g.ci is not None}
    if None in granted or len(compute) != 1:
        return None
    (ci,) = compute
    if any(g is not None and (g.gpu_minor, g.gi) != (ci.gpu_minor, ci.gi) for g in granted):
        return None
    assert ci.ci is not None
    return migs.get((ci.gpu_minor, ci.gi, ci.ci))


def drm_address(sysfs: str, node: str) -> str | None:
    """The PCI address of a DRM node (renderD128, card0) through sysfs."""
    try:
        target = os.readlink(f"{sysfs}/class/drm/{node}/device")
    except OSError:
        return None
    return normalize_pci_address(os.path.basename(target))


def resolver(devices: CdiDevices, sysfs: str, nvidia_minors: Mapping[int, str],
             mig_minors: Mapping[int, MigCap] | None = None,
             migs: Mapping[tuple[int, int, int], str] | None = None,
             nvidia_pci: Mapping[str, str] | None = None,
             ) -> Callable[[str], str | None]:
    """A function from a qualified CDI device name to the device key of its GPU (the key
    `nvidia_minors` gives an NVIDIA minor; a DRM GPU's PCI address, or the key
    `nvidia_pci` gives that address for an NVIDIA GPU; for a MIG device the key `migs`
    gives its (parent minor, GPU instance, compute instance), through `mig_minors`),
    None when the device is not in the specs or names no GPU, or more than one.

    An NVIDIA GPU's device carries its DRM nodes beside /dev/nvidia<minor> where
    nvidia-drm is loaded (the toolkit's dgpu discoverer adds drm.GetDeviceNodesByBusID):
    through `nvidia_pci` both name the same key."""
    by_pci = nvidia_pci or {}

    def resolve(qualified: str) -> str | None:
        nodes = devices.nodes.get(qualified, ())
        caps = [int(m.group(1)) for m in map(_CAP.fullmatch, nodes) if m]
        if caps:  # a MIG device: its parent's /dev/nvidia<minor> is not the device
            return _mig(caps, mig_minors or {}, migs or {})
        found = set()
        for path in nodes:
            m = _NVIDIA.fullmatch(path)
            if m:
                key = nvidia_minors.get(int(m.group(1)))
                if key:
                    found.add(key)
                continue
            m = _DRM.fullmatch(path)
            if m:
                address = drm_address(sysfs, m.group(1))
                if address:
                    found.add(by_pci.get(address, address))
        return found.pop() if len(found) == 1 else None

    return resolve
