"""Every NVIDIA sub-feature says whether it works: XID events and ECC counters, per GPU
where GPUs differ, in gpu_exporter_feature_status and in `doctor` with the reason and
the fix. What a device does not have is `disabled`; what the host lacks `unavailable`;
neither is a collector failure, and a feature that is off pretends no count."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_nvml import scenario as fake
from tests.helpers import Series, find, parse, run_cli, value
from tests.nvidia.conftest import nvidia_only, running
from tests.nvidia.test_failures import uuid

EVENT_API = ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
             "nvmlEventSetWait", "nvmlEventSetFree")


def states(s: list[Series], feature: str) -> dict[str | None, str]:
    """hw_id (None: every device) -> the state that is 1."""
    return {x.labels.get("hw_id"): x.labels["state"]
            for x in find(s, "gpu_exporter_feature_status", feature=feature) if x.value == 1}


def doctor(lib: Path, sc: fake.Scenario, tmp_path: Path) -> list[str]:
    res = run_cli(["doctor", *nvidia_only()],
                  env=fake.env(lib, sc.write(sc.path or tmp_path / "gpus.scenario")))
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_without_an_event_api_xid_is_unavailable_with_the_fix_and_counts_nothing(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    lib = fake.build(tmp_path_factory.mktemp("fake-nvml-no-events"), omit=EVENT_API)
    sc = fake.h100x8()
    lines = doctor(lib, sc, tmp_path)
    at = next(i for i, x in enumerate(lines) if x.strip().startswith("nvidia.xid"))
    assert "unavailable" in lines[at] and "no event API" in lines[at]
    assert "fix: update the NVIDIA driver" in lines[at + 1]
    with running(lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.xid") == {None: "unavailable"}
    # No XID counter pretends to count: the XID alerts depend on the feature state.
    assert not find(s, "hw_errors_total", error_type="xid")
    assert not find(s, "hw_gpu_xid_errors_total")
    assert len(find(s, "hw_errors_total", error_type="corrected")) == 8
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1


def test_xid_and_ecc_states_are_per_gpu_where_gpus_differ(
    fake_lib: Path, tmp_path: Path
) -> None:
    sc = fake.h100x8()
    sc.devices[5].errors["nvmlDeviceRegisterEvents"] = "NOT_SUPPORTED"  # e.g. a vGPU guest
    sc.devices[6].errors["nvmlDeviceRegisterEvents"] = "NO_PERMISSION"
    sc.devices[1].values["ecc_mode"] = 0  # switched off
    # ECC on, but no source gives its counts
    sc.devices[2].field_errors.update({3: "NOT_SUPPORTED", 4: "NOT_SUPPORTED"})
    sc.devices[2].errors["nvmlDeviceGetTotalEccErrors"] = "NOT_SUPPORTED"
    with running(fake_lib, sc, tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.xid") == {
        uuid(i): {5: "disabled", 6: "unavailable"}.get(i, "enabled") for i in range(8)}
    assert states(s, "nvidia.ecc") == {
        uuid(i): {1: "disabled", 2: "unavailable"}.get(i, "enabled") for i in range(8)}
    assert {x.labels["hw_id"] for x in find(s, "hw_errors_total", error_type="xid")} == \
        {uuid(i) for i in range(8)} - {uuid(5), uuid(6)}
    assert value(s, "gpu_exporter_collector_success", collector="nvidia") == 1
    lines = doctor(fake_lib, sc, tmp_path)
    xid = [i for i, x in enumerate(lines) if x.strip().startswith("nvidia.xid")]
    assert len(xid) == 3  # one line per state, naming its GPUs
    off = next(i for i in xid if "unavailable" in lines[i])
    assert uuid(6) in lines[off] and "registering for XID events failed" in lines[off]
    assert "fix: check nvidia-smi" in lines[off + 1]
    ecc = next(i for i, x in enumerate(lines)
               if x.strip().startswith("nvidia.ecc") and "unavailable" in x)
    assert uuid(2) in lines[ecc] and "ECC is on, but NVML gives no ECC error counts" in lines[ecc]
    assert "fix:" in lines[ecc + 1]
    switched_off = next(x for x in lines if x.strip().startswith("nvidia.ecc")
                        and "disabled" in x)
    assert uuid(1) in switched_off and "switched off" in switched_off


def test_a_consumer_card_without_ecc_is_disabled_not_unavailable(
    fake_lib: Path, tmp_path: Path
) -> None:
    with running(fake_lib, fake.rtx4080(), tmp_path) as exp:
        s = parse(exp.scrape())
    assert states(s, "nvidia.ecc") == {None: "disabled"}
    assert states(s, "nvidia.xid") == {None: "enabled"}
    assert states(s, "nvidia.nvml") == {None: "enabled"}
    assert not find(s, "hw_errors_total", error_type="corrected")
