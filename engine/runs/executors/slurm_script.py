"""The batch script of a Slurm job of the executor (`slurm`), and the files it leaves in each run's logs/.

Its first act takes the lock of every run directory it works in (`logs/attempt.lock`, `flock`,
held by it and everything launch.sh starts until they end): a job that finds one held by another
attempt's job writes exit code `LOCKED_EXIT` and does nothing, so two attempts never write one run
directory, whatever any runner believes. Then it writes the time it began (`slurm-<id>.start`:
the queue wait before it is no run time), runs launch.sh and writes its exit code
(`slurm-<id>.exit`), also when Slurm ends the job with SIGTERM (a time limit, a preemption, a
scancel), before launch.sh started too: the end of an attempt no runner watched is then known
from the file's time.
"""

from __future__ import annotations

import shlex
from typing import Sequence

from engine.runs.executors.base import ALSO_ENV, GROUP_ENV, LOG_DIR, RUN_ID_ENV, Job

GROUPED = " group"  # after the exit code in a group's exit files
ATTEMPT_LOCK = "attempt.lock"  # in each run's logs/: held by the job that runs its attempt
LOCKED_EXIT = 75  # a job that found its run directory held by another attempt (EX_TEMPFAIL)
TERM_EXIT = 143  # ended by SIGTERM before launch.sh ran: what bash reports for a TERM-killed launch.sh


def exit_file_name(job_id: str) -> str:
    return f"slurm-{job_id}.exit"


def batch_script(job: Job, attempt: int, also: Sequence[Job], *, python: str) -> str:
    """The batch script of one attempt's job (see the module's docstring)."""
    cpus = max(job.cpus, 1)
    env = {RUN_ID_ENV: job.id, "RLVR_ATTEMPT": str(attempt), "RLVR_CPUS": str(cpus), "RLVR_PYTHON": python,
           "OMP_NUM_THREADS": str(cpus), "MKL_NUM_THREADS": str(cpus),
           GROUP_ENV: " ".join(j.id for j in also), ALSO_ENV: "\n".join(str(j.run_dir) for j in also)}
    if not job.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU-only job never reaches for a GPU another job holds
    exits = " ".join(shlex.quote(str(j.run_dir / LOG_DIR)) for j in (job, *also))
    lines = ["#!/bin/bash", f"# rlvr-run: the Slurm job of run {job.id}, attempt {attempt} (written by the runner)"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    write_exit = (f'for dir in {exits}; do echo "$code{GROUPED if also else ""}" > "$dir/slurm-$SLURM_JOB_ID.exit.partial" '
                  f'&& mv "$dir/slurm-$SLURM_JOB_ID.exit.partial" "$dir/slurm-$SLURM_JOB_ID.exit"; done')
    lines += [
        # The exit file's writer, and a TERM handler from the first line on: a scancel (or a time
        # limit) that lands before launch.sh starts still leaves the job's end in its exit file.
        f"record_exit() {{ {write_exit}; }}",
        f"trap 'code={TERM_EXIT}; record_exit; exit {TERM_EXIT}' TERM",
        "began=$(date -u +%Y-%m-%dT%H:%M:%S.%3N+00:00)",
        # One attempt at a time in a run directory, whatever any runner believes: the job holds
        # each run's lock (inherited by launch.sh and everything it starts) while it runs, and
        # a job that finds one held does nothing. flock works across the nodes of a shared mount.
        f'for dir in {exits}; do exec {{lock}}>>"$dir/{ATTEMPT_LOCK}" && flock -n "$lock" || {{ '
        f'echo "another attempt holds the lock of $(dirname "$dir") ($dir/{ATTEMPT_LOCK}): Slurm job '
        f'$SLURM_JOB_ID does nothing"; code={LOCKED_EXIT}; record_exit; exit "$code"; }}; done',
        # Then: the time it began, so that the queue wait before it is no run time.
        f'for dir in {exits}; do echo "$began" > "$dir/slurm-$SLURM_JOB_ID.start.partial" '
        f'&& mv "$dir/slurm-$SLURM_JOB_ID.start.partial" "$dir/slurm-$SLURM_JOB_ID.start"; done',
        'echo "# rlvr-run: Slurm job $SLURM_JOB_ID started on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ);'
        ' CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"',
        f"cd {shlex.quote(str(job.run_dir))}",
        # A handler, not an ignore (which launch.sh would inherit): Slurm's SIGTERM (a time
        # limit, a preemption, scancel) ends launch.sh, and this script still records its end.
        "trap 'true' TERM",
        f"bash {shlex.quote(str(job.launch_script))}",
        "code=$?",
        # Written before the job ends, so a runner that comes back after Slurm forgot it still knows.
        "record_exit",
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"
