"""The eBPF collector on a CPU it is not built for (gpu_exporter/sources/ebpf/arch.py):
`unavailable` with the reason and the fix, while the rest of the exporter runs.

The machine name is the kernel's own answer for a real exporter process: `setarch
linux32` gives the process the PER_LINUX32 personality, under which uname(2) says
`i686` on this x86-64 kernel. Nothing of the exporter is replaced. (No personality
makes an x86-64 kernel say `aarch64`; the gate is an allow-list, so any name but
`x86_64` takes the same path, and the reason names the machine it was given.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpu_exporter.collectors import REGISTRY
from gpu_exporter.sources.ebpf import arch
from tests.fake_nvml import scenario as fake
from tests.helpers import eventually, exporter, find, parse, run_cli, value
from tests.sysfs.tree import FakeSysfs

SETARCH = ("setarch", "linux32")
REASON = ("eBPF probes are built and tested for x86_64 only, this CPU is i686: its calls "
          "pass arguments in other registers and stack slots, and its syscalls have other "
          "numbers")


def test_the_gate_lets_only_x86_64_through() -> None:
    assert arch.unsupported("x86_64") is None
    for other in ("aarch64", "arm64", "i686", "ppc64le", "riscv64", ""):
        a = arch.unsupported(other)
        assert a is not None and a.state == "unavailable", other
        assert f"this CPU is {other or 'unknown'}:" in a.reason
        assert "--collector.ebpf" in a.fix and "docs/ebpf.md" in a.fix


def test_the_syscall_numbers_are_x86_64s() -> None:
    """attach.py's bpf(2) and perf_event_open(2) numbers, against the kernel's own
    header for x86-64 (linux-libc-dev, with gcc)."""
    header = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h").read_text()
    nr = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+) (\d+)", header)}
    assert (nr["bpf"], nr["perf_event_open"]) == (
        arch.X86_64.sys_bpf, arch.X86_64.sys_perf_event_open)
    assert arch.BUILT_FOR is arch.X86_64 and set(arch.SUPPORTED) == {"x86_64"}


def test_setarch_changes_the_machine_the_kernel_reports() -> None:
    """The premise of the tests below: the personality, not the test, makes the name."""
    got = subprocess.run([*SETARCH, "uname", "-m"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert got == "i686", got


def _host(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Flags and environment of a host with 8 fake H100s (NVML) and an AMD card (sysfs),
    the eBPF collector asked for."""
    sysfs = FakeSysfs(tmp_path / "sys")
    sysfs.add("rx6900xt", "0000:0c:00.0", 0)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    env = dict(fake.env(fake.build(), fake.h100x8().write(tmp_path / "h100x8.scenario")))
    off = [f"--no-collector.{c.name}" for c in REGISTRY
           if c.name not in ("nvidia", "amd", "ebpf")]
    return [*off, "--collector.ebpf", f"--path.sysfs={sysfs.root}",
            f"--path.procfs={procfs}"], env


def test_an_exporter_on_another_cpu_serves_all_but_ebpf(tmp_path: Path) -> None:
    args, env = _host(tmp_path)
    with exporter(args, env, prefix=SETARCH) as exp:
        def served() -> bool:
            s = parse(exp.scrape())
            state = {x.labels["state"]: x.value
                     for x in find(s, "gpu_exporter_feature_status", feature="ebpf")}
            assert state == {"enabled": 0, "unavailable": 1, "disabled": 0}, state
            # The NVIDIA and sysfs families are served as on any host.
            up = {x.labels["hw_vendor"]: x.value for x in find(s, "hw_gpu_up")}
            assert len(find(s, "hw_gpu_up", hw_vendor="nvidia")) == 8
            assert up == {"nvidia": 1, "amd": 1}, up
            assert find(s, "hw_gpu_temperature_celsius", hw_vendor="amd")
            for collector in ("nvidia", "amd"):
                assert value(s, "gpu_exporter_collector_success", collector=collector) == 1
            # No eBPF family at all: not zeros.
            assert not [x for x in s if x.name.startswith("gpu_kernel_")]
            return True

        eventually(served, 60, "the NVIDIA and AMD GPUs served, ebpf unavailable")
        # Scraped again: the reason is logged once, not at every scrape.
        exp.scrape()
        logged = [line for line in exp.logs().splitlines() if "ebpf unavailable" in line]
        assert len(logged) == 1, exp.logs()
        assert REASON in logged[0] and arch.FIX in logged[0], logged
        # bcc was never loaded: the gate comes before it.
        maps = Path(f"/proc/{exp.proc.pid}/maps").read_text()
        assert "libbcc" not in maps


def test_doctor_on_another_cpu_says_why_and_the_fix(tmp_path: Path) -> None:
    args, env = _host(tmp_path)
    res = run_cli(["doctor", *args], env, prefix=SETARCH)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if re.match(r"ebpf\s", line))
    assert re.match(r"ebpf\s+unavailable\s+" + re.escape(REASON) + "$", lines[at]), lines[at]
    assert lines[at + 1].split() and lines[at + 1].strip() == f"fix: {arch.FIX}", lines
    for collector in ("nvidia", "amd"):
        assert any(re.match(collector + r"\s+enabled\b", line) for line in lines), res.stdout
    # --strict names the collector asked for and unavailable.
    strict = run_cli(["doctor", "--strict", *args], env, prefix=SETARCH)
    assert strict.returncode != 0 and "ebpf" in strict.stderr, strict.stderr
