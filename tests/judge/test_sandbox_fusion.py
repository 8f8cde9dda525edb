"""The `sandbox_fusion` backend against a local HTTP server speaking SandboxFusion's schema.

Every test here talks to `tests/judge/sandbox_fusion_server.py`: a stdlib HTTP
server on 127.0.0.1 (ephemeral port) that implements `POST /run_code` with the
documented request/response schema and really runs the code in a subprocess, so
verdicts are real; failure modes (HTTP 5xx, SandboxError, slow answers) are
scripted per request. No real SandboxFusion is contacted.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

import pytest

from engine.judge.sandbox_fusion import (
    RunCodeRequest,
    SandboxFusionClient,
    SandboxFusionSettings,
)

_SERVER_FILE = Path(__file__).with_name("sandbox_fusion_server.py")


def _load_server_module():
    spec = importlib.util.spec_from_file_location("sandbox_fusion_server", _SERVER_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sandbox_fusion_server", module)
    spec.loader.exec_module(module)
    return module


server_mod = _load_server_module()


@pytest.fixture
def server():
    with server_mod.SandboxFusionServer() as s:
        yield s


def _client(url: str, **kw) -> SandboxFusionClient:
    settings = SandboxFusionSettings(url=url, backoff_s=0.01, backoff_max_s=0.05, **kw)
    return SandboxFusionClient(settings)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _req(code: str, stdin: str = "", timeout: float = 5.0) -> RunCodeRequest:
    return RunCodeRequest(code=code, stdin=stdin, compile_timeout=timeout, run_timeout=timeout, memory_limit_MB=512)


# ---------------------------------------------------------------- client: transport and retries


def test_client_runs_code_on_local_server(server):
    """Local test server (documented schema, real subprocess): a plain run comes back Finished."""
    client = _client(server.url)
    outcome = client.run_code(_req("print(input()[::-1])", stdin="abc\n"))
    assert outcome.error is None and outcome.attempts == 1
    assert outcome.response.status == "Success"
    assert outcome.response.run_result.status == "Finished"
    assert outcome.response.run_result.stdout == "cba\n"
    assert server.requests[0]["language"] == "python" and server.requests[0]["memory_limit_MB"] == 512


def test_url_may_name_the_endpoint_or_the_base(server):
    """Local test server: verl's convention (URL ending in /run_code) and a bare base URL both work."""
    for url in (server.url, server.url + "/run_code", server.url + "/"):
        assert _client(url).run_code(_req("print(1)")).response.status == "Success"


def test_connection_refused_is_an_error_after_bounded_retries():
    """No server at all (a closed loopback port): bounded retries, then an error with the reason."""
    client = _client(f"http://127.0.0.1:{_free_port()}", attempts=3)
    outcome = client.run_code(_req("print(1)"))
    assert outcome.response is None
    assert outcome.attempts == 3
    assert "connection error" in outcome.error and "after 3 attempts" in outcome.error


def test_503_twice_then_ok_is_retried_with_backoff(server):
    """Local test server scripted to answer HTTP 503 twice, then run the code: the third try wins."""
    server.script.extend([("http", 503), ("http", 503)])
    waits: list[float] = []
    client = SandboxFusionClient(SandboxFusionSettings(url=server.url, backoff_s=0.01, backoff_max_s=1), sleep=waits.append)
    outcome = client.run_code(_req("print(42)"))
    assert outcome.response.run_result.stdout == "42\n"
    assert outcome.attempts == 3
    assert waits == [0.01, 0.02]  # exponential backoff


def test_always_500_gives_up(server):
    """Local test server scripted to answer HTTP 500 forever: the client stops at `attempts`."""
    server.default = ("http", 500)
    outcome = _client(server.url, attempts=4).run_code(_req("print(1)"))
    assert outcome.response is None and outcome.attempts == 4
    assert "HTTP 500" in outcome.error
    assert len(server.requests) == 4


def test_4xx_is_not_retried(server):
    """Local test server scripted to answer HTTP 422: a client-side problem, no retry."""
    server.script.append(("http", 422))
    outcome = _client(server.url).run_code(_req("print(1)"))
    assert outcome.response is None and outcome.attempts == 1 and "HTTP 422" in outcome.error


def test_sandbox_error_is_retried_then_reported(server):
    """Local test server scripted to answer SandboxError: retried, then reported with its message."""
    server.script.append(("sandbox_error",))
    assert _client(server.url).run_code(_req("print(1)")).response.status == "Success"
    server.default = ("sandbox_error",)
    outcome = _client(server.url, attempts=2).run_code(_req("print(1)"))
    assert outcome.response is None and "SandboxError: scripted sandbox failure" in outcome.error


def test_slow_answer_past_the_client_timeout_is_an_error(server):
    """Local test server scripted to answer after 3 s; the client's HTTP timeout is 1.5 s; no retry."""
    server.default = ("sleep", 3.0)
    client = _client(server.url, http_slack_s=0.5)
    outcome = client.run_code(_req("print(1)", timeout=0.5))
    assert outcome.response is None and outcome.attempts == 1
    assert "no answer within" in outcome.error
