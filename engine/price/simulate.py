"""The executor's packing, replayed on a fake clock: when each run would start and end on K slots.

It follows `engine.runs.schedule` exactly: jobs wait in plan order; at every moment each
waiting job whose parents have finished starts if the executor has its resources free
(first fit, so a small job may pass a large one that does not fit); nothing is reserved.
With nodes, a job needing at most one node's GPUs runs on one node, a larger one on whole
free nodes. The critical path is the longest chain of durations through the DAG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence


@dataclass(frozen=True)
class SimJob:
    id: str
    seconds: float
    gpus: int = 0
    cpus: int = 1
    parents: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    start: float
    end: float
    nodes: tuple[int, ...] = ()


@dataclass
class Schedule:
    placements: dict[str, Placement] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return max((p.end for p in self.placements.values()), default=0.0)


class Unschedulable(ValueError):
    """A job needs more than the cluster has."""


@dataclass
class _Cluster:
    per_node: list[int]  # free GPUs per node
    size: int  # GPUs per node
    cpus: Optional[int]  # free CPU slots (None: not a constraint)
    cpus_total: int = 0

    def place(self, job: SimJob) -> Optional[tuple[int, ...]]:
        if self.cpus is not None and min(job.cpus, self.cpus_total) > self.cpus:
            return None
        if job.gpus == 0:
            return ()
        if job.gpus <= self.size:
            node = next((i for i, free in enumerate(self.per_node) if free >= job.gpus), None)
            return None if node is None else (node,)
        whole = math.ceil(job.gpus / self.size)
        free = [i for i, f in enumerate(self.per_node) if f == self.size]
        return tuple(free[:whole]) if len(free) >= whole else None

    def take(self, job: SimJob, nodes: tuple[int, ...], sign: int) -> None:
        if self.cpus is not None:
            self.cpus -= sign * min(job.cpus, self.cpus_total)
        left = job.gpus
        for node in nodes:
            used = min(left, self.size)
            self.per_node[node] -= sign * used
            left -= used


def pack(jobs: Sequence[SimJob], *, gpus: int, nodes: int = 1, cpus: Optional[int] = None) -> Schedule:
    """Start and end of every job on `gpus` GPUs over `nodes` nodes (and `cpus` CPU slots, when given)."""
    if nodes < 1 or gpus < 0 or (gpus and gpus % nodes):
        raise ValueError(f"{gpus} GPUs do not split evenly over {nodes} node(s)")
    cluster = _Cluster(per_node=[gpus // nodes] * nodes, size=gpus // nodes, cpus=cpus, cpus_total=cpus or 0)
    too_big = [j.id for j in jobs if j.gpus > gpus]
    if too_big:
        raise Unschedulable(f"{len(too_big)} job(s) need more than {gpus} GPU(s), e.g. {too_big[0]}")
    known = {j.id for j in jobs}
    waiting = list(jobs)
    running: list[tuple[float, SimJob, tuple[int, ...]]] = []
    done: dict[str, float] = {}
    out = Schedule()
    now = 0.0
    while waiting or running:
        for job in list(waiting):
            if all(p in done or p not in known for p in job.parents):
                nodes_for = cluster.place(job)
                if nodes_for is not None:
                    cluster.take(job, nodes_for, +1)
                    waiting.remove(job)
                    running.append((now + job.seconds, job, nodes_for))
                    out.placements[job.id] = Placement(start=now, end=now + job.seconds, nodes=nodes_for)
        if not running:
            raise Unschedulable(f"{len(waiting)} job(s) can never start (e.g. {waiting[0].id})")
        now = min(end for end, _, _ in running)
        for item in [r for r in running if r[0] <= now]:
            running.remove(item)
            cluster.take(item[1], item[2], -1)
            done[item[1].id] = item[0]
    return out


def critical_path(jobs: Sequence[SimJob]) -> tuple[float, list[str]]:
    """The longest chain of durations (jobs in topological order) and its job ids, first to last."""
    best: dict[str, tuple[float, Optional[str]]] = {}
    for job in jobs:
        before = max(((best[p][0], p) for p in job.parents if p in best), default=(0.0, None))
        best[job.id] = (before[0] + job.seconds, before[1])
    if not best:
        return 0.0, []
    end = max(best, key=lambda k: best[k][0])
    chain, at = [], end
    while at is not None:
        chain.append(at)
        at = best[at][1]
    return best[end][0], chain[::-1]


def lower_bound(jobs: Sequence[SimJob], gpus: int) -> float:
    """No schedule beats the critical path, nor the GPU-seconds spread evenly over every GPU."""
    work = sum(j.gpus * j.seconds for j in jobs)
    return max(critical_path(jobs)[0], work / gpus if gpus else 0.0)
