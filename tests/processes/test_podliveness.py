"""Finished pods that the kubelet still lists (kubernetes#119423) are told apart from
running ones by node-local files: pod log directories and pod cgroups, every layout."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from gpu_exporter.readers.kubelet import podliveness
from tests.processes.podtree import Layout, pod_cgroup, pod_log_dir

RUN = "0a1b2c3d-0000-4000-8000-000000000001"
DONE = "0a1b2c3d-0000-4000-8000-000000000002"
GUARANTEED = "0a1b2c3d-0000-4000-8000-000000000003"


@pytest.mark.parametrize("layout", get_args(Layout))
def test_a_finished_pod_is_told_from_a_running_one(tmp_path: Path, layout: Layout) -> None:
    logs, sysfs = tmp_path / "pods", tmp_path / "sys"
    pod_log_dir(logs, "ml", "train-0", RUN)
    pod_log_dir(logs, "ml", "job-x-abcde", DONE, ("worker", "sidecar"))
    pod_log_dir(logs, "infer", "server", GUARANTEED)
    pod_cgroup(sysfs, layout, RUN, running=True)
    pod_cgroup(sysfs, layout, DONE, running=False, qos="besteffort")
    pod_cgroup(sysfs, layout, GUARANTEED, running=True, qos="guaranteed")
    live = podliveness.read(str(logs), str(sysfs))
    assert live.cgroups
    assert live.running == {RUN, GUARANTEED}
    assert not live.finished("ml", "train-0")
    assert live.finished("ml", "job-x-abcde")
    assert not live.finished("infer", "server")


def test_a_finished_pod_whose_cgroup_is_gone_is_finished(tmp_path: Path) -> None:
    logs, sysfs = tmp_path / "pods", tmp_path / "sys"
    pod_log_dir(logs, "ml", "old", DONE)
    pod_cgroup(sysfs, "v2-systemd", RUN, running=True)  # some other pod keeps the tree
    assert podliveness.read(str(logs), str(sysfs)).finished("ml", "old")


def test_a_pod_recreated_under_the_same_name_runs_if_either_uid_runs(tmp_path: Path) -> None:
    logs, sysfs = tmp_path / "pods", tmp_path / "sys"
    pod_log_dir(logs, "db", "postgres-0", DONE)  # the previous incarnation's logs remain
    pod_log_dir(logs, "db", "postgres-0", RUN)
    pod_cgroup(sysfs, "v2-systemd", DONE, running=False)
    pod_cgroup(sysfs, "v2-systemd", RUN, running=True)
    assert not podliveness.read(str(logs), str(sysfs)).finished("db", "postgres-0")


def test_what_the_node_does_not_show_counts_as_running(tmp_path: Path) -> None:
    """No log directory yet (the kubelet is creating the pod), or no kubelet cgroup tree
    readable: only a pod shown finished is left out."""
    logs, sysfs = tmp_path / "pods", tmp_path / "sys"
    pod_log_dir(logs, "ml", "done", DONE)
    pod_cgroup(sysfs, "v2-systemd", DONE, running=False)
    live = podliveness.read(str(logs), str(sysfs))
    assert live.finished("ml", "done") and not live.finished("ml", "brand-new")
    no_tree = podliveness.read(str(logs), str(tmp_path / "empty-sys"))
    assert not no_tree.cgroups and not no_tree.finished("ml", "done")


def test_names_that_are_not_pod_log_directories_are_ignored(tmp_path: Path) -> None:
    logs = tmp_path / "pods"
    (logs / "lost+found").mkdir(parents=True)
    (logs / "a_b").mkdir()
    (logs / "a_b_c_d").mkdir()
    assert podliveness.read(str(logs), str(tmp_path)).uids == {}


def test_an_unreadable_log_directory_says_which_and_why(tmp_path: Path) -> None:
    with pytest.raises(podliveness.LivenessUnavailable, match="/nonexistent/pods"):
        podliveness.read("/nonexistent/pods", str(tmp_path))
