"""The Slurm job of a process, from its cgroup path only (slurmd's cgroup/v1 and cgroup/v2
plugins): fake /proc trees with the files a Slurm node shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.readers.procfs.procinfo import ProcessTable, parse_cgroup
from tests.processes.procfs import write_process

# cgroup v1 (proctrack/cgroup, task/cgroup): the job's path under every controller it
# constrains, the others at the root or in slurmd's service.
V1_TASK = """12:pids:/system.slice/slurmd.service
11:memory:/slurm/uid_1000/job_4242/step_0/task_1
10:cpuset:/slurm/uid_1000/job_4242/step_0
9:devices:/slurm/uid_1000/job_4242/step_0/task_1
8:freezer:/slurm/uid_1000/job_4242/step_0
7:cpu,cpuacct:/
6:blkio:/
5:net_cls,net_prio:/
4:perf_event:/
3:hugetlb:/
2:rdma:/
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
"""
V1_BATCH_MULTIPLE_SLURMD = """11:memory:/slurm_node07/uid_0/job_17/step_batch/task_0
9:devices:/slurm_node07/uid_0/job_17/step_batch
1:name=systemd:/system.slice/slurmd.service
"""
# cgroup v2: slurmd's own scope (sometimes prefixed by the node name when several slurmd
# run on one host), one sub-tree per job and step, the user's tasks below `user`.
V2_TASK = "0::/system.slice/slurmstepd.scope/job_987654/step_3/user/task_0\n"
V2_NODE_SCOPE = ("0::/system.slice/gpu-node-12_slurmstepd.scope/job_55/step_extern/user/"
                 "task_special\n")
V2_INTERACTIVE = "0::/system.slice/slurmstepd.scope/job_1234/step_interactive/user/task_0\n"
# The stepd itself (no job yet), another service's "job_" and a user's own cgroup.
V2_STEPD = "0::/system.slice/slurmstepd.scope/system\n"
V2_NOT_SLURM = "0::/system.slice/batch.slice/job_99/step_1\n"
V1_NOT_SLURM = "4:memory:/user.slice/uid_1000/job_99\n"

CASES = {
    "v1 task of a step": (V1_TASK, "4242"),
    "v1 batch step, one slurmd of several (slurm_<node>)": (V1_BATCH_MULTIPLE_SLURMD, "17"),
    "v2 task of a step": (V2_TASK, "987654"),
    "v2 <node>_slurmstepd.scope, extern step": (V2_NODE_SCOPE, "55"),
    "v2 interactive step": (V2_INTERACTIVE, "1234"),
    "v2 slurmstepd's own cgroup: no job": (V2_STEPD, None),
    "v2 job_ outside slurmstepd.scope": (V2_NOT_SLURM, None),
    "v1 job_ outside /slurm": (V1_NOT_SLURM, None),
    "v2 seen from the exporter's cgroup namespace": (
        "0::/../../system.slice/slurmstepd.scope/job_8/step_0/user/task_0\n", "8"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_slurm_job_of_a_cgroup(case: str) -> None:
    text, job = CASES[case]
    assert parse_cgroup(text).slurm_job_id == job


def test_a_job_in_a_container_keeps_both() -> None:
    """pyxis/enroot or a container started inside the job: the container and the job."""
    cid = "ab" * 32
    text = f"0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0/docker-{cid}.scope\n"
    ident = parse_cgroup(text)
    assert (ident.slurm_job_id, ident.container_id) == ("77", cid)


@pytest.mark.parametrize("layout", [V1_TASK, V2_TASK])
def test_processes_of_a_job_carry_its_id(tmp_path: Path, layout: str) -> None:
    write_process(tmp_path, 31337, comm="python", cgroup=layout, start=5)
    write_process(tmp_path, 31338, comm="sshd", cgroup="0::/system.slice/ssh.service\n")
    table = ProcessTable(str(tmp_path))
    info = table.lookup(31337)
    assert info is not None and info.slurm_job_id == parse_cgroup(layout).slurm_job_id
    assert info.slurm_job_id is not None
    other = table.lookup(31338)
    assert other is not None and other.slurm_job_id is None


def test_the_environment_is_never_read(tmp_path: Path) -> None:
    """A process of a job whose cgroup does not say so (task/cgroup off) has no job id,
    even though its environment names one: environ is not read."""
    write_process(tmp_path, 4000, comm="python", cgroup="0::/system.slice/slurmd.service\n")
    (tmp_path / "4000" / "environ").write_bytes(b"SLURM_JOB_ID=31\0SLURM_JOBID=31\0")
    info = ProcessTable(str(tmp_path)).lookup(4000)
    assert info is not None and info.executable_name == "python"
    assert info.slurm_job_id is None
