"""A real single-node Slurm cluster on localhost for tests: `munged`, `slurmctld` and `slurmd`
started as this user's children from a generated `slurm.conf`, every file in one folder.

Two fake GPUs are declared through `gres.conf` (a count, no device files): Slurm schedules them
like real ones; the toy study needs none. Without accounting storage `sacct` answers nothing,
which is the case the executor is built for (it reads `squeue` and its own exit files).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
INSTALL = "apt-get install -y slurm-wlm munge (Debian/Ubuntu; the CI script does it when it may)"


def missing() -> Optional[str]:
    """Why a local Slurm cannot start here, with the fix; None when it can."""
    absent = [name for name in DAEMONS if shutil.which(name) is None and not Path(f"/usr/sbin/{name}").exists()]
    if absent:
        return f"{', '.join(absent)} not installed: {INSTALL}"
    if os.geteuid() != 0:
        return "a local Slurm cluster for tests runs its daemons as root (SlurmUser=root): run the tests as root"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurm:
    def __init__(self, root: Path, *, gpus: int = 2) -> None:
        self.root = root
        # What slurmd will find: a node configured with more than it has is set INVAL.
        self.cpus = os.cpu_count() or 1
        self.memory_mb = min(4000, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2)
        self.gpus = gpus
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.socket = root / "munge" / "munge.socket"
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, the runner) needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 60.0) -> None:
        self._start_munge()
        self._write_conf()
        env = {**os.environ, **self.env}
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.root / f"{daemon}.out", "wb")
            self.procs.append(subprocess.Popen([_binary(daemon), "-D", "-f", str(self.conf)], env=env,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout_s
        while True:
            state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=env, capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() == "idle":
                return
            dead = [p for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the local Slurm did not come up ({state.stdout.strip()} {state.stderr.strip()}):\n"
                                   + self.logs())
            time.sleep(0.5)

    def _start_munge(self) -> None:
        folder = self.socket.parent
        folder.mkdir(parents=True)
        folder.chmod(0o711)  # munged wants its socket reachable
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run([_binary("munged"), "--force", f"--socket={self.socket}", f"--key-file={key}",
                        f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                        f"--seed-file={folder / 'munged.seed'}"], check=True, capture_output=True)
        self.munged_pid = int((folder / "munged.pid").read_text())

    def _write_conf(self) -> None:
        ctld_port, slurmd_port = _free_port(), _free_port()
        for folder in ("state", "spool"):
            (self.root / folder).mkdir()
        # Slurm counts a GPU per device file; empty files do (nothing opens them: task/none).
        devices = self.root / "devices"
        devices.mkdir()
        files = []
        for index in range(self.gpus):
            (devices / f"gpu{index}").touch()
            files.append(str(devices / f"gpu{index}"))
        (self.root / "gres.conf").write_text(
            "AutoDetect=off\n" + "".join(f"NodeName={self.host} Name=gpu File={f}\n" for f in files))
        self.conf.write_text("\n".join([
            "ClusterName=rlvrtest",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory",
            # A job without --mem would otherwise hold the node's whole memory.
            f"DefMemPerCPU={max(self.memory_mb // (4 * self.cpus), 100)}",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1",
            "MinJobAge=300",
            "KillWait=5",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd.log'}",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} "
            f"Gres=gpu:{self.gpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
            "",
        ]))

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "munge/munged.log"):
            path = self.root / name
            if path.is_file():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def stop(self) -> None:
        env = {**os.environ, **self.env}
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True)
        # scancel only asks: the controller tells slurmd a moment later, and a slurmd stopped before
        # that leaves the job's slurmstepd and script running on the machine. Wait for the jobs to
        # end (KillWait's SIGKILL included) while both daemons still run.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and all(p.poll() is None for p in self.procs):
            left = subprocess.run(["squeue", "-h", "-t", "PD,R,CG,S,CF,ST,SO", "-o", "%i"], env=env,
                                  capture_output=True, text=True)
            if left.returncode != 0 or not left.stdout.strip():
                break
            time.sleep(0.5)
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        if getattr(self, "munged_pid", None):
            try:
                os.kill(self.munged_pid, 15)
            except ProcessLookupError:
                pass
