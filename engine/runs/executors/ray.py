"""Run launch scripts as Ray jobs on a Ray cluster, through the Ray Jobs REST API.

Each attempt is one job, submitted with the run's CPUs and GPUs as entrypoint
resources so Ray places it, and named `rlvr-<run id>-a<attempt>`: the name is
fixed before submission, so a runner that dies at any point finds its attempt
again by name and never submits it twice.

The run directories reach the jobs one of two ways. On storage every node mounts
at the same path (`shared_dir`), the runner reads outputs, runs completion checks
and writes lineage there, as with the local executor. Without it (`shared_dir`
None), each attempt uploads its run directory as the job's working_dir, and the
job's entrypoint prints the directory back as a base64 tarball between two marker
lines at the end of its log, which the runner unpacks when the job ends: the logs
API is the one channel from the cluster back to the runner that every Ray cluster
has, and it survives the runner (a restarted runner still gets the outputs).

The REST API (httpx) rather than `ray.job_submission`: the runner then needs no
Ray driver state, and the auth header is explicit. Ray 2.60 turns token auth on
whenever a token file exists, so the token is always sent when one is configured.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import httpx

from engine.errors import UserError
from engine.runs.executors.base import RUN_ID_ENV, Job, Started
from engine.runs.executors.ray_logs import LogTail
from engine.runs.executors.ray_package import (
    OUTPUTS_BEGIN,
    WORKING_DIR_ENTRYPOINT,
    shown_part,
    unpack_outputs,
    zip_run_dir,
)
from engine.runs.lineage import RunRecord, now_iso

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Passed from the runner's environment to every job (Ray gives jobs the raylet's environment).
FORWARDED_ENV = ("PYTHONPATH", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
FORWARDED_PREFIX = "RLVR_"


class RayUnreachable(ConnectionError):
    """The cluster did not answer; an OSError, so the scheduler fails the run it was starting."""


class RayRefused(OSError):
    """The cluster answered no to a submission or an upload (the run it was starting fails)."""


def auth_token_from_env(env: Optional[dict[str, str]] = None) -> Optional[str]:
    """The token Ray's own clients would send: `RAY_AUTH_TOKEN`, else the file `RAY_AUTH_TOKEN_PATH`
    or `~/.ray/auth_token`, when `RAY_AUTH_MODE=token`; None otherwise."""
    env = os.environ if env is None else env
    if env.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    if env.get("RAY_AUTH_TOKEN"):
        return env["RAY_AUTH_TOKEN"].strip()
    path = Path(env.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise UserError(f"RAY_AUTH_MODE=token but the token file {path} cannot be read: {exc}") from exc


@dataclass(kw_only=True)
class _Tracked:
    submission_id: str
    log_chars: int = 0  # how much of the job's log is already in the attempt log
    tail: Optional[LogTail] = None  # follows the job's log into the attempt log while it runs
    next_status_at: float = 0.0
    unreachable_since: Optional[float] = None
    last_error: str = ""


@dataclass(kw_only=True)
class RayExecutor:
    groups = False  # one Ray job per run (its working_dir carries one run directory)
    address: str  # the dashboard's HTTP address, e.g. http://head:8265
    shared_dir: Optional[Path]  # where run directories live on every node; None: sent as working_dir
    auth_token: Optional[str] = None
    python: str = field(default_factory=lambda: sys.executable)  # the interpreter jobs run (a shared venv)
    status_every_s: float = 0.5
    log_retry_s: float = 2.0  # a dropped log stream is opened again after this pause
    unreachable_after_s: float = 60.0  # a cluster silent this long fails the runs it holds
    timeout_s: float = 10.0
    _client: httpx.Client = field(init=False, repr=False)
    _cluster_gpus: Optional[float] = field(init=False, default=None, repr=False)
    _tails: set[LogTail] = field(init=False, default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.address = self.address.rstrip("/")
        if "://" not in self.address:
            self.address = f"http://{self.address}"
        scheme, _, rest = self.address.partition("://")
        self.address = f"{scheme.lower()}://{rest}"  # the log stream's ws(s):// is derived from it
        self.shared_dir = Path(self.shared_dir).resolve() if self.shared_dir is not None else None
        self._headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
        self._client = httpx.Client(base_url=self.address, headers=self._headers, timeout=self.timeout_s)

    # ------------------------------------------------------------ cluster
    def connect(self) -> dict[str, Any]:
        """Check the cluster answers and accepts us; its version. Raises UserError with the fix."""
        try:
            response = self._client.get("/api/version")
        except httpx.TransportError as exc:
            raise UserError(f"the Ray cluster at {self.address} is unreachable: {exc}") from exc
        if response.status_code == 401:
            raise UserError(f"the Ray cluster at {self.address} wants a token: {response.text.strip()[:200]}; "
                            "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to the cluster's token file")
        if response.status_code != 200:
            raise UserError(f"{self.address} is not a Ray dashboard: GET /api/version answered "
                            f"{response.status_code} {response.text.strip()[:200]}")
        return response.json()

    def cluster_gpus(self) -> int:
        """GPUs the cluster has in total (what a run may ask for at most)."""
        if self._cluster_gpus is None:
            usage = self._get("/api/cluster_status").json()["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
            self._cluster_gpus = float(usage.get("GPU", [0.0, 0.0])[1])
        return int(self._cluster_gpus)

    def close(self) -> None:
        for tail in self._tails:
            tail.request_stop()  # all at once: each may wait out a connect timeout
        for tail in list(self._tails):
            tail.stop()
        self._client.close()

    # ------------------------------------------------------------ protocol
    def refusal(self, job: Job) -> Optional[str]:
        if not job.launch_script.is_file():
            return f"no launch script at {job.launch_script}"
        if self.shared_dir is not None and not job.run_dir.resolve().is_relative_to(self.shared_dir):
            return f"its run directory {job.run_dir} is not under the shared directory {self.shared_dir}"
        if job.gpus > self.cluster_gpus():
            return f"needs {job.gpus} GPU(s) but the Ray cluster at {self.address} has {self.cluster_gpus()}"
        return None

    def fits(self, job: Job) -> bool:
        return True  # Ray queues a job until its resources are free, and places it

    def start(self, job: Job, *, attempt: int, log_path: Path) -> Started:
        submission_id = submission_id_of(job.id, attempt)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "x") as log:  # "x": an earlier attempt's log is never truncated
            log.write(f"# rlvr-run: {job.id} attempt {attempt} submitted from {socket.gethostname()} at "
                      f"{now_iso()} as Ray job {submission_id} to {self.address}; cpus={job.cpus} gpus={job.gpus}\n")
        runtime_env: dict[str, Any] = {"env_vars": self._env(job, attempt)}
        entrypoint = f"bash {shlex.quote(str(job.launch_script))}"
        if self.shared_dir is None:
            runtime_env["working_dir"] = self._upload(job.run_dir, submission_id)
            entrypoint = WORKING_DIR_ENTRYPOINT
        body = {
            "entrypoint": entrypoint,
            "submission_id": submission_id,
            "entrypoint_num_cpus": max(job.cpus, 1),
            "entrypoint_num_gpus": job.gpus,
            "runtime_env": runtime_env,
            "metadata": {"rlvr_run_id": job.id, "rlvr_attempt": str(attempt)},
        }
        self._send("post", "/api/jobs/", f"Ray refused job {submission_id}", json=body)
        return self._started(job, attempt, log_path, submission_id)

    def _upload(self, run_dir: Path, submission_id: str) -> str:
        """The run directory as a package in the cluster's GCS; its URI, for the job's working_dir."""
        data = zip_run_dir(run_dir, submission_id)
        name = f"_ray_pkg_{hashlib.sha256(data).hexdigest()[:32]}.zip"
        self._send("put", f"/api/packages/gcs/{name}", f"Ray refused the upload of {run_dir} ({len(data)} bytes)",
                   content=data)
        return f"gcs://{name}"

    def _send(self, method: str, path: str, refused: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise RayUnreachable(f"the Ray cluster at {self.address} is unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise RayRefused(f"{refused}: {response.status_code} {response.text.strip()[-300:]}")
        return response

    def poll(self, started: Started) -> Optional[int]:
        tracked: _Tracked = started.handle
        now = time.monotonic()
        if now < tracked.next_status_at:
            return None
        tracked.next_status_at = now + self.status_every_s
        try:
            info, text = self._look(started, tracked, now)
        except httpx.HTTPError as exc:  # unreachable, or a head answering 5xx while it restarts
            return self._unreachable(started, tracked, exc)
        tracked.unreachable_since = None
        if info is None:
            self._stop_tail(tracked)
            started.detail = f"Ray job {tracked.submission_id} vanished from the cluster (head restarted?)"
            return 1
        if info["status"] not in TERMINAL:
            return None
        code = _exit_code(started, info)
        if self.shared_dir is None:
            problem = unpack_outputs(text, started.job.run_dir)
            # A job that failed or was stopped often never got to print its outputs: no news there.
            if problem and code == 0:
                started.detail = f"no outputs came back from Ray job {tracked.submission_id}: {problem}"
        return code

    def _look(self, started: Started, tracked: _Tracked, now: float) -> tuple[Optional[dict[str, Any]], str]:
        """The job's status (None: unknown to the cluster) and, once it ended, its whole log (while
        it runs, its tail thread keeps the attempt log up to date)."""
        info = self._job(tracked.submission_id)
        if info is None:
            return None, ""
        if info["status"] in TERMINAL:
            self._stop_tail(tracked)
            return info, self._copy_logs(started, tracked)
        return info, ""

    def stop(self, running: list[Started], *, grace_s: float) -> None:
        for started in running:
            try:
                self._client.post(f"/api/jobs/{started.job_id}/stop")
            except httpx.TransportError:
                continue  # an unreachable cluster cannot be told; the reason says so
        deadline = time.monotonic() + grace_s
        for started in running:
            while time.monotonic() < deadline:
                try:
                    info = self._job(started.job_id)
                except httpx.HTTPError:  # unreachable, or a head answering 5xx: stop waiting for it
                    break
                if info is None or info["status"] in TERMINAL:
                    break
                time.sleep(0.2)
        for started in running:
            if started.handle.tail is not None:
                started.handle.tail.request_stop()
        for started in running:
            self._stop_tail(started.handle)
            try:
                self._copy_logs(started, started.handle)
            except httpx.HTTPError:
                pass

    def reattach(self, record: RunRecord, job: Job, *, log_path: Path) -> Optional[Started]:
        submission_id = record.job_id or submission_id_of(record.id, record.attempt)
        try:
            info = self._job(submission_id)
        except httpx.TransportError as exc:
            raise UserError(f"run {record.id} was left running on the Ray cluster at {self.address}, "
                            f"which is unreachable ({exc}); start the runner again once it answers") from exc
        if info is None:
            return None
        # The whole job log is copied again after one header line, so nothing is lost or doubled.
        header = log_path.read_text().splitlines()[0] if log_path.is_file() else f"# rlvr-run: {record.id}"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"{header}\n# rlvr-run: re-attached to Ray job {submission_id} "
                            f"({info['status']}) from {socket.gethostname()} at {now_iso()}\n")
        return self._started(job, record.attempt, log_path, submission_id)

    def reap(self, record: RunRecord, *, grace_s: float) -> int:
        return 0  # `reattach` found no job: there is nothing on the cluster to stop

    # ------------------------------------------------------------ helpers
    def _started(self, job: Job, attempt: int, log_path: Path, submission_id: str) -> Started:
        ws_address = "ws" + self.address.removeprefix("http")  # http→ws, https→wss
        tail = LogTail(url=f"{ws_address}/api/jobs/{submission_id}/logs/tail", log_path=log_path,
                       stop_marker=OUTPUTS_BEGIN, headers=self._headers, retry_s=self.log_retry_s,
                       open_timeout_s=self.timeout_s)
        self._tails.add(tail.start())
        return Started(job=job, attempt=attempt, pid=None, log_path=log_path, job_id=submission_id,
                       handle=_Tracked(submission_id=submission_id, tail=tail))

    def _stop_tail(self, tracked: _Tracked) -> None:
        """Stop following the job's log; the final copy appends only what the stream had not brought."""
        tail = tracked.tail
        if tail is None:
            return
        tracked.log_chars = tail.stop()
        self._tails.discard(tail)
        tracked.tail = None
        if not tail.written and tail.last_error and "ConnectionClosedOK" not in tail.last_error:
            try:
                with open(tail.log_path, "a") as log:  # why nothing showed while the job ran
                    log.write(f"# rlvr-run: the job's live log stream never opened ({tail.last_error}); "
                              "its log is copied when the job ends\n")
            except OSError:
                pass  # a note only: the job's fate does not hang on it

    def _env(self, job: Job, attempt: int) -> dict[str, str]:
        forwarded = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV or k.startswith(FORWARDED_PREFIX)}
        cpus = str(max(job.cpus, 1))
        # As many math threads as CPUs held, said outright as the other executors do: Ray gives a
        # job its own count only when the head's environment has none (a head started from a shell
        # with OMP_NUM_THREADS=1, or by a process ray.init touched, passes that one to every job).
        return {**forwarded, RUN_ID_ENV: job.id, "RLVR_ATTEMPT": str(attempt), "RLVR_CPUS": cpus,
                "OMP_NUM_THREADS": cpus, "MKL_NUM_THREADS": cpus, "RLVR_PYTHON": self.python}

    def _get(self, path: str) -> httpx.Response:
        response = self._client.get(path)
        response.raise_for_status()
        return response

    def _job(self, submission_id: Optional[str]) -> Optional[dict[str, Any]]:
        response = self._client.get(f"/api/jobs/{submission_id}")
        if response.status_code == 404 or "does not exist" in response.text[:200]:
            return None
        response.raise_for_status()
        return response.json()

    def _copy_logs(self, started: Started, tracked: _Tracked) -> str:
        """Append what the job printed and the attempt log lacks; the whole job log."""
        text = self._get(f"/api/jobs/{tracked.submission_id}/logs").json().get("logs", "")
        shown = shown_part(text)
        if len(shown) > tracked.log_chars:
            with open(started.log_path, "a") as log:
                log.write(shown[tracked.log_chars:])
            tracked.log_chars = len(shown)
        return text

    def _unreachable(self, started: Started, tracked: _Tracked, exc: Exception) -> Optional[int]:
        now = time.monotonic()
        tracked.unreachable_since = tracked.unreachable_since or now
        if now - tracked.unreachable_since < self.unreachable_after_s:
            return None
        self._stop_tail(tracked)  # the run fails: its log is followed no more
        started.detail = (f"the Ray cluster at {self.address} was unreachable for {self.unreachable_after_s:.0f} s "
                          f"({exc}); Ray job {tracked.submission_id}'s fate is unknown")
        return 1


def submission_id_of(run_id: str, attempt: int) -> str:
    return f"rlvr-{run_id}-a{attempt}"


def _exit_code(started: Started, info: dict[str, Any]) -> int:
    status = info["status"]
    if status == "SUCCEEDED":
        return 0
    message = (info.get("message") or "").strip().splitlines()
    summary = f"Ray job {info.get('submission_id')} {status}"
    if info.get("error_type"):
        summary += f" [{info['error_type']}]"
    if message:
        summary += f": {message[0][:200]}"
    started.detail = summary
    if status == "STOPPED":
        return -int(signal.SIGTERM)
    code = info.get("driver_exit_code")
    return int(code) if isinstance(code, int) and code != 0 else 1
