"""The Slurm client commands the executor and `status` use, and nothing else of Slurm's.

Only what Slurm 22.05 and every later release share: `sbatch --parsable`, `squeue -h -t all
-j IDS -o FORMAT` (and `-n NAME`), `scancel IDS`, `sinfo -h -N -o FORMAT`, and `sacct -X -P -o
JobID,End` for when a job ended, where the cluster keeps accounting (many do not: it then answers
nothing, and the batch script's exit file says it). No REST API, no `--json` (its schema differs
between releases). The cluster is whichever `SLURM_CONF` (or the system's configuration) names.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
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


class SlurmAnswerUnclear(OSError):
    """A Slurm command answered something that is neither what it prints nor an error it names
    (sbatch exiting 0 with no job id, squeue lines of another shape): the command and its output."""


@dataclass(frozen=True)
class Submission:
    """What sbatch answered: the job id when it printed one; else its exit status and words, which
    the executor reads only after looking for the job by name (a lost answer may have queued it)."""

    command: str
    returncode: int
    output: str
    job_id: Optional[str] = None

    def failure(self) -> OSError:
        """The error this answer is when no job of its name was found: unreachable, refused or unclear."""
        words = self.output[-300:]
        if self.returncode == 0:
            return SlurmAnswerUnclear(f"`{self.command}` exited 0 without a job id; its output: {words or '(none)'}")
        if self.returncode < 0 or any(sign in self.output for sign in _UNREACHABLE):  # < 0: no answer in time
            return SlurmUnreachable(f"sbatch could not reach the Slurm controller: {words}")
        return SlurmRefused(f"sbatch refused the job: {words or f'exit {self.returncode}, no output'}")


# sbatch's words when the controller did not answer; a job may have been queued all the same.
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted",
                "Connection refused", "Connection timed out", "Slurm backup controller in standby mode")


def submit(options: Sequence[str], script: str, *, env: dict[str, str]) -> Submission:
    """sbatch the batch script with `options`; its answer (`Submission.job_id` when it gave one)."""
    args = ["sbatch", "--parsable", *options, script]
    command = " ".join(args)
    try:
        done = _run(args, env=env)
    except SlurmUnreachable as exc:  # its own timeout: the answer is lost, not known to be no
        return Submission(command=command, returncode=-1, output=str(exc))
    out = done.stdout.strip()
    output = "\n".join(x for x in (out, done.stderr.strip()) if x)
    # --parsable prints "id" or "id;cluster"; anything else is no id
    last = out.splitlines()[-1].split(";")[0].strip() if out else ""
    job_id = last if done.returncode == 0 and last.isdigit() else None
    return Submission(command=command, returncode=done.returncode, output=output, job_id=job_id)


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
        if not line.strip():
            continue
        if len(parts) != 4 or not parts[0] or not parts[1].split():
            raise SlurmAnswerUnclear(f"`{' '.join(args)}` printed a line of another shape than {args[5]!r}: "
                                     f"{line[:200]!r}")
        found[parts[0]] = JobState(job_id=parts[0], state=parts[1].split()[0], reason=parts[2], work_dir=parts[3])
    return found


def cancel(job_ids: Sequence[str], *, tries: int = 3, wait_s: float = 1.0) -> None:
    """scancel `job_ids`, tried again when it fails; raises SlurmUnreachable with its words when
    every try failed. A job Slurm no longer knows is not a failure (it has ended)."""
    if not job_ids:
        return
    words = ""
    for i in range(tries):
        try:
            done = _run(["scancel", *job_ids])
        except SlurmUnreachable as exc:
            words = str(exc)
        else:
            words = (done.stderr.strip() or done.stdout.strip())[-300:]
            errors = [line for line in words.splitlines() if line.strip()]
            if done.returncode == 0 or (errors and all("Invalid job id" in line for line in errors)):
                return
        if i + 1 < tries:
            time.sleep(wait_s * (i + 1))
    raise SlurmUnreachable(f"`scancel {' '.join(job_ids)}` failed {tries} times: {words or 'no output'}")


def end_times(job_ids: Sequence[str]) -> dict[str, str]:
    """When Slurm's accounting says each job ended (ISO, with the zone), for jobs that ended; empty
    where the cluster keeps no accounting (sacct then fails or answers nothing), or sacct is absent."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    try:
        done = _run(["sacct", "-n", "-X", "-P", "-j", ",".join(job_ids), "-o", "JobID,End"])
    except SlurmUnreachable:
        return {}
    if done.returncode != 0:
        return {}
    found = {}
    for line in done.stdout.splitlines():
        job_id, _, end = line.strip().partition("|")
        try:  # sacct prints the controller's local time, without a zone: this machine's clock zone
            found[job_id] = datetime.fromisoformat(end).astimezone(timezone.utc).isoformat(timespec="milliseconds")
        except ValueError:  # "Unknown": still running
            continue
    return found


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


def default_partition() -> Optional[str]:
    """The partition sbatch uses for a job that names none (sinfo marks it with `*`); None: none is."""
    done = _run(["sinfo", "-h", "-o", "%P"])
    if done.returncode != 0:
        raise SlurmUnreachable(f"sinfo failed: {done.stderr.strip()[-300:]}")
    marked = [line.strip()[:-1] for line in done.stdout.splitlines() if line.strip().endswith("*")]
    return marked[0] if marked else None


def partitions() -> list[str]:
    done = _run(["sinfo", "-h", "-o", "%R"])
    if done.returncode != 0:
        raise SlurmUnreachable(f"the Slurm controller did not answer sinfo: {done.stderr.strip()[-300:]}")
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]
