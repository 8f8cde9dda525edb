"""The Ray log tail against a real websocket server on loopback speaking the tail endpoint's way:
the log from its first byte, in chunks, as it grows; dropped streams; the outputs marker."""

from __future__ import annotations

import threading
import time

import pytest
from websockets.sync.server import serve

from engine.runs.executors.ray_logs import LogTail

MARKER = "# rlvr-run: outputs-begin"


class TailServer:
    """Serves `log` in `chunk`-character messages; closes a stream after `drop_after` messages
    (the first `drops` streams only), like a head restarting; counts streams opened."""

    def __init__(self, log: str, *, chunk: int = 7, drop_after: int = 0, drops: int = 0, delay_s: float = 0.0):
        self.log, self.chunk, self.drop_after, self.drops, self.delay_s = log, chunk, drop_after, drops, delay_s
        self.streams, self.paths, self.headers = 0, [], []
        self._closing = threading.Event()
        self._server = serve(self._handle, "127.0.0.1", 0)
        self.url = f"ws://127.0.0.1:{self._server.socket.getsockname()[1]}/api/jobs/j/logs/tail"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _handle(self, ws):
        self.streams += 1
        self.paths.append(ws.request.path)
        self.headers.append(ws.request.headers.get("Authorization"))
        drop = self.streams <= self.drops
        for n, i in enumerate(range(0, len(self.log), self.chunk)):
            if drop and n == self.drop_after:
                return  # the stream ends mid-log
            ws.send(self.log[i:i + self.chunk])
            time.sleep(self.delay_s)
        self._closing.wait(30)  # a live job: the stream stays open, nothing more to say

    def close(self):
        self._closing.set()
        self._server.shutdown()


@pytest.fixture
def served():
    servers = []

    def make(log, **kw):
        servers.append(TailServer(log, **kw))
        return servers[-1]
    yield make
    for server in servers:
        server.close()


def _follow(server, path, until, **kw):
    tail = LogTail(url=server.url, log_path=path, stop_marker=MARKER, retry_s=0.1, **kw).start()
    deadline = time.monotonic() + 20
    while not until() and time.monotonic() < deadline:
        time.sleep(0.05)
    return tail.stop()


def test_whole_lines_arrive_as_printed_and_a_half_line_waits(served, tmp_path):
    log = "".join(f"step {k} of 40 loss {1 / (k + 1):.4f}\n" for k in range(40)) + "half a li"
    server = served(log, chunk=11, delay_s=0.002)
    path = tmp_path / "attempt-1.log"
    written = _follow(server, path, lambda: path.exists() and "step 39" in path.read_text(),
                      headers={"Authorization": "Bearer t0k"})
    assert path.read_text() == log[: log.rindex("\n") + 1] and written == len(path.read_text())
    assert server.paths == ["/api/jobs/j/logs/tail"] and server.headers == ["Bearer t0k"]


def test_a_dropped_stream_reopens_and_nothing_is_lost_or_doubled(served, tmp_path):
    log = "".join(f"line {k}\n" for k in range(200))
    server = served(log, chunk=13, drop_after=17, drops=3)
    path = tmp_path / "attempt-1.log"
    written = _follow(server, path, lambda: path.exists() and "line 199\n" in path.read_text())
    assert server.streams == 4
    assert path.read_text() == log and written == len(log)


def test_the_outputs_tarball_and_the_blank_line_before_it_never_reach_the_attempt_log(served, tmp_path):
    body = "Running entrypoint\nwork done\n"
    log = body + "\n" + MARKER + " abc123\n" + "QUJD" * 5000 + "\n# rlvr-run: outputs-end\n"
    server = served(log, chunk=5)
    path = tmp_path / "attempt-1.log"
    path.write_text("# rlvr-run: header\n")
    tail = LogTail(url=server.url, log_path=path, stop_marker=MARKER, retry_s=0.1).start()
    deadline = time.monotonic() + 20
    while server.streams < 1 or (tail.written < len(body) and time.monotonic() < deadline):
        time.sleep(0.05)
    time.sleep(0.3)  # the rest of the stream arrives; nothing of it may be written
    assert tail.stop() == len(body)
    assert path.read_text() == "# rlvr-run: header\n" + body


def test_a_tail_that_cannot_connect_keeps_trying_and_stops_when_told(tmp_path):
    path = tmp_path / "attempt-1.log"
    tail = LogTail(url="ws://127.0.0.1:9/api/jobs/j/logs/tail", log_path=path, stop_marker=MARKER,
                   retry_s=0.05, open_timeout_s=0.5).start()
    time.sleep(0.3)
    assert tail.stop(timeout_s=3) == 0 and not tail._thread.is_alive()
    assert tail.last_error and not path.exists()


def test_once_stop_returns_the_tail_writes_nothing_more(served, tmp_path):
    """A stop whose join times out while the thread is still taking a chunk (a stalled disk, a
    starved thread): the attempt log holds what stop() returned and never more, for the final copy
    appends from there (else the chunk would be in the attempt log twice)."""
    log = "line 1\nline 2\n"
    server = served(log, chunk=len(log))
    path = tmp_path / "attempt-1.log"
    taking = threading.Event()

    class SlowTail(LogTail):
        def _take(self, chunk):
            taking.set()
            time.sleep(0.5)
            super()._take(chunk)

    tail = SlowTail(url=server.url, log_path=path, stop_marker=MARKER, retry_s=0.1).start()
    assert taking.wait(10)
    written = tail.stop(timeout_s=0.05)
    tail._thread.join(5)
    assert not tail._thread.is_alive()
    assert (path.read_text() if path.exists() else "") == log[:written]


def test_a_run_failed_for_an_unreachable_cluster_leaves_no_tail_behind(tmp_path):
    from engine.runs.executors.base import Job
    from engine.runs.executors.ray import RayExecutor

    executor = RayExecutor(address="http://127.0.0.1:9", shared_dir=tmp_path, unreachable_after_s=0.0,
                           log_retry_s=0.05, timeout_s=0.5)
    job = Job(id="r", run_dir=tmp_path / "r", kind="sft")
    started = executor._started(job, 1, tmp_path / "r" / "logs" / "attempt-1.log", "rlvr-r-a1")
    tail = started.handle.tail
    (tmp_path / "r" / "logs").mkdir(parents=True)
    deadline = time.monotonic() + 10
    while not tail.last_error and time.monotonic() < deadline:  # its first connect has failed
        time.sleep(0.02)
    assert executor.poll(started) == 1 and "unreachable" in started.detail
    assert not tail._thread.is_alive() and executor._tails == set()
    executor.close()
    # the attempt log says why nothing of the job showed while it ran
    assert "live log stream never opened (" in (tmp_path / "r" / "logs" / "attempt-1.log").read_text()


def test_an_upper_case_address_still_gives_a_valid_stream_url(tmp_path):
    from engine.runs.executors.base import Job
    from engine.runs.executors.ray import RayExecutor

    executor = RayExecutor(address="HTTPS://head:8265/", shared_dir=tmp_path)
    started = executor._started(Job(id="r", run_dir=tmp_path / "r", kind="sft"), 1,
                                tmp_path / "r" / "logs" / "attempt-1.log", "rlvr-r-a1")
    assert started.handle.tail.url == "wss://head:8265/api/jobs/rlvr-r-a1/logs/tail"
    executor.close()
