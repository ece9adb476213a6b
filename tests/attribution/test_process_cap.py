"""The cap on process series per GPU (gpu_exporter/model/process_cap.py)."""

from __future__ import annotations

import pytest

from gpu_exporter.model.process_cap import ProcessCap


def test_the_first_processes_keep_their_series_the_rest_are_folded_once() -> None:
    cap = ProcessCap(2)
    assert cap.assign("G", [1, 2, 3, 4]) == {1, 2}
    assert cap.folded_total == 2
    assert cap.assign("G", [1, 2, 3, 4]) == {1, 2}
    assert cap.folded_total == 2  # the same processes are not counted again


def test_a_folded_process_stays_folded_when_a_place_frees() -> None:
    cap = ProcessCap(2)
    cap.assign("G", [1, 2, 3])
    assert cap.assign("G", [2, 3]) == {2}  # 1 left: 3 stays folded
    assert cap.assign("G", [2, 3, 5]) == {2, 5}  # a newcomer takes the free place
    assert cap.folded_total == 1


def test_a_process_that_comes_back_is_new() -> None:
    cap = ProcessCap(1)
    cap.assign("G", [1, 2])
    cap.assign("G", [1])
    assert cap.assign("G", [1, 2]) == {1}
    assert cap.folded_total == 2


def test_devices_have_their_own_places() -> None:
    cap = ProcessCap(1)
    assert cap.assign("G", [1, 2]) == {1}
    assert cap.assign("H", [2, 3]) == {2}
    cap.forget_other_devices(["H"])
    assert cap.assign("G", [2]) == {2}


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ProcessCap(0)
