"""Host collector against independent readings: the kernel's own counters in /sys and
/proc, statvfs, and real traffic over a veth pair into a network namespace."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_exporter.readers.procfs import host
from tests.helpers import (
    Exporter,
    exporter,
    find,
    parse,
    promtool_check_metrics,
    require_tool,
    run_cli,
    value,
)

MIB = 1024 * 1024
HOST_ONLY = ["--no-collector.processes"]


@pytest.fixture(scope="module")
def exp() -> Iterator[Exporter]:
    with exporter(HOST_ONLY) as e:
        yield e


def _ip(*args: str) -> None:
    res = subprocess.run([require_tool("ip"), *args], capture_output=True, text=True,
                         timeout=30)
    assert res.returncode == 0, f"ip {' '.join(args)}: {res.stderr}"


@pytest.fixture
def veth() -> Iterator[tuple[str, str, str, str]]:
    """A veth pair: one end here, the other in a fresh network namespace.
    Yields (namespace, our end, their end, their address)."""
    tag = f"{os.getpid() % 100000}"
    ns, ours, theirs = f"h5ns{tag}", f"h5a{tag}", f"h5b{tag}"
    net = f"10.213.{os.getpid() % 250}"
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", ours, "type", "veth", "peer", "name", theirs, "netns", ns)
        _ip("addr", "add", f"{net}.1/30", "dev", ours)
        _ip("link", "set", ours, "up")
        _ip("-n", ns, "addr", "add", f"{net}.2/30", "dev", theirs)
        _ip("-n", ns, "link", "set", theirs, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns, ours, theirs, f"{net}.2"
    finally:
        subprocess.run([require_tool("ip"), "netns", "del", ns], capture_output=True)
        subprocess.run([require_tool("ip"), "link", "del", ours], capture_output=True)


def _sys_counter(iface: str, name: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/{name}").read_text())


# A TCP server inside the namespace: reads everything it is sent, then sends back
# REPLY bytes, so both directions carry a known amount (TCP: none of it is lost).
_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7777)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n = 0
while True:
    b = c.recv(65536)
    if not b:
        break
    n += len(b)
c.sendall(b"r" * int(sys.argv[2])); c.close()
print(n, flush=True)
"""

SEND, REPLY = 3_000_000, 1_000_000


def _traffic(ns: str, address: str) -> int:
    import socket

    server = subprocess.Popen(
        [require_tool("ip"), "netns", "exec", ns, sys.executable, "-c", _SERVER, address,
         str(REPLY)], stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        with socket.create_connection((address, 7777), timeout=10) as sock:
            sock.sendall(b"s" * SEND)
            sock.shutdown(socket.SHUT_WR)
            got = 0
            while chunk := sock.recv(65536):
                got += len(chunk)
        assert got == REPLY
        received = int(server.stdout.readline())
        assert received == SEND
        return received
    finally:
        server.wait(10)


def _net(series: list, iface: str, direction: str) -> float:  # type: ignore[type-arg]
    return value(series, "system_network_io_bytes_total", network_interface_name=iface,
                 network_io_direction=direction)


def test_veth_traffic_is_counted_like_the_kernel_counts_it(
    exp: Exporter, veth: tuple[str, str, str, str]
) -> None:
    ns, ours, theirs, address = veth
    first = parse(exp.scrape())
    tx0, rx0 = _net(first, ours, "transmit"), _net(first, ours, "receive")
    sys_tx1, sys_rx1 = _sys_counter(ours, "tx_bytes"), _sys_counter(ours, "rx_bytes")
    assert tx0 <= sys_tx1 and rx0 <= sys_rx1

    _traffic(ns, address)

    sys_tx2, sys_rx2 = _sys_counter(ours, "tx_bytes"), _sys_counter(ours, "rx_bytes")
    second = parse(exp.scrape())
    sys_tx3, sys_rx3 = _sys_counter(ours, "tx_bytes"), _sys_counter(ours, "rx_bytes")
    tx1, rx1 = _net(second, ours, "transmit"), _net(second, ours, "receive")
    # At least what was sent (plus headers) went out, and what came back came in ...
    assert tx1 - tx0 >= SEND
    assert rx1 - rx0 >= REPLY
    # ... and the exporter's numbers are the kernel's: between two independent readings.
    assert sys_tx2 <= tx1 <= sys_tx3
    assert sys_rx2 <= rx1 <= sys_rx3
    assert value(second, "system_network_errors_total", network_interface_name=ours,
                 network_io_direction="receive") == _sys_counter(ours, "rx_errors")
    # The other end lives in another namespace: not this host's interface.
    assert not find(second, "system_network_io_bytes_total", network_interface_name=theirs)


def test_loopback_excluded_by_default_and_included_on_request(exp: Exporter) -> None:
    series = parse(exp.scrape())
    assert not find(series, "system_network_io_bytes_total", network_interface_name="lo")
    with exporter([*HOST_ONLY, "--host.network-interfaces-exclude="]) as all_ifaces:
        series = parse(all_ifaces.scrape())
    lo = _net(series, "lo", "receive")
    assert 0 < lo <= _sys_counter("lo", "rx_bytes")


def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, rest = line.split(":", 1)
        out[key] = int(rest.split()[0]) * 1024
    return out


def _memory_states(m: dict[str, int]) -> dict[str, float]:
    cached = m["Cached"] + m["SReclaimable"]
    used = m["MemTotal"] - m["MemFree"] - m["Buffers"] - cached
    return {"free": m["MemFree"], "buffers": m["Buffers"], "cached": cached, "used": used,
            "utilization": (m["MemTotal"] - m["MemAvailable"]) / m["MemTotal"]}


def test_memory_matches_meminfo(exp: Exporter) -> None:
    before = _memory_states(_meminfo())
    series = parse(exp.scrape())
    after = _memory_states(_meminfo())
    for state in ("free", "buffers", "cached", "used"):
        got = value(series, "system_memory_usage_bytes", system_memory_state=state)
        low, high = sorted((before[state], after[state]))
        assert low - 64 * MIB <= got <= high + 64 * MIB, (state, got, before, after)
    ratio = value(series, "system_memory_utilization_ratio")
    low, high = sorted((before["utilization"], after["utilization"]))
    assert low - 0.01 <= ratio <= high + 0.01


def test_root_filesystem_matches_statvfs(exp: Exporter) -> None:
    series = parse(exp.scrape())
    st = os.statvfs("/")
    expected = {
        "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
        "free": st.f_bavail * st.f_frsize,
        "reserved": (st.f_bfree - st.f_bavail) * st.f_frsize,
    }
    for state, nbytes in expected.items():
        got = value(series, "system_filesystem_usage_bytes", system_filesystem_mountpoint="/",
                    system_filesystem_state=state)
        assert abs(got - nbytes) <= 256 * MIB, (state, got, nbytes)
    types = {s.labels["system_filesystem_type"]
             for s in find(series, "system_filesystem_usage_bytes")}
    assert not types & {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "tracefs", "debugfs"}


def test_filesystem_exclusions_on_a_fake_mount_table(tmp_path: Path) -> None:
    for d in ("data", "snap", "iso", "erofs", "docker", "with space"):
        (tmp_path / d).mkdir()
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mounts").write_text(
        f"/dev/sda1 {tmp_path}/data ext4 rw 0 0\n"
        f"/dev/loop3 {tmp_path}/snap squashfs ro 0 0\n"
        f"/dev/sr0 {tmp_path}/iso iso9660 ro 0 0\n"
        f"/dev/loop4 {tmp_path}/erofs erofs ro 0 0\n"
        "proc /proc proc rw 0 0\n"
        f"overlay {tmp_path}/docker overlay rw 0 0\n"
        f"/dev/sdb1 {tmp_path}/with\\040space xfs rw 0 0\n"
        f"/dev/sdc1 {tmp_path}/gone ext4 rw 0 0\n"
    )
    import re

    readings, errors = host.read_filesystems(
        str(proc), re.compile(host.DEFAULT_FS_TYPES_EXCLUDE),
        re.compile(host.DEFAULT_MOUNTPOINTS_EXCLUDE),
    )
    assert [(r.device, r.mountpoint, r.fs_type) for r in readings] == [
        ("/dev/sda1", f"{tmp_path}/data", "ext4"),
        ("/dev/sdb1", f"{tmp_path}/with space", "xfs"),
    ]
    st = os.statvfs(tmp_path / "data")
    assert readings[0].by_state["free"] == pytest.approx(st.f_bavail * st.f_frsize,
                                                         abs=64 * MIB)
    assert [m for m, _ in errors] == [f"{tmp_path}/gone"]


def test_a_changed_mount_table_is_read_again(tmp_path: Path) -> None:
    """The mounts to read are kept between scrapes while the table's bytes stay the
    same: a mount added, removed or moved shows at the next read."""
    import re

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    mounts = tmp_path / "proc" / "self" / "mounts"
    mounts.parent.mkdir(parents=True)
    mounts.write_text(f"/dev/sda1 {tmp_path}/a ext4 rw 0 0\n")
    reader = host.Filesystems(str(tmp_path / "proc"), re.compile(host.DEFAULT_FS_TYPES_EXCLUDE),
                              re.compile(host.DEFAULT_MOUNTPOINTS_EXCLUDE))

    def devices() -> list[tuple[str, str]]:
        readings, errors = reader.read()
        assert not errors
        return [(r.device, r.mountpoint) for r in readings]

    assert devices() == [("/dev/sda1", f"{tmp_path}/a")]
    assert devices() == [("/dev/sda1", f"{tmp_path}/a")]
    mounts.write_text(f"/dev/sda1 {tmp_path}/a ext4 rw 0 0\n/dev/sdb1 {tmp_path}/b xfs rw 0 0\n")
    assert devices() == [("/dev/sda1", f"{tmp_path}/a"), ("/dev/sdb1", f"{tmp_path}/b")]
    mounts.write_text(f"/dev/sdc1 {tmp_path}/a ext4 rw 0 0\n")  # same length, other device
    assert devices() == [("/dev/sdc1", f"{tmp_path}/a")]
    mounts.write_text(f"/dev/sdc1 {tmp_path}/a squashfs ro 0 0\n")  # now left out
    assert devices() == []


def _diskstats() -> dict[str, tuple[int, int]]:
    out = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        out[f[2]] = (int(f[5]) * 512, int(f[9]) * 512)  # sectors are always 512 bytes
    return out


def test_disk_io_between_independent_readings(exp: Exporter) -> None:
    before = _diskstats()
    series = parse(exp.scrape())
    after = _diskstats()
    disks = find(series, "system_disk_io_bytes_total")
    assert disks, "no disk reported"
    for s in disks:
        dev = s.labels["system_device"]
        i = 0 if s.labels["disk_io_direction"] == "read" else 1
        assert before[dev][i] <= s.value <= after[dev][i], (dev, s.labels, before[dev])
    names = {s.labels["system_device"] for s in disks}
    assert not {n for n in names if n.startswith(("loop", "ram"))}


def _cpu() -> tuple[float, float]:
    f = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    total = sum(f)
    return total - f[3] - f[4], total  # busy, total (idle and iowait are not busy)


def test_cpu_utilization_since_last_scrape(exp: Exporter) -> None:
    exp.scrape()
    busy0, total0 = _cpu()
    # Keep one core busy for a second so the interval is not idle.
    subprocess.run([sys.executable, "-c",
                    "import time\nt=time.time()\nwhile time.time()-t<1: pass"], check=True)
    busy1, total1 = _cpu()
    series = parse(exp.scrape())
    ratio = value(series, "system_cpu_utilization_ratio")
    independent = (busy1 - busy0) / (total1 - total0)
    assert 0 <= ratio <= 1
    assert ratio >= 0.8 / os.cpu_count()  # type: ignore[operator]
    assert abs(ratio - independent) < 0.25, (ratio, independent)


def test_exposition_is_valid(exp: Exporter) -> None:
    promtool_check_metrics(exp.scrape())


def test_bad_exclude_regex_is_a_config_error() -> None:
    res = run_cli(["dump", "--host.disks-exclude=("])
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--host.disks-exclude" in res.stderr and "not a regular expression" in res.stderr


def test_filesystem_type_exclusion_is_configurable() -> None:
    root_type = next(t for _, m, t in host.read_mounts() if m == "/")
    res = run_cli(["dump", *HOST_ONLY, f"--host.filesystem-types-exclude=^{root_type}$"])
    assert res.returncode == 0, res.stderr
    series = parse(res.stdout)
    assert find(series, "system_memory_usage_bytes")
    assert not find(series, "system_filesystem_usage_bytes", system_filesystem_mountpoint="/")
    assert not find(series, "system_filesystem_usage_bytes", system_filesystem_type=root_type)


def test_memory_and_cpu_come_from_the_given_procfs(tmp_path: Path) -> None:
    """A container mounts the host's /proc elsewhere: --path.procfs reaches every read,
    and the default still reads the kernel's own /proc."""
    fake = tmp_path / "proc"
    fake.mkdir()
    (fake / "meminfo").write_text(
        "MemTotal:       16384000 kB\nMemFree:         4096000 kB\n"
        "MemAvailable:    8192000 kB\nBuffers:          512000 kB\n"
        "Cached:          2048000 kB\nShmem:                 0 kB\n"
        "SReclaimable:           0 kB\nActive:          1000000 kB\n"
        "Inactive:        1000000 kB\n")
    (fake / "stat").write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\n")
    mem = host.read_memory(str(fake))
    assert mem.total_bytes == 16384000 * 1024
    assert mem.by_state["free"] == 4096000 * 1024
    assert mem.utilization_ratio == pytest.approx(0.5)
    cpu = host.read_cpu_times(str(fake))
    ticks = os.sysconf("SC_CLK_TCK")
    assert cpu.total_seconds == pytest.approx(1000 / ticks)
    assert cpu.busy_seconds == pytest.approx(150 / ticks)
    assert host.read_memory().total_bytes == _meminfo()["MemTotal"]


@pytest.mark.parametrize("where", ["missing", "not a procfs"])
def test_a_procfs_that_cannot_be_read_makes_host_unavailable_with_the_fix(
        where: str, tmp_path: Path) -> None:
    procfs = "/nonexistent" if where == "missing" else str(tmp_path)
    (tmp_path / "stat").write_text("not the kernel's\n")
    args = [f"--path.procfs={procfs}", *HOST_ONLY, "--no-collector.nvidia",
            "--no-collector.amd", "--no-collector.intel"]
    res = run_cli([*args, "doctor"])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("host "))
    assert lines[at].split()[1] == "unavailable" and procfs in lines[at], res.stdout
    assert "fix:" in lines[at + 1] and "--path.procfs" in lines[at + 1], res.stdout
    # Served the same way: a feature state, no collector claiming success, no values.
    res = run_cli([*args, "dump"])
    assert res.returncode == 0, res.stderr
    series = parse(res.stdout)
    states = {s.labels["state"]: s.value for s in find(series, "gpu_exporter_feature_status")
              if s.labels["feature"] == "host"}
    assert states == {"enabled": 0, "unavailable": 1, "disabled": 0}, states
    assert not [s for s in find(series, "gpu_exporter_collector_success")
                if s.labels["collector"] == "host"]
    assert not [s for s in series if s.name.startswith("system_")]


def test_network_interfaces_are_a_feature_of_their_own(exp: Exporter) -> None:
    series = parse(exp.scrape())
    states = {s.labels["state"]: s.value for s in find(series, "gpu_exporter_feature_status")
              if s.labels["feature"] == "host.network"}
    assert states == {"enabled": 1, "unavailable": 0, "disabled": 0}, states


def test_a_mount_point_that_is_not_utf8_is_read_and_labelled_with_a_replacement(
        tmp_path: Path) -> None:
    """Mount points are bytes: statvfs gets them exactly, the label must be text that
    encodes (a lone surrogate would make every scrape fail)."""
    import re

    os.mkdir(os.fsencode(tmp_path) + b"/data\xff")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    # getmntent's escape of a byte: \ooo
    (proc / "self" / "mounts").write_text(f"/dev/sda1 {tmp_path}/data\\377 ext4 rw 0 0\n")
    readings, errors = host.read_filesystems(
        str(proc), re.compile(host.DEFAULT_FS_TYPES_EXCLUDE),
        re.compile(host.DEFAULT_MOUNTPOINTS_EXCLUDE))
    assert errors == []
    assert [r.mountpoint for r in readings] == [f"{tmp_path}/data\ufffd"]
    readings[0].mountpoint.encode("utf-8")


def test_a_network_or_fuse_filesystem_to_read_keeps_the_host_collector_on_its_worker(
    tmp_path: Path,
) -> None:
    """statvfs of an NFS or FUSE mount waits for its server: while one is read, the host
    collector runs on a worker of its own (guarded), else on the scrape's thread."""
    import re

    for d in ("a", "n", "f"):
        (tmp_path / d).mkdir()
    mounts = tmp_path / "proc" / "self" / "mounts"
    mounts.parent.mkdir(parents=True)
    mounts.write_text(f"/dev/sda1 {tmp_path}/a ext4 rw 0 0\n")
    reader = host.Filesystems(str(tmp_path / "proc"), re.compile(host.DEFAULT_FS_TYPES_EXCLUDE),
                              re.compile(host.DEFAULT_MOUNTPOINTS_EXCLUDE))
    assert reader.may_block  # nothing read yet: unknown
    reader.read()
    assert not reader.may_block
    for line in (f"srv:/export {tmp_path}/n nfs4 rw 0 0",
                 f"sshfs#u@h: {tmp_path}/f fuse.sshfs rw 0 0",
                 f"//srv/share {tmp_path}/n cifs rw 0 0", f"ceph:/ {tmp_path}/n ceph rw 0 0"):
        mounts.write_text(f"/dev/sda1 {tmp_path}/a ext4 rw 0 0\n{line}\n")
        reader.read()
        assert reader.may_block, line
    # Left out by the flags: not read, so it cannot block.
    excluding = host.Filesystems(str(tmp_path / "proc"), re.compile("^ceph$"),
                                 re.compile(host.DEFAULT_MOUNTPOINTS_EXCLUDE))
    excluding.read()
    assert not excluding.may_block
