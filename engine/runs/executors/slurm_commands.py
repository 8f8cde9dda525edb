"""The Slurm client commands the executor and `status` use, and nothing else of Slurm's.

Only what Slurm 22.05 and every later release share: `sbatch --parsable`, `squeue -h -t all
-j IDS -o FORMAT` (and `-n NAME`), `scancel IDS`, `sinfo -h -N -o FORMAT`. No REST API, no
`sacct` (clusters without accounting storage answer nothing), no `--json` (its schema differs
between releases). The cluster is whichever `SLURM_CONF` (or the system's configuration) names.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional, Sequence

# States in which a job will never run again (with `--no-requeue`); the rest are on the way.
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
                   "OUT_OF_MEMORY", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})
# Ended by Slurm (or by someone with scancel), not by the script's own exit.
KILLED = ENDED - {"COMPLETED", "FAILED"}
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo")
INSTALL_HINT = ("run rlvr-run on a node with the Slurm client commands (a login node), or install them: "
                "apt-get install slurm-client")


class SlurmUnreachable(ConnectionError):
    """The controller did not answer (a command failed for want of it); an OSError, so the
    scheduler fails the run it was starting."""


class SlurmRefused(OSError):
    """sbatch said no (an unknown partition, account or QOS, a limit); the run fails with its words."""


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    reason: str  # Slurm's reason ("Resources", "Priority", "None", ...)
    work_dir: str = ""  # the job's --chdir: a run directory, which no other study's job shares

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def describe(self) -> str:
        """`PENDING (Resources)`; the state alone when Slurm gives no reason."""
        return self.state if self.reason in ("", "None", "(null)") else f"{self.state} ({self.reason})"


def missing_clients() -> list[str]:
    return [name for name in CLIENTS if shutil.which(name) is None]


def _run(args: Sequence[str], *, env: Optional[dict[str, str]] = None, timeout_s: float = 30.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise SlurmUnreachable(f"{args[0]} is not installed here: {INSTALL_HINT}") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmUnreachable(f"{args[0]} did not answer within {timeout_s:.0f} s") from exc


def submit(options: Sequence[str], script: str, *, env: dict[str, str]) -> str:
    """sbatch the batch script with `options`; the new job's id."""
    done = _run(["sbatch", "--parsable", *options, script], env=env)
    if done.returncode != 0:
        words = done.stderr.strip() or done.stdout.strip()
        if "Unable to contact slurm controller" in words or "Socket timed out" in words:
            raise SlurmUnreachable(f"sbatch could not reach the Slurm controller: {words[-300:]}")
        raise SlurmRefused(f"sbatch refused the job: {words[-300:]}")
    # --parsable prints "id" or "id;cluster"
    return done.stdout.strip().splitlines()[-1].split(";")[0]


def job_states(job_ids: Sequence[str] = (), *, name: Optional[str] = None) -> dict[str, JobState]:
    """The jobs Slurm still knows of these (finished ones until MinJobAge passes), by id; or
    those named `name`. Ids Slurm forgot are simply absent."""
    args = ["squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%Z"]  # the directory last: it may hold "|"
    if name is not None:
        args += ["-n", name]
    else:
        if not job_ids:
            return {}
        args += ["-j", ",".join(job_ids)]
    done = _run(args)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:  # one id asked for, and Slurm no longer has it
            return {}
        raise SlurmUnreachable(f"squeue failed: {done.stderr.strip()[-300:]}")
    found = {}
    for line in done.stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4:
            found[parts[0]] = JobState(job_id=parts[0], state=parts[1].split()[0], reason=parts[2], work_dir=parts[3])
    return found


def cancel(job_ids: Sequence[str]) -> None:
    if job_ids:
        _run(["scancel", *job_ids])


_GPU = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


@dataclass(frozen=True)
class Node:
    cpus: int
    gpus: int
    max_h: Optional[float]  # the partition's longest time limit, in hours; None: none


def nodes(partition: Optional[str]) -> list[Node]:
    """Each node of `partition` (of every partition when None) with its CPUs, GPUs and its
    partition's time limit: a run's job holds one node, so no run may ask for more than one node
    has. sbatch refuses a request no node can hold of GPUs or memory, but under Slurm's default
    `EnforcePartLimits=NO` it takes one of too many CPUs, or of more time than the partition
    allows, and keeps it PENDING (PartitionConfig, PartitionTimeLimit) for good."""
    args = ["sinfo", "-h", "-N", "-o", "%c|%l|%G"] + (["-p", partition] if partition else [])
    done = _run(args)
    if done.returncode != 0:
        raise SlurmUnreachable(f"sinfo failed: {done.stderr.strip()[-300:]}")
    found = []
    for line in done.stdout.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0].isdigit():
            found.append(Node(cpus=int(parts[0]), gpus=gpus_in_gres(parts[2]), max_h=hours_of(parts[1])))
    return found


def hours_of(limit: str) -> Optional[float]:
    """A time limit as sinfo prints it (`infinite`, `1-12:00:00`, `2:00:00`, `30:00` = 30 min), in
    hours; None for no limit or a spelling it does not know (then nothing is refused for it)."""
    days, _, clock = limit.rpartition("-")
    fields = clock.split(":")
    if not (days or "0").isdigit() or not 2 <= len(fields) <= 3 or not all(f.isdigit() for f in fields):
        return None
    h, m, sec = ([0] if len(fields) == 2 else []) + [int(f) for f in fields]
    return int(days or 0) * 24 + h + m / 60 + sec / 3600


def gpus_in_gres(gres: str) -> int:
    """GPUs in one node's GRES as sinfo prints it: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a:2,gpu:b:2,mps:200`."""
    return sum(int(count) for count in _GPU.findall(re.sub(r"\([^)]*\)", "", gres)))


def partitions() -> list[str]:
    done = _run(["sinfo", "-h", "-o", "%R"])
    if done.returncode != 0:
        raise SlurmUnreachable(f"the Slurm controller did not answer sinfo: {done.stderr.strip()[-300:]}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]
