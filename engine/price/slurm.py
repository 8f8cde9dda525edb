"""The study packed as the Slurm executor runs it: one single-node job per run (evaluations of one
checkpoint in one job), on whole nodes of the profile's GPUs, the queue left out.

A dry run cannot know the partition's queue, so the wall time counts from each job's start and
says so. The cluster it packs on is `--nodes` nodes of the profile (`--gpus`, when given, in whole
nodes); a run needing more GPUs than one node has can never start, and is refused here as the
executor refuses it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from engine.errors import UserError
from engine.price.profiles import Profile
from engine.price.shapes import StudyShape

QUEUE_NOTE = ("Slurm's queue wait is not included: the wall time counts from each job's start "
              "(`squeue --start` estimates a pending job's)")


def for_slurm(study: StudyShape, profile: Profile, *, gpus: Optional[int], nodes: int) -> tuple[StudyShape, int]:
    """The study with the queue note; the nodes to pack on. (Evaluations of one checkpoint share a
    job as on the local executor: `shape_of_plan` groups them for both.)"""
    study = replace(study, notes=[*study.notes, QUEUE_NOTE])
    if profile.slot != "GPU":
        return study, nodes
    per_node = profile.entry.slots_per_node or 8
    big = max(study.runs, key=lambda r: r.gpus, default=None)
    if big is not None and big.gpus > per_node:
        raise UserError(f"run {big.label} needs {big.gpus} GPUs but a Slurm job of the executor holds one node, "
                        f"and a {profile.name} node has {per_node}\n  fix: lower its resources.gpus to {per_node} "
                        "or price it on a larger node's profile (--gpu-type)")
    if gpus and nodes == 1 and gpus > per_node:
        if gpus % per_node:
            raise UserError(f"--gpus {gpus} is not whole {profile.name} nodes of {per_node} GPUs: "
                            "Slurm jobs of the executor hold one node each")
        nodes = gpus // per_node
    return study, nodes
