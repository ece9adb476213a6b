"""GPM through the real exporter over the fake NVML: SM, tensor and DRAM activity of
every H100 from the first scrape, windows never shorter than 100 ms, MIG GPU instances
with one, several or no compute instance, and everything that keeps GPM from a GPU as
the `nvidia.gpm` feature state with the reason and the fix (no GPM on the GPU, a driver
older than GPM, a structure version the driver does not know, an error on the sample
call), per-metric errors and NaN, a hung GPM call, and the flag that turns GPM off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, eventually, find, parse, promtool_check_metrics, value
from tests.nvidia import golden
from tests.nvidia.conftest import running
from tests.nvidia.test_failures import uuid
from tests.nvidia.test_features import doctor, states

GPM_FAMILIES = ("hw_gpu_engine_active_ratio", "hw_gpu_sm_active_ratio",
                "hw_gpu_sm_occupancy_ratio", "hw_gpu_tensor_active_ratio",
                "hw_gpu_pipe_active_ratio", "hw_gpu_dram_active_ratio")


def gpm_of(s: list[Series], hw_id: str) -> dict[str, float]:
    """The GPM values of one device without gpu_instance_id (pipes by name)."""
    out = {}
    for x in s:
        if (x.name in GPM_FAMILIES and x.labels.get("hw_id") == hw_id
                and "gpu_instance_id" not in x.labels):
            out[x.labels.get("hw_gpu_pipe", x.name)] = x.value
    return out


@pytest.fixture(scope="module")
def no_gpm_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A driver older than GPM (R525): none of the nvmlGpm* functions."""
    return fake.build(tmp_path_factory.mktemp("fake-nvml-no-gpm"), omit=fake.GPM_FUNCTIONS)


def test_every_h100_reports_gpm_activity_from_the_first_scrape(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        text = exp.scrape()  # the first: the exporter took its first samples at start
    s = parse(text)
    for i in range(8):
        got = gpm_of(s, uuid(i))
        # NVML's percentages as ratios 0..1, exactly (the fake's counters are exact)
        assert got["hw_gpu_sm_active_ratio"] == (60 + i) / 100
        assert got["hw_gpu_tensor_active_ratio"] == (40 + i) / 100
        assert got["hw_gpu_dram_active_ratio"] == (50 + i) / 100
        assert got["tensor_hmma"] == (35 + i) / 100 and got["tensor_imma"] == 0.0425
        assert len(got) == 5 + 8
        window = value(s, "gpu_exporter_gpm_window_seconds", hw_id=uuid(i))
        assert window is not None and window >= 0.1
    assert states(s, "nvidia.gpm") == {None: "enabled"}
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    promtool_check_metrics(text)


def test_scrapes_close_together_serve_the_last_window_never_a_shorter_one(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        scrapes = [parse(exp.scrape()) for _ in range(6)]
    windows = [value(s, "gpu_exporter_gpm_window_seconds", hw_id=uuid(5)) for s in scrapes]
    assert all(w is not None and w >= 0.1 for w in windows), windows
    for s in scrapes:
        assert gpm_of(s, uuid(5))["hw_gpu_sm_active_ratio"] == 0.65


def test_values_follow_the_gpu_between_scrapes(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        exp.scrape()
        sc.devices[2].gpm[fake.GPM_SM_UTIL] = 12.5
        sc.write()
        # at the first scrape whose GPM window (100 ms or more) ends after the change
        eventually(lambda: gpm_of(parse(exp.scrape()), uuid(2))["hw_gpu_sm_active_ratio"]
                   == 0.125, 10, "GPU 2's new SM activity", interval=0.05)


def test_mig_gpu_instances_with_one_several_and_no_compute_instance(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.mig_h100()
    parent = sc.devices[0]
    with running(fake_lib, sc, tmp_path) as exp:
        text = exp.scrape()
    s = parse(text)
    golden.check("mig_h100", text)
    one, split_a, split_b = (m.uuid for m in parent.migs)
    # GPU instance 1, one compute instance: on that MIG device, with its labels
    assert value(s, "hw_gpu_sm_active_ratio", hw_id=one, hw_parent=parent.uuid) == 0.55
    # GPU instance 2, two compute instances: once, on the parent with the instance id
    assert value(s, "hw_gpu_sm_active_ratio", hw_id=parent.uuid, gpu_instance_id="2") == 0.8
    assert not [x for x in s if x.name in GPM_FAMILIES
                and x.labels["hw_id"] in (split_a, split_b)]
    # GPU instance 5 has no compute instance: nothing, though NVML would sample it
    assert {x.labels.get("gpu_instance_id") for x in s if x.name in GPM_FAMILIES} == {
        None, "2"}
    # the whole GPU
    assert gpm_of(s, parent.uuid)["hw_gpu_sm_active_ratio"] == 0.6
    windows = {(x.labels["hw_id"], x.labels.get("gpu_instance_id"))
               for x in find(s, "gpu_exporter_gpm_window_seconds")}
    assert windows == {(parent.uuid, None), (one, None), (parent.uuid, "2")}
    promtool_check_metrics(text)


def test_a_gpu_without_gpm_is_disabled_per_gpu_beside_one_with_it(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    del sc.devices[6].values["gpm_supported"]  # e.g. an A100 in the same host
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    got = states(s, "nvidia.gpm")
    assert got == {**{uuid(i): "enabled" for i in range(8)}, uuid(6): "disabled"}
    assert not gpm_of(s, uuid(6)) and gpm_of(s, uuid(7))
    assert not find(s, "gpu_exporter_gpm_window_seconds", hw_id=uuid(6))
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    lines = doctor(fake_lib, sc, tmp_path)
    at = next(i for i, x in enumerate(lines)
              if x.strip().startswith("nvidia.gpm") and "disabled" in x)
    assert uuid(6) in lines[at] and "Hopper" in lines[at]


def test_a_driver_older_than_gpm_is_unavailable_with_the_fix(
        no_gpm_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(no_gpm_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.gpm") == {None: "unavailable"}
    assert not [x for x in s if x.name in GPM_FAMILIES]
    assert len(find(s, "hw_gpu_power_draw_watts")) == 8  # the rest is all there
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    lines = doctor(no_gpm_lib, sc, tmp_path)
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("nvidia.gpm"))
    assert "unavailable" in lines[at] and "nvmlGpmQueryDeviceSupport" in lines[at]
    assert "fix: update the NVIDIA driver to R525 or newer" in lines[at + 1]


def test_a_driver_that_does_not_know_the_bindings_structures_is_unavailable(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.gpm_version = 2
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.gpm") == {None: "unavailable"}
    assert not [x for x in s if x.name in GPM_FAMILIES]
    lines = doctor(fake_lib, sc, tmp_path)
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("nvidia.gpm"))
    assert "does not know the version of the GPM structures" in lines[at]
    assert "fix: install the nvidia-ml-py release that matches the driver" in lines[at + 1]


def test_each_metric_answers_for_itself(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    sc.devices[0].gpm[fake.GPM_SM_OCCUPANCY] = "nan"
    sc.devices[1].gpm_errors[fake.GPM_ANY_TENSOR_UTIL] = "UNKNOWN"
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
        logs = exp.logs()
    nan, failed = gpm_of(s, uuid(0)), gpm_of(s, uuid(1))
    assert "hw_gpu_sm_occupancy_ratio" not in nan and nan["hw_gpu_sm_active_ratio"] == 0.6
    assert "hw_gpu_tensor_active_ratio" not in failed and failed["tensor_hmma"] == 0.36
    # NaN is "no value"; an unexpected error is a failure of the collector, logged once
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 0
    assert "tensor_active_ratio" in logs and uuid(1) in logs
    assert states(s, "nvidia.gpm") == {None: "enabled"}


def test_an_error_on_the_sample_call_is_that_gpus_feature_state(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path) as exp:
        exp.scrape()
        sc.devices[3].errors["nvmlGpmSampleGet"] = "NO_PERMISSION"
        sc.write()

        def unavailable() -> list[Series]:  # at the GPU's next sample (a new window)
            s = parse(exp.scrape())
            return s if states(s, "nvidia.gpm").get(uuid(3)) == "unavailable" else []

        s = eventually(unavailable, 10, "GPU 3's GPM unavailable")
        assert not gpm_of(s, uuid(3)) and gpm_of(s, uuid(4))
        assert value(s, "hw_gpu_up", hw_id=uuid(3)) == 1
        assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
        del sc.devices[3].errors["nvmlGpmSampleGet"]
        sc.write()
        s = parse(exp.scrape())
    assert states(s, "nvidia.gpm") == {None: "enabled"}
    assert gpm_of(s, uuid(3))["hw_gpu_sm_active_ratio"] == 0.63


def test_a_hung_gpm_call_costs_only_its_gpu(fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    with running(fake_lib, sc, tmp_path, ["--scrape.timeout=2"]) as exp:
        exp.scrape()
        sc.hang(5, "nvmlGpmSampleGet", 4.0)
        time.sleep(0.15)
        t0 = time.monotonic()
        s = parse(exp.scrape())
        took = time.monotonic() - t0
        sc.hang(5, "nvmlGpmSampleGet", None)
    assert took < 2.5
    assert value(s, "hw_gpu_up", hw_id=uuid(5)) == 0
    for i in set(range(8)) - {5}:
        assert gpm_of(s, uuid(i))["hw_gpu_sm_active_ratio"] == (60 + i) / 100


def test_the_flag_turns_gpm_off_and_no_gpm_call_is_made(
        fake_lib: Path, tmp_path: Path) -> None:
    sc = fake.h100x8()
    for d in sc.devices:  # any GPM call would hang the GPU (and its discovery)
        d.hangs["nvmlGpmQueryDeviceSupport"] = 30.0
        d.hangs["nvmlGpmSampleGet"] = 30.0
    with running(fake_lib, sc, tmp_path, ["--no-collector.nvidia.gpm"]) as exp:
        s = parse(exp.scrape())
    assert [x.value for x in find(s, "hw_gpu_up")] == [1.0] * 8
    assert not [x for x in s if x.name in GPM_FAMILIES]
    assert states(s, "nvidia.gpm") == {None: "disabled"}
