"""Follow a Ray job's log as it grows, instead of downloading the whole log on every look.

The Ray Jobs API serves a job's log whole (`GET /api/jobs/{id}/logs`) or as a stream over a
websocket (`/api/jobs/{id}/logs/tail`) that starts at the log's first byte and sends what the job
prints as it prints it. One thread per running job follows the stream and appends whole lines to
the attempt log, so the runner's loop never downloads a growing log: a 10-hour training job's log
comes over once, not once every few seconds. The whole log is fetched once more when the job ends
(the outputs tarball travels in it), and only what the stream had not yet delivered is appended.

A dropped stream is opened again after a pause; it starts at the first byte again, and the
characters already written are skipped, so nothing is lost or doubled.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect


@dataclass(kw_only=True, eq=False)  # kept in a set, by identity
class LogTail:
    url: str  # ws(s)://head:8265/api/jobs/{submission_id}/logs/tail
    log_path: Path
    stop_marker: str  # the line that starts what never goes into the attempt log (the outputs tarball)
    headers: dict[str, str] = field(default_factory=dict)
    retry_s: float = 2.0
    open_timeout_s: float = 10.0
    written: int = 0  # characters of the job's log already in the attempt log
    _received: int = field(default=0, init=False)  # characters of the current stream seen
    _pending: str = field(default="", init=False)  # an unfinished line, or blank lines held back
    _ended: bool = field(default=False, init=False)  # the stop marker came: write nothing more
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)  # a write and `written` as one
    _thread: Optional[threading.Thread] = field(default=None, init=False)
    last_error: str = field(default="", init=False)

    def start(self) -> "LogTail":
        self._thread = threading.Thread(target=self._follow, name=f"ray-log-tail:{self.log_path.name}", daemon=True)
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the thread to stop without waiting (to stop many tails at once, then `stop` each)."""
        self._stop.set()

    def stop(self, timeout_s: float = 5.0) -> int:
        """Stop following; the characters of the job's log now in the attempt log. Nothing is written
        after this returns, even where the join timed out: the caller appends the rest from there."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            return self.written

    def _follow(self) -> None:
        while not self._stop.is_set() and not self._ended:
            self._received, self._pending = 0, ""
            try:
                # compression=None: Ray's dashboard (aiohttp) accepts permessage-deflate and then closes
                # the stream without sending a line (Ray 2.60); its own SDK never offers it.
                with connect(self.url, additional_headers=self.headers, open_timeout=self.open_timeout_s,
                             max_size=None, close_timeout=1, compression=None) as ws:
                    while not self._stop.is_set() and not self._ended:
                        try:
                            chunk = ws.recv(timeout=0.5)
                        except TimeoutError:
                            continue
                        self._take(chunk if isinstance(chunk, str) else chunk.decode("utf-8", "replace"))
            except (OSError, WebSocketException, TimeoutError) as exc:  # not started yet, dropped, head restarting
                self.last_error = f"{type(exc).__name__}: {exc}"
            self._stop.wait(self.retry_s)

    def _take(self, chunk: str) -> None:
        """Append the whole lines of the stream past `written`. An unfinished line waits for its end,
        and blank lines wait for a line after them: the outputs tarball's marker follows a blank line
        that the attempt log does not keep (as the runner's final copy does not)."""
        start, self._received = self._received, self._received + len(chunk)
        if self._received <= self.written:
            return  # a reopened stream, still inside what is already written
        text = self._pending + chunk[max(self.written - start, 0):]
        cut = text.find(self.stop_marker)
        if cut >= 0:
            text, self._ended = text[:cut], True
        keep = text[: text.rfind("\n") + 1].rstrip("\n")
        keep = keep + "\n" if keep else ""
        self._pending = "" if self._ended else text[len(keep):]
        if keep:
            with self._lock:
                if self._stop.is_set():
                    return  # stop() has returned `written`, or is about to: the final copy brings the rest
                with open(self.log_path, "a") as log:
                    log.write(keep)
                self.written += len(keep)
