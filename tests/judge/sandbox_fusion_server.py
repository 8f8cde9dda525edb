"""A local stand-in for SandboxFusion's `POST /run_code`, for the client's tests.

It speaks the documented request/response schema (judge-anchors.md §3) and really
runs the code: `python3 <file>` in a temporary directory with the request's
stdin, run timeout and RLIMIT_AS memory limit, stdout/stderr read back, the
process group killed afterwards. Like the real service (isolation `none`), a
non-zero exit or a time-out is `Failed`, and exit code 0 is `Success` even after
`os._exit(0)`. Scripted failure modes (HTTP errors, `SandboxError`, slow answers)
are queued per request. It binds 127.0.0.1 on an ephemeral port only.

Loaded by path from the test modules (pytest runs in importlib mode).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional


def _limit_memory(mb: int):
    def apply() -> None:
        if mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mb * 2**20, mb * 2**20))

    return apply


def run_request(body: dict[str, Any]) -> dict[str, Any]:
    """Run one request's code the way SandboxFusion's python runner does."""
    with tempfile.TemporaryDirectory(prefix="sfusion-") as tmp:
        path = Path(tmp) / "main.py"
        path.write_text(body["code"])
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(path)],
            cwd=tmp,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_limit_memory(int(body.get("memory_limit_MB", -1))),
        )
        status = "Finished"
        try:
            out, err = proc.communicate(body.get("stdin", "").encode(), timeout=float(body["run_timeout"]))
        except subprocess.TimeoutExpired:
            status = "TimeLimitExceeded"
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    code = proc.returncode
    if status == "Finished" and code != 0:
        status = "Error"
    run = {
        "status": status,
        "execution_time": time.monotonic() - start,
        "return_code": code,
        "stdout": out.decode("utf-8", "replace")[: 2**20],
        "stderr": err.decode("utf-8", "replace")[: 2**20],
    }
    ok = status == "Finished"
    return {
        "status": "Success" if ok else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": run,
        "executor_pod_name": None,
        "files": {},
    }


class SandboxFusionServer(ThreadingHTTPServer):
    """`with SandboxFusionServer() as s: s.url` — runs in a daemon thread until closed.

    `script` holds actions for the next requests, consumed one per request:
    ("http", code[, headers]) answers that HTTP status, ("sandbox_error",) answers a
    SandboxError, ("sleep", seconds) waits then runs the code normally.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: deque[tuple] = deque()
        self.default: tuple = ("run",)
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests served at once
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def next_action(self, body: dict[str, Any]) -> tuple:
        with self._lock:
            self.requests.append(body)
            return self.script.popleft() if self.script else self.default

    def track(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def __enter__(self) -> "SandboxFusionServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: SandboxFusionServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        if self.path != "/run_code":
            return self._send(404, {"detail": "Not Found"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        action = self.server.next_action(body)
        # The request stops counting as in flight before its answer is written: once the client has
        # the answer it may send the next request, which must not overlap this one in the count.
        self.server.track(+1)
        try:
            code, payload = self._answer(action, body)
        finally:
            self.server.track(-1)
        self._send(code, payload, action[2] if action[0] == "http" and len(action) > 2 else {})

    def _answer(self, action: tuple, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if action[0] == "http":
            return action[1], {"detail": "scripted failure"}
        if action[0] == "sandbox_error":
            return 200, {"status": "SandboxError", "message": "scripted sandbox failure"}
        if action[0] == "sleep":
            time.sleep(action[1])
        return 200, run_request(body)

    def _send(self, code: int, payload: dict[str, Any], headers: Optional[dict[str, str]] = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (slow-answer tests)
            pass
