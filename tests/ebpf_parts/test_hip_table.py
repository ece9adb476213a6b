"""The HIP probe table against what AMD's HIP runtime exports, release by release: the
real libamdhip64.so.5 of ROCm 5.2.3 (Debian 12) and ROCm/clr's symbol version script of
6.0, 6.1, 6.2 and 7.x (tests/fixtures/hip/README.md). A misspelt symbol, a wrong `since`
or a probe of a call a release dropped fails here."""

from __future__ import annotations

import fnmatch
import re

import pytest

from gpu_exporter.model import ebpf_abi as abi
from gpu_exporter.sources.ebpf import hip_errors
from gpu_exporter.sources.ebpf.names import demangle
from tests.helpers import REPO

FIXTURES = REPO / "tests/fixtures/hip"
MAPS = {"6.0.0": "hip_hcc.map.in-6.0.0", "6.1.0": "hip_hcc.map.in-6.1.0",
        "6.2.2": "hip_hcc.map.in-6.2.2", "7.2": "hip_hcc.map.in-7.2"}


def version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def real_52() -> dict[str, str]:
    """name -> version node of what the real ROCm 5.2.3 library defines."""
    out = {}
    for line in (FIXTURES / "real-symbols-5.2.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, node = line.partition("@")
            out[name] = node
    return out


def version_script(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(C name -> its node, C++ pattern -> its node) of a hip_hcc.map.in."""
    c_names: dict[str, str] = {}
    cxx: dict[str, str] = {}
    node, in_cxx = "", False
    for raw in (FIXTURES / name).read_text().splitlines():
        line = raw.strip()
        head = re.match(r"^(hip_[0-9.]+) \{", line)
        if head:
            node = head.group(1)
        elif line.startswith('extern "C++"'):
            in_cxx = True
        elif line.startswith("};") and in_cxx:
            in_cxx = False
        elif line.endswith(";") and line not in ("*;",) and not line.startswith("}"):
            (cxx if in_cxx else c_names).setdefault(line[:-1], node)
    return c_names, cxx


def node_of(p: abi.Probe, script: tuple[dict[str, str], dict[str, str]]) -> str | None:
    c_names, cxx = script
    if p.symbol.startswith("_Z"):
        function = demangle(p.symbol).split("(", 1)[0]
        return next((n for pat, n in cxx.items() if fnmatch.fnmatch(function, pat)), None)
    return c_names.get(p.symbol)


def test_every_hip_probe_of_rocm_5_2_is_what_the_real_library_exports() -> None:
    real = real_52()
    for p in abi.HIP_PROBES:
        if p.since:
            assert p.symbol not in real, p  # really newer than 5.2
        else:
            assert p.symbol in real, p


@pytest.mark.parametrize("release", list(MAPS))
def test_every_hip_probe_is_exported_from_its_release_on(release: str) -> None:
    script = version_script(MAPS[release])
    for p in abi.HIP_PROBES:
        node = node_of(p, script)
        if version(p.since or "5.2") <= version(release):
            assert node is not None, (release, p)
        else:
            assert node is None, (release, p)


def test_since_is_not_before_the_version_node_that_exports_it() -> None:
    """The newest script's node of each probe is not newer than its `since` (a name may
    be added to an older node later); one of 5.2 is in the same node in the real 5.2
    library."""
    script = version_script(MAPS["7.2"])
    real = real_52()
    for p in abi.HIP_PROBES:
        node = node_of(p, script)
        assert node is not None, p
        assert version(node.removeprefix("hip_")) <= version(p.since or "5.2"), p
        if not p.since:
            assert real[p.symbol] == node, p


def test_launch_calls_are_named_as_documented() -> None:
    calls = {p.call for p in abi.HIP_PROBES if p.program in abi.LAUNCH_PROGRAMS}
    assert calls == {"hipLaunchKernel", "hipExtLaunchKernel", "hipLaunchCooperativeKernel",
                     "hipLaunchKernelExC", "hipGraphLaunch", "hipModuleLaunchKernel",
                     "hipModuleLaunchCooperativeKernel", "hipExtModuleLaunchKernel",
                     "hipHccModuleLaunchKernel", "hipDrvLaunchKernelEx"}
    # hipcc's <<<>>> stub calls these before hipLaunchKernel: the launch counts there only.
    assert not {"__hipPushCallConfiguration", "__hipPopCallConfiguration"} & set(abi.BY_SYMBOL)


def device_prop_offsets() -> dict[str, list[int]]:
    rows = [line.split() for line in
            (FIXTURES / "device-prop-offsets.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    return {r[0]: [int(x) for x in r[1:]] for r in rows}


def test_device_properties_pci_fields_where_the_headers_put_them() -> None:
    offsets = device_prop_offsets()
    _, domain, bus, device = offsets["R0000"]
    assert (domain, bus, device) == (abi.HIP_PROPS_R0000_PCI_OFF,
                                     abi.HIP_PROPS_R0000_PCI_OFF + 4,
                                     abi.HIP_PROPS_R0000_PCI_OFF + 8)
    _, domain, bus, device = offsets["R0600"]  # bus, device, domain in this order
    assert (bus, device, domain) == (abi.HIP_PROPS_R0600_PCI_OFF,
                                     abi.HIP_PROPS_R0600_PCI_OFF + 4,
                                     abi.HIP_PROPS_R0600_PCI_OFF + 8)


def test_hip_error_names_are_the_real_librarys() -> None:
    assert hip_errors.HIP[100] == "hipErrorNoDevice"
    assert hip_errors.HIP[101] == "hipErrorInvalidDevice"
    assert hip_errors.HIP[999] == "hipErrorUnknown"
    assert all(name.startswith("hipError") for name in hip_errors.HIP.values())
