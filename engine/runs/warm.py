"""A warm interpreter for local launch scripts: torch and transformers imported once, forked per command.

Most of a small evaluation or trl run on a CPU is starting Python and importing torch,
transformers and trl (seconds), not its work. The local executor starts one `WarmServer`
per runner; its launch scripts' `"$RLVR_PYTHON" -m engine.<module> ...` then reach it
through `engine.runs.warm_client`, and it forks a child that becomes that command: the
client's stdin/stdout/stderr, argv, environment and working directory, its own session
(process group), `runpy` of the module as `__main__`, and Python's own exit (non-daemon
threads joined, atexit handlers run, open files flushed). The server reports each child's exit status (or the
signal that killed it) to its client and kills what the child left in its group, as the
executor does for a script's group.

What keeps a fork the same command as a cold start:
- the server preloads only imports; it runs no torch op (no OpenMP pool, no CUDA), and it
  refuses to serve when an import left a Python thread running (a fork would copy a lock it
  might hold). The native threads torch and pyarrow start at import (a signal thread,
  jemalloc's background thread) are fork-safe by their own atfork handlers, as torch's
  DataLoader relies on when it forks workers;
- a request whose environment differs from the server's in anything but the per-run
  variables (`_PER_RUN`) is refused, because libraries read theirs at import time; the
  client then runs cold;
- the child reseeds Python's and numpy's global generators from the OS (a fork would share
  them) and sizes torch's and every native thread pool from its own OMP_NUM_THREADS;
- the server alone (one thread, never blocked by a child) acts on a client: it forks only on
  the client's `go` (a client that gave up waiting ran cold), sends its forwarded
  SIGTERM/SIGINT/SIGHUP to the child's group, and kills that group when the client's
  connection closes (SIGKILL of the script's group); a child dies with the server, and the
  server's children with the runner.
"""

from __future__ import annotations

import array
import contextlib
import gc
import importlib
import json
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from engine.runs.executors.base import run_environment
from engine.runs.warm_child import become, leave, print_failure

# Imported once in the server: the heavy part of every eval and trl command's start.
PRELOAD = ("threadpoolctl", "torch", "transformers", "engine.cli", "engine.cli.evaluate", "engine.evaluate.backends.hf",
           "engine.train.sft", "engine.train.grpo", "engine.train.dpo", "engine.train.raft", "engine.train.repair")
# Set per run by the executor or the launch script; nothing imported reads them at import time.
_PER_RUN = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS", "PWD", "OLDPWD", "SHLVL", "_"})
OFF_ENV = "RLVR_WARM"  # "0": every command starts cold
CLIENT = Path(__file__).with_name("warm_client.py")


def _differs(env: dict[str, str], base: dict[str, str]) -> list[str]:
    names = set(env) | set(base)
    return sorted(n for n in names if env.get(n) != base.get(n) and n not in _PER_RUN and not n.startswith("RLVR_"))


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    if len(data) < 8:
        raise ValueError("short request")
    size = int.from_bytes(data[:8], "big")
    body = bytearray(data[8:])
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ValueError("request cut short")
        body += chunk
    return json.loads(body), list(fds)


def _send(conn: socket.socket, message: dict) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """The server's process: bind first (clients queue while the imports run), preload, serve
    until stdin closes (the runner is gone), then kill and reap what still runs."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    refused: Optional[str] = None
    base = dict(os.environ)
    try:
        for name in preload:
            importlib.import_module(name)
    except Exception as err:  # noqa: BLE001 - any failure only means cold starts, said to each client
        refused = f"the warm server could not import {name}: {type(err).__name__}: {err}"
    if refused is None and threading.active_count() > 1:
        refused = "the warm server's imports started a Python thread; a fork could copy a lock it holds"
    # What the imports set in the environment (torch's KMP_* and inductor cache folder): a cold
    # start's imports set them too, so each child gets them on top of its own.
    imported_env = {name: value for name, value in os.environ.items() if base.get(name) != value}
    gc.freeze()  # the imports' objects: never scanned again, so a child does not copy their pages
    _Server(listener, base, imported_env, refused).run()
    shutil.rmtree(Path(path).parent, ignore_errors=True)  # the socket and the shim


@dataclass
class _Client:
    conn: socket.socket
    request: dict
    fds: list[int]
    pid: Optional[int] = None  # its command's, once forked
    buf: bytes = b""


class _Server:
    """One thread, one selector: clients are accepted, told `ready`, forked on their `go` (a
    client that gave up waiting has gone cold and closed instead: nothing runs twice), their
    forwarded signals sent to their command's group, their command's group killed when they
    vanish, and each command's end reported to its client."""

    def __init__(self, listener: socket.socket, base: dict, imported_env: dict, refused: Optional[str]) -> None:
        self.listener, self.base, self.imported_env, self.refused = listener, base, imported_env, refused
        self.clients: dict[socket.socket, _Client] = {}
        self.running: dict[int, _Client] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "child")
        self.selector.register(sys.stdin, selectors.EVENT_READ, "runner")

    def run(self) -> None:
        serving = True
        while serving or self.running:
            for key, _ in self.selector.select(timeout=5.0):
                if key.data == "runner" and not os.read(sys.stdin.fileno(), 4096):
                    serving = False
                    self._stop()
                elif key.data == "accept" and serving:
                    self._accept()
                elif key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif isinstance(key.data, _Client):
                    self._read(key.data)
            self._reap()

    def _stop(self) -> None:
        """The runner is gone: no command of its outlives it (its scripts are reaped and rerun)."""
        self.selector.unregister(sys.stdin)
        self.selector.unregister(self.listener)
        self.listener.close()
        for client in list(self.clients.values()):
            if client.pid is None:
                self._drop(client)
            else:
                _kill(client.pid, signal.SIGKILL)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10.0)
            request, fds = _recv_request(conn)
            conn.settimeout(None)
            why = self.refused
            if why is None and len(fds) != 3:
                why = "stdin/stdout/stderr not received"
            if why is None and (names := _differs(request["env"], self.base)):
                why = f"its environment differs from the warm server's in {', '.join(names[:5])}"
        except (OSError, ValueError, KeyError, TypeError) as err:
            why = f"bad request: {err}"
        if why is not None:
            _send(conn, {"refused": why})
            _close(conn, fds)
            return
        client = _Client(conn=conn, request=request, fds=fds)
        self.clients[conn] = client
        self.selector.register(conn, selectors.EVENT_READ, client)
        _send(conn, {"ready": True})

    def _read(self, client: _Client) -> None:
        try:
            chunk = client.conn.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:
            # Its client is gone: before `go`, nothing ran; after, its script's group was killed.
            if client.pid is None:
                self._drop(client)
            else:
                self.selector.unregister(client.conn)
                _kill(client.pid, signal.SIGKILL)
            return
        client.buf += chunk
        while b"\n" in client.buf:
            line, _, client.buf = client.buf.partition(b"\n")
            if client.pid is None:
                if line == b"go":
                    self._fork(client)
            elif line.isdigit():
                _kill(client.pid, int(line))

    def _fork(self, client: _Client) -> None:
        pid = os.fork()
        if pid == 0:
            code: object = 1
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (self.listener.fileno(), self.wake_r, self.wake_w, self.selector.fileno(),
                           *(c.fileno() for c in self.clients)):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                request = {**client.request, "env": {**self.imported_env, **client.request["env"]}}
                become(request, client.fds)
                code = 0
            except SystemExit as done:
                code = done.code
            except BaseException as err:  # noqa: BLE001 - the command's own failure, shown as python would
                print_failure(err)
                if isinstance(err, KeyboardInterrupt):
                    leave(1, signum=signal.SIGINT)  # python's exit on Ctrl-C: killed by SIGINT
            leave(code)
        client.pid = pid
        self.running[pid] = client
        for fd in client.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        client.fds = []
        _send(client.conn, {"pid": pid})

    def _drop(self, client: _Client) -> None:
        self.clients.pop(client.conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(client.conn)
        _close(client.conn, client.fds)

    def _reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            client = self.running.pop(pid, None)
            _kill(pid, signal.SIGKILL)  # what the command left in its group goes, as with a script's
            if client is not None:
                _send(client.conn, {"exit": _exit_code(status)})
                self._drop(client)


def _kill(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(group, sig)


def _close(conn: socket.socket, fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    conn.close()


class WarmServer:
    """One warm server for this runner's local launch scripts; `python` is their RLVR_PYTHON.
    It serves `-m` of the modules under `prefixes` and imports `preload` first (tests: less)."""

    def __init__(self, *, prefixes: tuple[str, ...] = ("engine.",), preload: tuple[str, ...] = PRELOAD) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="rlvr-warm-"))  # 0700: only this user connects
        socket_path = self._dir / "socket"
        if len(os.fsencode(socket_path)) > 107:  # a Unix socket's path limit
            shutil.rmtree(self._dir, ignore_errors=True)
            raise OSError(f"the warm server's socket path is too long: {socket_path}")
        self.python = str(self._dir / "python")
        shim = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(CLIENT))} " \
               f"{shlex.quote(str(socket_path))} {shlex.quote(','.join(prefixes))} \"$@\"\n"
        Path(self.python).write_text(shim)
        os.chmod(self.python, 0o700)
        # Its own session: the runner's Ctrl-C reaches the runner, which stops the scripts (their
        # commands with them). Its stdin is its lifeline: closed, it kills what still runs and exits.
        self._process = subprocess.Popen(
            [sys.executable, "-m", "engine.runs.warm", str(socket_path), *preload],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # No GPU, ever: a CUDA driver started before a fork is unusable after it; only the
            # executor's CPU-only jobs (CUDA_VISIBLE_DEVICES="") come here.
            env={**run_environment(os.environ), "CUDA_VISIBLE_DEVICES": ""}, start_new_session=True, cwd=self._dir,
        )
        # Bound before its imports: from then on a client queues instead of starting cold.
        deadline = time.monotonic() + 30.0
        while not socket_path.exists() and self._process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        """Stop serving: what still runs is killed (the executor has ended its scripts by then)."""
        if self._process.stdin is not None:
            self._process.stdin.close()


def enabled() -> bool:
    return os.environ.get(OFF_ENV, "1") != "0" and sys.platform == "linux"


if __name__ == "__main__":
    serve(sys.argv[1], tuple(sys.argv[2:]))
