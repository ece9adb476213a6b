"""Proof that a switch from dcgm-exporter loses nothing: the exporter on the simulated node
(fake NVML H100s under load, a pod holding GPU 0: needs root and cgroup v2), with the
dcgm-exporter compatibility pack (alerts/dcgm/) loaded by a real Prometheus and by a real
vmalert writing to a real VictoriaMetrics that scrapes the exporter. NVIDIA's own
dcgm-exporter Grafana dashboard (every panel query, its template variables filled as
Grafana fills them) and a query for each default counter the pack recreates, under its
names up to 4.8 and those of 4.9/4.10, return data on both servers, with dcgm-exporter's
labels and units; the last XID (DCGM_FI_DEV_XID_ERRORS, 4.9's DCGM_FI_DEV_XID_ERROR) carries
the code of each GPU's last XID event; and an H100 in MIG mode, per GPU instance.

Fields that read a family the exporter does not have yet (tests/rules/dcgm_compat.AWAITING)
are checked by promtool (tests/rules/test_dcgm_compat.py), not here, until it lands.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e import fleet as fleet_mod
from tests.e2e.pods import PodSpec, pods
from tests.fake_nvml import scenario as fake
from tests.helpers import eventually, exporter
from tests.nvidia.conftest import nvidia_only
from tests.rules.dcgm_compat import AWAITING, DASHBOARD, generator
from tests.servers import (
    QueryServer,
    alertmanager,
    prometheus,
    scrape_config,
    victoria_metrics,
    vmalert,
)

JOB = "gpu-exporter"
gen = generator()
FIELDS = gen.MAPPING
# Page retirement is the memory repair of GPUs before Ampere (these remap rows instead):
# the simulated H100s have none to report.
NOT_ON_H100 = {"hw_gpu_memory_retired_pages_total", "hw_gpu_memory_retired_pages_pending"}
# Nor are they vGPU guests, the only GPUs with a licence state: its conversion and labels
# are pinned by the promtool unit tests (alerts/dcgm/tests/).
NOT_A_VGPU_GUEST = {"hw_gpu_vgpu_license_state"}
# The last XID: only on the GPUs that had one (tested on its own below).
LAST_XID = {"hw_gpu_xid_last_code"}
# Every field the pack recreates from families the exporter has now.
LIVE = [f for f in FIELDS
        if f.recreated
        and not set(f.families) & (AWAITING | NOT_ON_H100 | NOT_A_VGPU_GUEST | LAST_XID)]
# dcgm-exporter's labels on a GPU series (no MIG, no pods here), and the scrape's; and the
# driver-version label of the field's generation.
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "instance",
               "job"}
POD = PodSpec("ml", "train-0", "dc90e000-0000-4000-8000-000000000001", "trainer", "d1" * 32,
              (fleet_mod.fake.h100(0).uuid,))
NVML_BUS_ID = re.compile(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]")


@dataclass
class Servers:
    prometheus: QueryServer
    victoriametrics: QueryServer

    def __iter__(self) -> Iterator[QueryServer]:
        return iter((self.prometheus, self.victoriametrics))


def _servers_with_the_pack(es: ExitStack, root: Path, port: int) -> Servers:
    """Prometheus with the pack, and VictoriaMetrics with vmalert running it, scraping the
    exporter on `port`. The pack as shipped but for its group interval (30s:
    dcgm-exporter's default collection interval), lowered so that the test has data within
    seconds."""
    pack = root / "dcgm-compat.rules.yml"
    pack.write_text(gen.render_pack(interval="2s"))
    target = [scrape_config(JOB, [f"127.0.0.1:{port}"])]
    prom = es.enter_context(prometheus(scrape=target, rule_files=[pack]))
    vm = es.enter_context(victoria_metrics(scrape=target))
    am = es.enter_context(alertmanager())
    es.enter_context(vmalert([pack], vm.url, am.url, remote_write_url=vm.url))
    return Servers(prom, vm)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with tempfile.TemporaryDirectory(prefix="dcgm-compat-") as tmp, ExitStack() as es:
        root = Path(tmp)
        # A pod holding GPU 0, and the exporter labelling devices with their pods
        node = es.enter_context(pods(root, [POD]))
        fl = fleet_mod.build(root / "fleet", workloads={
            0: [fleet_mod.Workload(node.pids[POD.name], 30 * fleet_mod.GIB, True)]})
        (fl.sysfs.root / "fs").mkdir(exist_ok=True)
        (fl.sysfs.root / "fs" / "cgroup").symlink_to(node.root)
        fl.args += [f"--processes.kubelet-socket={node.socket}",
                    f"--processes.pod-log-dir={node.log_dir}",
                    "--processes.kubernetes-device-labels",
                    # per link too, for DCGM_FI_DEV_NVLINK_BANDWIDTH_L0 (totals sum links)
                    "--collector.nvidia.nvlink-per-link"]
        driver = fleet_mod.LoadDriver(fl)
        driver.start()
        es.callback(driver.stop)
        exp = es.enter_context(exporter(fl.args, fl.env))
        s = _servers_with_the_pack(es, root, exp.port)
        for server in s:
            # the rate() fields are the last to have data: two scrapes, then a rule run
            server.wait_for("DCGM_FI_PROF_PCIE_TX_BYTES", 90)
            server.wait_for("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 60)
            # and the dashboard's template variables have their values: a series written
            # by vmalert may reach VictoriaMetrics' index a flush after the others (all
            # eight panels once found no `instance` on a loaded CI machine)
            for var in _query_variables():
                eventually(partial(_values, server, var["query"]), 60,
                           f"{server.name}: {var['query']}", interval=0.5)
        yield s


def _values(server: QueryServer, definition: str) -> list[str]:
    """Grafana's label_values(metric, label): the label values API, over the dashboard's
    time range, as Grafana asks it."""
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", definition)
    assert m, definition
    now = time.time()
    doc = server.get_json(f"/api/v1/label/{m.group(2)}/values?match[]="
                          + quote(m.group(1), safe="")
                          + f"&start={now - _range_seconds():.3f}&end={now:.3f}")
    return sorted(doc["data"])


def _range_seconds() -> float:
    """The dashboard's default time range ("now-15m" to "now"), in seconds."""
    span = _dashboard()["time"]
    assert span["to"] == "now", span
    m = re.fullmatch(r"now-(\d+)([smh])", span["from"])
    assert m, span
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def _query_variables() -> list[dict[str, Any]]:
    return [v for v in _dashboard()["templating"]["list"] if v["type"] == "query"]


def _all(values: list[str]) -> str:
    """Grafana's "All" of a multi-value variable without a custom all value: each value,
    regex-escaped, in one alternation."""
    return "(" + "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v)
                          for v in values) + ")"


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _panel_queries() -> list[tuple[str, str]]:
    out = []
    for panel in _dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


PANELS = _panel_queries()


def test_the_dashboard_is_nvidias() -> None:
    assert len(PANELS) == 8, PANELS
    variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
    assert variables["instance"]["query"] == "label_values(DCGM_FI_DEV_GPU_TEMP, instance)"
    assert variables["gpu"]["query"] == "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)"


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize(("panel", "expr"), PANELS, ids=[p for p, _ in PANELS])
def test_nvidias_dashboard_panel_has_data(servers: Servers, server: str, panel: str,
                                          expr: str) -> None:
    s: QueryServer = getattr(servers, server)
    values = {}
    for var in _query_variables():
        found = _values(s, var["query"])
        assert found, (server, var["name"])
        values[var["name"]] = _all(found)
    assert values["gpu"] == "(0|1|2|3|4)", values  # the five H100s, and no other card
    query = re.sub(r"\$(\w+)", lambda m: values[m.group(1)], expr)
    assert "$" not in query
    result = s.query(query)
    assert result, f"{server}: {panel}: no data for {query!r}"


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("field", LIVE, ids=[f.name for f in LIVE])
def test_each_recreated_field_has_data_with_dcgm_exporters_labels(
        servers: Servers, server: str, field: Any) -> None:
    s: QueryServer = getattr(servers, server)
    def one_per_h100() -> list[dict[str, Any]]:
        result = s.query(field.name)
        assert len(result) == 5, result
        return result

    # a loaded machine may run the rule group a few seconds late
    result = eventually(one_per_h100, 60, f"{server}: {field.name}: one series per H100")
    for r in result:
        labels = r["metric"]
        assert set(labels) >= DCGM_LABELS, (server, labels)
        assert not set(labels) & set(gen.DROPPED), (server, labels)
        # no MIG here: none of its labels, not even empty; the pod's on GPU 0 alone
        assert not set(labels) & {"GPU_I_ID", "GPU_I_PROFILE"}, (server, labels)
        pod = {k: labels[k] for k in ("namespace", "pod", "container") if k in labels}
        want = {"namespace": "ml", "pod": "train-0", "container": "trainer"}
        assert pod == (want if labels["gpu"] == "0" else {}), (server, labels)
        assert labels["device"] == f"nvidia{labels['gpu']}", labels
        assert labels["UUID"].startswith("GPU-"), labels
        assert NVML_BUS_ID.fullmatch(labels["pci_bus_id"]), labels
        assert labels["modelName"] == "NVIDIA H100 80GB HBM3", labels
        drivers = gen.driver_labels(field)
        assert {d: labels.get(d) for d in drivers} == dict.fromkeys(drivers, "550.54.15")
        assert not ({gen.DRIVER_LABEL_OLD, gen.DRIVER_LABEL_NEW} - set(drivers)) & set(labels)


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("name", ["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR"])
def test_the_last_xid_is_recreated_with_dcgm_exporters_meaning(
        servers: Servers, server: str, name: str) -> None:
    """The fleet's XIDs (tests/e2e/fleet.py): 79 on GPU 0, 13 then 999 on GPU 1, 63 on
    GPU 2, delivered through the fake NVML's event wait: each GPU's series is the code of
    its last one, held after the event, so that dcgm-exporter's `... > 0` alert fires on
    the same GPUs; the GPUs without an XID have no series."""
    s: QueryServer = getattr(servers, server)

    def last() -> dict[str, float]:
        got = {r["metric"]["gpu"]: float(r["value"][1]) for r in s.query(name)}
        assert got == {"0": 79, "1": 999, "2": 63}, got
        return got

    eventually(last, 60, f"{server}: {name}")
    firing = {r["metric"]["gpu"] for r in s.query(f"{name} > 0")}
    assert firing == {"0", "1", "2"}
    for r in s.query(name):
        assert r["metric"]["UUID"].startswith("GPU-") and r["metric"]["device"].startswith(
            "nvidia"), r


def test_every_default_counter_is_queried_or_awaited_or_has_no_equivalent() -> None:
    for f in FIELDS:
        if f.default:
            assert (f in LIVE or set(f.families) & (AWAITING | NOT_A_VGPU_GUEST | LAST_XID)
                    or f.reason), f.name
            assert not set(f.families) & NOT_ON_H100, f.name


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
def test_values_are_in_dcgm_units(servers: Servers, server: str) -> None:
    """The fake H100s' fixed readings, as dcgm-exporter would print them."""
    s: QueryServer = getattr(servers, server)

    def by_gpu(expr: str) -> dict[str, float]:
        return {r["metric"]["gpu"]: float(r["value"][1]) for r in s.query(expr)}

    assert by_gpu("DCGM_FI_DEV_SM_CLOCK")["0"] == 1980  # MHz
    assert by_gpu("DCGM_FI_DEV_FB_USED")["4"] == 2048  # MiB: 2 GiB held by the idle pod
    assert by_gpu("DCGM_FI_DEV_GPU_UTIL")["4"] == 0  # %
    assert by_gpu("DCGM_FI_DEV_GPU_UTIL")["3"] == 97
    # Bytes per second: the load driver adds 50 MB sent and 80 MB received per second
    # (in KiB/s, or per scrape, the values would be orders of magnitude off); the rate
    # window of a minute fills in a minute
    tx = s.wait_for('DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0"} > 4e7', 120)
    assert float(tx[0]["value"][1]) < 6e7, tx
    rx = s.wait_for('DCGM_FI_PROF_PCIE_RX_BYTES{gpu="0"} > 7e7', 60)
    assert float(rx[0]["value"][1]) < 9e7, rx
    # 4.9 and 4.10's names, in their units: hertz, 0-1 ratios, bytes, bytes per second
    assert by_gpu("DCGM_FI_DEV_SM_CLOCK_HERTZ")["0"] == 1.98e9
    assert by_gpu("DCGM_FI_DEV_GPU_UTIL_RATIO")["3"] == 0.97
    assert by_gpu("DCGM_FI_DEV_GPU_UTIL_RATIO")["4"] == 0
    used = by_gpu("DCGM_FI_DEV_FB_USED_BYTES")["4"]
    assert 2048 * 1048576 <= used < 2049 * 1048576, used  # FB_USED's 2048 MiB, in bytes
    assert by_gpu("DCGM_FI_DEV_FB_CAPACITY_BYTES")["4"] == 80 * 1024**3
    assert by_gpu("DCGM_FI_DEV_GPU_TEMP_CELSIUS") == by_gpu("DCGM_FI_DEV_GPU_TEMP")
    tx = s.wait_for('DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND{gpu="0"} > 4e7', 60)
    assert float(tx[0]["value"][1]) < 6e7, tx
    # the same GPUs as the exporter's, joined by UUID
    ours = {r["metric"]["hw_id"] for r in s.query('hw_gpu_info{hw_vendor="nvidia"}')}
    theirs = {r["metric"]["UUID"] for r in s.query("DCGM_FI_DEV_GPU_TEMP")}
    assert ours == theirs, (ours, theirs)


@pytest.fixture(scope="module")
def mig_servers() -> Iterator[Servers]:
    """The exporter on one simulated H100 in MIG mode (tests/fake_nvml mig_h100: GPU
    instance 1 is 3g.40gb with one compute instance, GPU instance 2 is 2g.20gb split into
    two), NVIDIA collector only, with the pack on both servers."""
    with tempfile.TemporaryDirectory(prefix="dcgm-compat-mig-") as tmp, ExitStack() as es:
        root = Path(tmp)
        scenario = fake.mig_h100().write(root / "gpus.scenario")
        exp = es.enter_context(exporter(nvidia_only(), fake.env(fake.build(), scenario)))
        s = _servers_with_the_pack(es, root, exp.port)
        for server in s:
            server.wait_for('DCGM_FI_DEV_FB_USED{GPU_I_ID="2"}', 60)
            server.wait_for('DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID="2"}', 60)
        yield s


@pytest.mark.parametrize("server", ["prometheus", "victoriametrics"])
def test_mig_series_carry_the_gpu_instance_as_dcgm_exporter_does(
        mig_servers: Servers, server: str) -> None:
    """One series per GPU instance (its compute instances folded into one), labelled
    GPU_I_ID and GPU_I_PROFILE (the GPU instance's profile, not the compute instance's),
    UUID the parent GPU's; the whole GPU's series without them."""
    s: QueryServer = getattr(mig_servers, server)
    parent = "GPU-h100a100-0000-1111-2222-333344445555"

    def series(name: str) -> dict[tuple[str | None, str | None], float]:
        out = {}
        for r in s.query(name):
            labels = r["metric"]
            assert labels["UUID"] == parent and labels["gpu"] == "0", labels
            assert labels["device"] == "nvidia0" and labels["pci_bus_id"] == "00000000:18:00.0"
            assert not set(labels) & set(gen.DROPPED), labels
            key = (labels.get("GPU_I_ID"), labels.get("GPU_I_PROFILE"))
            assert key not in out, (name, labels)
            out[key] = float(r["value"][1])
        return out

    # MiB: the GPU's 40 GiB; GPU instance 1's 1 GiB; GPU instance 2's compute instances
    # (2 and 3 GiB in the simulation) as one series, the larger
    assert series("DCGM_FI_DEV_FB_USED") == {
        (None, None): 40960, ("1", "3g.40gb"): 1024, ("2", "2g.20gb"): 3072}
    # GPM: the whole GPU, GPU instance 1 on its MIG device, GPU instance 2 (shared) on its
    # parent's series with gpu_instance_id, where no profile is known
    assert series("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == {
        (None, None): 0.85, ("1", "3g.40gb"): 0.7, ("2", None): 0.9}
