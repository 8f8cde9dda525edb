"""The packing simulator on small DAGs whose optimal schedules are known by hand."""

from __future__ import annotations

import pytest

from engine.price.simulate import SimJob, Unschedulable, critical_path, lower_bound, pack


def test_a_chain_and_an_independent_job_share_two_gpus_optimally():
    jobs = [SimJob(id="a", seconds=3, gpus=1), SimJob(id="b", seconds=4, gpus=1, parents=("a",)),
            SimJob(id="c", seconds=5, gpus=1)]
    assert pack(jobs, gpus=2).makespan == 7  # optimal: max(a + b, c)
    assert pack(jobs, gpus=1).makespan == 12  # optimal: everything in a row
    assert critical_path(jobs) == (7, ["a", "b"])
    assert lower_bound(jobs, 2) == 7


def test_independent_jobs_fill_every_gpu_to_the_work_bound():
    jobs = [SimJob(id=str(i), seconds=2, gpus=1) for i in range(8)]
    schedule = pack(jobs, gpus=4)
    assert schedule.makespan == lower_bound(jobs, 4) == 4


def test_a_small_job_passes_a_large_one_that_does_not_fit_like_the_scheduler():
    # plan order: big waits for 8 free GPUs while 'small' (later in order) starts at once
    jobs = [SimJob(id="first", seconds=10, gpus=4), SimJob(id="big", seconds=5, gpus=8),
            SimJob(id="small", seconds=3, gpus=1)]
    s = pack(jobs, gpus=8)
    assert s.placements["small"].start == 0
    assert s.placements["big"].start == 10
    assert s.makespan == 15


def test_a_node_sized_job_never_straddles_two_nodes():
    # two nodes of 8: two 4-GPU jobs on node 0 and 1, then an 8-GPU job must wait for a whole node
    jobs = [SimJob(id="x", seconds=4, gpus=6), SimJob(id="y", seconds=6, gpus=6), SimJob(id="z", seconds=1, gpus=8)]
    s = pack(jobs, gpus=16, nodes=2)
    assert s.placements["x"].nodes != s.placements["y"].nodes
    assert s.placements["z"].start == 4  # node of x frees at 4, although 4 GPUs were free from the start
    whole = pack([SimJob(id="w", seconds=2, gpus=16)], gpus=16, nodes=2)
    assert whole.placements["w"].nodes == (0, 1)


def test_cpu_slots_bound_gpu_less_jobs():
    jobs = [SimJob(id=str(i), seconds=1, cpus=1) for i in range(4)]
    assert pack(jobs, gpus=0, cpus=2).makespan == 2
    assert pack(jobs, gpus=0).makespan == 1  # no CPU limit given: all at once


def test_a_job_larger_than_the_cluster_is_refused():
    with pytest.raises(Unschedulable):
        pack([SimJob(id="a", seconds=1, gpus=16)], gpus=8)


def test_diamond_critical_path_takes_the_longer_branch():
    jobs = [SimJob(id="s", seconds=1), SimJob(id="l", seconds=5, parents=("s",)),
            SimJob(id="r", seconds=2, parents=("s",)), SimJob(id="t", seconds=1, parents=("l", "r"))]
    assert critical_path(jobs) == (7, ["s", "l", "t"])
    assert pack(jobs, gpus=0).makespan == 7
