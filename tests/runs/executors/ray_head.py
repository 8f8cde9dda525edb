"""A real single-node Ray head on loopback for tests and benches, and its clean removal.

`ray stop` stops every Ray process of the machine (other users' heads included), so
the head's processes are found by a marker in their environment and stopped by pid.
The settings are the ones measured on this machine: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
keeps every socket on 127.0.0.1, and an explicit token auth mode with our own token
file keeps a stray ~/.ray/auth_token from deciding for us.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import psutil

MARKER = "RLVR_TEST_RAY_HEAD"
PORT_FLAGS = ("--port", "--dashboard-port", "--node-manager-port", "--object-manager-port",
              "--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
              "--runtime-env-agent-port", "--metrics-export-port")


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(kw_only=True)
class LoopbackHead:
    root: Path  # the head's temp dir and token live here
    cpus: int = 2

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_path = self.root / "token"
        self.token_path.write_text(secrets.token_hex(32))
        # Ray's session folder holds AF_UNIX sockets (107 bytes at most): a pytest temp path under
        # xdist (`/tmp/pytest-of-root/pytest-283/popen-gw0/...`) is too long, so the head's own
        # folder is a short one straight under the system temp dir.
        self.ray_dir = Path(tempfile.mkdtemp(prefix="rlvr-ray-"))
        self.ports = {flag: _free_port() for flag in PORT_FLAGS}
        self.address = f"http://127.0.0.1:{self.ports['--dashboard-port']}"

    @property
    def client_env(self) -> dict[str, str]:
        """What a runner needs to talk to this head."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}

    def start(self) -> None:
        # OMP_NUM_THREADS=1, as a head started by a process that ray.init touched has it: every job
        # would inherit it unless the executor says each job's own count (tests check OMP=cpus)
        env = {**os.environ, **self.client_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", MARKER: str(self.root),
               "OMP_NUM_THREADS": "1"}
        env.pop("RAY_AUTH_TOKEN", None)
        ports = [f"{flag}={port}" for flag, port in self.ports.items()]
        worker_port = _free_port()
        command = [str(Path(sys.executable).parent / "ray"), "start", "--head", f"--num-cpus={self.cpus}", "--num-gpus=0",
                   "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
                   "--disable-usage-stats", f"--temp-dir={self.ray_dir}", *ports,
                   f"--min-worker-port={worker_port}", f"--max-worker-port={worker_port + 50}"]
        done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
        if done.returncode:
            tail = done.stderr.decode("utf-8", "replace")[-4000:]
            raise RuntimeError(f"`ray start --head` exited {done.returncode}:\n{tail}")

    def processes(self) -> list[psutil.Process]:
        """The head's processes: those with our marker, their descendants, and any holding a file in
        our temp dir (Ray's agents retitle themselves, which also hides their environment)."""
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            try:
                if proc.environ().get(MARKER) == str(self.root) or self._holds_our_files(proc):
                    found[proc.pid] = proc
                    found.update({child.pid: child for child in proc.children(recursive=True)})
            except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        found.pop(os.getpid(), None)
        return list(found.values())

    def _holds_our_files(self, proc: psutil.Process) -> bool:
        return any(f.path.startswith((str(self.root), str(self.ray_dir))) for f in proc.open_files())

    def stop(self, grace_s: float = 3.0) -> None:  # a test head keeps nothing worth a clean shutdown
        procs = self.processes()
        for proc in procs:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=grace_s)
        shutil.rmtree(self.ray_dir, ignore_errors=True)
