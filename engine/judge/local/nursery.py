"""The nursery: a child of the worker, made before any job, that forks every runner (so no runner
ever holds a job's expected side) and reaps them.
"""

from __future__ import annotations

import gc
import json
import mmap
import os
import resource
import select
import signal
import socket
import struct

from engine.judge.local import limits, sandbox
from engine.judge.local.process import exited, kill_group
from engine.judge.local.jobs import JobBuffer
from engine.judge.local.runner import Runner
from engine.judge.local.wire import write_all

# ---------------------------------------------------------------- worker side (trusted)


class Nursery:
    """Forks every runner, from a process that never holds a sample's expected answers.

    Forked from the worker at start-up, before any job, so its memory is the small pre-warmed
    interpreter and nothing else; a runner that died mid-suite is restarted from here, not from
    the worker (which by then holds the secret side of the job). It ends a runner when the
    worker asks (wall guard, early decision) and reports each runner's exit status and resource
    usage; the worker never learns a runner's pid, so it cannot signal a process that pid was
    recycled to, and is woken once per runner.
    """

    def __init__(self, iso: sandbox.Isolation, workdir: str, close_in_child: tuple[int, ...]) -> None:
        # Shared with every runner (inherited, not passed): which test runs and the CPU used before it.
        self.progress = mmap.mmap(-1, mmap.PAGESIZE)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        job_r, self.job_w = os.pipe()
        # The nursery is the init of a PID namespace in which every runner's own one nests: when it
        # dies, however it dies, the kernel kills them all, so runners need no parent-death signal.
        sandbox.nursery_pid_namespace(iso)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                os.close(self.job_w)
                for fd in close_in_child:
                    os.close(fd)
                limits.die_with_parent()
                limits.set_name(b"judge-nursery")
                sandbox.adopt_pid_namespace(iso)
                sandbox.lock_filesystem(iso, workdir)
                limits.PROCESS_BOUND[0] = limits.choose_process_bound(
                    sandbox_uid=iso.uid is not None, userns=iso.userns, pidns=iso.pidns)
                theirs.send(json.dumps({"proc": iso.proc, "read_only": iso.read_only, "notes": iso.notes,
                                        "procs": limits.PROCESS_BOUND[0]}).encode())
                sandbox.lock_down_descendants()
                _scrub_environment(workdir)
                _nursery_loop(theirs, job_r, workdir, iso, self.progress)
            finally:
                os._exit(0)
        sandbox.forked(iso)
        theirs.close()
        os.close(job_r)
        ready = self.sock.recv(1 << 16)  # what the nursery obtained for its runners
        if not ready:
            raise NurseryDied(f"the sandbox nursery {self.pid} died while starting")
        state = json.loads(ready)
        iso.proc, iso.read_only, iso.notes = state["proc"], state["read_only"], state["notes"]
        iso.procs = state["procs"]

    def spawn(self, start: int, fds: list[int], raw_job: bytes | None) -> None:
        """Start a runner at test position `start`; `raw_job` is sent with a sample's first runner
        (a resumed runner reuses the one the nursery holds)."""
        try:
            socket.send_fds(self.sock, [_SPAWN.pack(start, len(raw_job or b""))], fds)
            if raw_job:
                write_all(self.job_w, raw_job)
        except OSError as exc:
            raise NurseryDied(f"the sandbox nursery {self.pid} is gone ({exc})") from exc

    def kill(self) -> None:
        """End the current runner; a request that arrives after it ended is ignored."""
        try:
            self.sock.send(_KILL)
        except OSError as exc:
            raise NurseryDied(f"the sandbox nursery {self.pid} is gone ({exc})") from exc

    def reaped(self) -> dict:
        status, rss_kb, cpu = _REAPED.unpack(self._answer(_REAPED.size))
        return {"status": status, "rss_kb": rss_kb, "cpu": cpu}

    def _answer(self, size: int) -> bytes:
        data = self.sock.recv(size)
        if len(data) != size:
            raise NurseryDied(f"the sandbox nursery {self.pid} died")
        return data


_SPAWN = struct.Struct("<iQ")  # test position to start from, length of the job that follows (0: same job)


_KILL = b"k"


_REAPED = struct.Struct("<iqd")  # wait status, peak RSS kB, CPU seconds


class NurseryDied(RuntimeError):
    """The worker cannot start runners any more: it exits, and the judge replaces it."""


def _scrub_environment(workdir: str) -> None:
    """Every runner's environment, set once here (the work directory's path never changes)."""
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=workdir, TMPDIR=workdir,
                      LANG="C.UTF-8", PYTHONIOENCODING="utf-8")


def _nursery_loop(sock: socket.socket, job_r: int, workdir: str, iso: sandbox.Isolation,
                  progress: mmap.mmap) -> None:
    # Nothing the nursery holds is ever garbage: keep every runner's collector off those pages.
    gc.freeze()
    # The job stays raw bytes here and is parsed in the runner: every page the nursery writes is
    # a copy-on-write fault while a runner shares it (parsing here cost ≈ 100 faults per sample).
    job = JobBuffer()
    reset_dumpable = sandbox.runner_needs_dumpable_reset()
    while True:
        data, fds, _, _ = socket.recv_fds(sock, _SPAWN.size, 8)
        if data == _KILL:
            continue  # for a runner that had already ended
        if len(data) != _SPAWN.size:
            return
        start, size = _SPAWN.unpack(data)
        if size and not job.load(job_r, size):
            return
        sandbox.new_pid_namespace(iso)
        pid = os.fork()
        if pid == 0:
            _become_runner(job, workdir, fds, start, iso, progress, reset_dumpable)
        sandbox.forked(iso)
        for fd in fds:
            os.close(fd)
        _until_exit(sock, pid)
        _, status, usage = os.wait4(pid, 0)
        sock.send(_REAPED.pack(status, usage.ru_maxrss, usage.ru_utime + usage.ru_stime))


def _until_exit(sock: socket.socket, pid: int) -> None:
    """Wait for the runner to end, killing it (and its process group) when the worker asks or goes
    away. The runner is not reaped yet, so its pid cannot have been recycled."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # before Linux 5.3: poll
        pidfd = None
    watched = [sock.fileno()] + ([pidfd] if pidfd is not None else [])
    try:
        while True:
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.002)
            if pidfd in ready or (pidfd is None and exited(pid)):
                return
            if sock.fileno() in ready:
                request = sock.recv(_SPAWN.size)
                if request != _KILL:
                    watched.remove(sock.fileno())  # the worker is gone
                kill_group(pid)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _become_runner(jobs: JobBuffer, workdir: str, fds: list[int], start: int, iso: sandbox.Isolation,
                   progress: mmap.mmap, reset_dumpable: bool) -> None:
    """In the fresh PID namespace: fds = [result pipe, stdout file, stderr file]. No ctypes call
    here unless a fallback needs one (see `sandbox.lock_down_descendants`); `ps` shows runners
    as the nursery's children, under its name."""
    try:
        job = jobs.head()
        wfd, out_fd, err_fd = fds
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(out_fd if job["mode"] == "function" else devnull, 1)
        os.dup2(err_fd if job["mode"] == "function" else devnull, 2)
        os.closerange(3, wfd)
        os.closerange(wfd + 1, 65536)
        os.chdir(workdir)
        limits.drop_privileges(iso.uid, reset_dumpable=reset_dumpable, drop_capabilities=iso.userns)
        if not iso.pidns:  # else the nursery's namespace ends every runner with it
            limits.die_with_parent()  # after the uid change, which clears it
        bounds = job["limits"]
        # The program's own limits are set in the program's processes (`limits.program_limits`).
        limits.runner_limits(bounds)
        # Python's SIGINT handler would let a program's process raise KeyboardInterrupt here
        # (signals reach a namespace's init only where it has a handler).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # Loading the program gets one test's budget; each test then raises the soft limit by its
        # own budget (function mode) or runs in a child with its own limit (stdio mode).
        budget = int(bounds["cpu_s"] * (len(job["order"]) + 2)) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (int(bounds["cpu_s"]) + 2, budget))
        Runner(jobs, wfd, iso.pidns, start=start, progress=progress).main()
    finally:
        os._exit(0)
