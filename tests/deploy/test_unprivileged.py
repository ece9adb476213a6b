"""The exporter as an unprivileged service user, the way the image, the systemd unit and
a locked-down host run it: no root, no capability, no supplementary group. NVIDIA through
the real NVML bindings on the fake NVML library, AMD and Intel from sysfs captures, the
real /proc, served over TLS with basic auth."""

from __future__ import annotations

import os
from pathlib import Path

import bcrypt

from tests.fake_nvml import scenario as fake
from tests.helpers import REPO, find, parse
from tests.sysfs.tree import FakeSysfs
from tests.web.certs import make_certs
from tests.web.serve import basic, client_context, https_get, tls_exporter, write_config

NOBODY = 65534


def _readable_by_everyone(path: Path) -> None:
    assert os.stat(path).st_mode & 0o004, f"{path} is not readable by other users"
    for parent in path.parents:
        assert os.stat(parent).st_mode & 0o001, (
            f"{parent} cannot be traversed by other users: the unprivileged exporter cannot "
            "reach the code (make test runs scripts/setup-test-host.d/deploy.sh for this)")


def test_unprivileged_user_serves_nvidia_amd_intel(open_dir: Path) -> None:
    _readable_by_everyone(REPO / ".venv" / "bin")
    _readable_by_everyone(REPO / "gpu_exporter")

    lib = fake.build()  # the shared cache in the checkout, readable by everyone
    _readable_by_everyone(lib / fake.SONAME)
    scenario = fake.rtx4080().write(open_dir / "gpus.scenario")
    sysfs = FakeSysfs(open_dir / "sys")
    sysfs.add("rx6900xt", "0000:0b:00.0", 0)
    sysfs.add("a380", "0000:0c:00.0", 1)

    (open_dir / "certs").mkdir()
    certs = make_certs(open_dir / "certs")
    # The service user must read its key: hand the TLS files to it, as an operator would.
    for f in (open_dir / "certs").iterdir():
        os.chown(f, NOBODY, NOBODY)
    pw_hash = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    cfg = write_config(open_dir, {
        "tls_server_config": {"cert_file": str(certs.server.cert),
                              "key_file": str(certs.server.key)},
        "basic_auth_users": {"prometheus": pw_hash},
    })
    for path in open_dir.rglob("*"):
        if path.is_dir():
            path.chmod(0o755)
    ctx = client_context(certs, client_cert=None)
    pids: list[int] = []
    with tls_exporter(cfg, ctx, args=[f"--path.sysfs={sysfs.root}"], user=str(NOBODY),
                      env=fake.env(lib, scenario), pid=pids) as port:
        status = Path(f"/proc/{pids[0]}/status").read_text().splitlines()
        uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
        assert uids == [str(NOBODY)] * 4, uids
        groups = next(line for line in status if line.startswith("Groups:")).split()[1:]
        assert groups == []
        cap_eff = next(line for line in status if line.startswith("CapEff:")).split()[1]
        assert int(cap_eff, 16) == 0, "the exporter must hold no capability"

        reply = https_get(port, ctx, headers=basic("prometheus", "s3cret"))
        assert reply.status == 200
        series = parse(reply.body.decode())
        vendors = {s.labels["hw_vendor"] for s in find(series, "hw_gpu_up")
                   if s.value == 1}
        assert vendors == {"nvidia", "amd", "intel"}, find(series, "hw_gpu_up")
        for collector in ("nvidia", "amd", "intel"):
            ok = find(series, "gpu_exporter_collector_success", collector=collector)
            assert ok and ok[0].value == 1, (collector, ok)
        # Real readings came through, not just presence.
        assert [x.value for x in find(series, "hw_gpu_memory_limit_bytes",
                                      hw_vendor="nvidia")] == [16 * fake.GIB]
        assert {x.labels["sensor"]: x.value for x in find(
            series, "hw_gpu_temperature_celsius", hw_vendor="amd")} == {
            "edge": 56.0, "junction": 59.0, "memory": 54.0}

        assert https_get(port, ctx).status == 401
