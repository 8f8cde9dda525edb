"""The `sandbox_fusion` backend against a local HTTP server speaking SandboxFusion's schema.

Every test here talks to `tests/judge/sandbox_fusion_server.py`: a stdlib HTTP
server on 127.0.0.1 (ephemeral port) that implements `POST /run_code` with the
documented request/response schema and really runs the code in a subprocess, so
verdicts are real; failure modes (HTTP 5xx, SandboxError, slow answers) are
scripted per request. No real SandboxFusion is contacted.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.judge.remote.client import (
    RunCodeRequest,
    SandboxFusionClient,
    SandboxFusionSettings,
)
from engine.retry import RetryPolicy


@pytest.fixture
def server(sf_server_module):
    with sf_server_module.SandboxFusionServer() as s:
        yield s


def _client(url: str, attempts: int = 4, **kw) -> SandboxFusionClient:
    retry = RetryPolicy(attempts=attempts, first_wait_s=0.01, max_wait_s=0.05)
    return SandboxFusionClient(SandboxFusionSettings(url=url, retry=retry, **kw))


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
    retry = RetryPolicy(first_wait_s=0.01, max_wait_s=1)
    client = SandboxFusionClient(SandboxFusionSettings(url=server.url, retry=retry), sleep=waits.append)
    outcome = client.run_code(_req("print(42)"))
    assert outcome.response.run_result.stdout == "42\n"
    assert outcome.attempts == 3
    assert len(waits) == 2 and 0 <= waits[0] <= 0.01 and 0 <= waits[1] <= 0.02  # jittered exponential backoff


def test_429_with_retry_after_waits_what_the_server_asks(server):
    """Local test server scripted to answer HTTP 429 with `Retry-After: 2`, then run the code."""
    server.script.append(("http", 429, {"Retry-After": "2"}))
    waits: list[float] = []
    retry = RetryPolicy(first_wait_s=0.01, max_wait_s=0.05)
    client = SandboxFusionClient(SandboxFusionSettings(url=server.url, retry=retry), sleep=waits.append)
    outcome = client.run_code(_req("print(42)"))
    assert outcome.response.run_result.stdout == "42\n" and outcome.attempts == 2
    assert waits == [2.0]  # the server's word, not the (much shorter) backoff


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


# ---------------------------------------------------------------- backend: verdicts through Judge

from engine.judge.api import Judge, JudgeConfig  # noqa: E402
from engine.judge.verdict import Verdict  # noqa: E402
from engine.problem import FunctionTests, Problem, StdioTest  # noqa: E402

ADD = Problem(
    id="toy/add", source="toy", split="test", kind="function", statement="add two numbers", entry_point="add",
    function_tests=FunctionTests(
        setup="import math",
        asserts=["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert not add(0, 0)",
                 "assert math.isclose(add(0.1, 0.2), 0.3)"],
    ),
)
SUM = Problem(
    id="toy/sum", source="toy", split="test", kind="stdio", statement="sum of a line", time_limit_s=2.0,
    stdio_tests=[StdioTest(input="1 2\n", output="3\n"), StdioTest(input="5 5\n", output="10\n"),
                 StdioTest(input="0 7\n", output="7\n")],
)


@pytest.fixture
def remote(server):
    config = JudgeConfig(backend="sandbox_fusion", url=server.url, workers=4, timeout_s=2.0, memory_mb=256, cache=False)
    with Judge(config) as judge:
        yield judge


def _fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.mark.parametrize(
    ("code", "verdict", "passed"),
    [
        ("def add(a, b):\n    return a + b", Verdict.ACCEPTED, 4),
        ("def add(a, b):\n    return a - b", Verdict.WRONG_ANSWER, 1),  # only `not add(0, 0)` holds
        ("import os\nos._exit(0)", Verdict.RUNTIME_ERROR, 0),  # exit code 0 is never a pass
        ("def add(a, b):\n    import sys; sys.exit(0)", Verdict.RUNTIME_ERROR, 0),
        ("class E:\n    def __eq__(s, o): return True\n    def __bool__(s): return True\n"
         "def add(a, b):\n    return E()", Verdict.WRONG_ANSWER, 0),  # always-equal object
        ("import builtins\nbuiltins.AssertionError = SystemExit\ndef add(a, b):\n    return 0", Verdict.WRONG_ANSWER, 1),
        ("def add(a, b)\n    return a + b", Verdict.SYNTAX_ERROR, 0),
        ("def add(a, b):\n    return [0] * (10 ** 9)", Verdict.MEMORY_LIMIT, 0),
        ("def add(a, b):\n    while True: pass", Verdict.TIMEOUT, 0),
        ("def add(a, b):\n    return {}[a]", Verdict.RUNTIME_ERROR, 0),
    ],
)
def test_function_verdicts(remote, code, verdict, passed):
    """Local test server running the code for real: function tests judged per assert, compared here."""
    result = remote.judge(ADD, _fenced(code))
    assert (result.verdict, result.passed, result.total) == (verdict, passed, 4)
    assert result.accepted == (verdict is Verdict.ACCEPTED)


SETS = Problem(id="toy/sets", source="toy", split="test", kind="function", statement="", entry_point="f",
               function_tests=FunctionTests(asserts=["assert set(f(3)) == set([1, 2, 3])"]))


def test_a_program_binding_builtin_names_decides_nothing_remotely(remote):
    """A program's own `set` would otherwise be called on both sides of the assert."""
    forged = remote.judge(SETS, _fenced("def set(*a):\n    return 0\ndef f(n):\n    return None"))
    assert forged.verdict is Verdict.RUNTIME_ERROR and not forged.accepted
    assert remote.judge(SETS, _fenced("def f(n):\n    return list(range(1, n + 1))")).accepted


# A program that looks for the harness's reporter (its frames, every object in its process) and
# reports its tests as passed, in the report format of this harness and of the one before it.
FORGER = """import gc, os, sys
def _forge():
    seen = []
    frame = sys._getframe()
    while frame is not None:
        seen.extend(frame.f_locals.values())
        frame = frame.f_back
    for o in seen + gc.get_objects():
        try:
            if hasattr(o, "nonce") and callable(getattr(o, "send", None)):
                o.send(["ok"])
                o.send(["values", {"0": {"v": 3}}, {"1": {"v": 3}}])
                os._exit(0)
            if callable(o) and getattr(o, "__name__", "") == "emit":
                o(("ok", "exec"))
                os._exit(0)
        except Exception:
            pass
_forge()
def add(a, b):
    return 0
"""
CHECKED = Problem(id="toy/checked", source="toy", split="test", kind="function", statement="", entry_point="add",
                  function_tests=FunctionTests(candidate="candidate", check=(
                      "def check(candidate):\n    import fractions\n"
                      "    for i in range(3):\n        assert candidate(i, 1) == i + 1\n")))
LITERAL = Problem(id="toy/literal", source="toy", split="test", kind="function", statement="", entry_point="add",
                  function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(2, 2) == 4"]))


@pytest.mark.parametrize("problem", [CHECKED, LITERAL, ADD], ids=lambda p: p.id)
def test_a_program_that_finds_the_reporter_passes_nothing(remote, problem):
    """Local test server, code run for real. The tests run apart from the program, whatever their
    shape (a check function, literal asserts, computed operands): it never holds the nonce."""
    forged = remote.judge(problem, _fenced(FORGER))
    plainly_wrong = remote.judge(problem, _fenced("def add(a, b):\n    return 0"))
    assert not forged.accepted and forged.passed == plainly_wrong.passed  # ADD's `not add(0, 0)` holds for 0
    assert remote.judge(problem, _fenced("def add(a, b):\n    return a + b")).accepted


@pytest.mark.parametrize(("code", "verdict"), [
    ("import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return a + b",
     Verdict.RUNTIME_ERROR),  # kills the tests' process: no report
    ("def add(a, b):\n    import os\n    os._exit(0)", Verdict.RUNTIME_ERROR),  # ends mid-call
    ("import os\nos.write(1, b'not an answer\\n')\ndef add(a, b):\n    return a + b", Verdict.ACCEPTED),  # its own stdout
    ("def add(a, b):\n    import time\n    time.sleep(60)", Verdict.TIMEOUT),
    ("def add(a, b):\n    return lambda: 0", Verdict.WRONG_ANSWER),  # no plain value to send back
])
def test_the_programs_process_ending_or_stalling_fails_the_test(remote, code, verdict):
    """Local test server: tests run apart (CHECKED) and the program's process ends, stalls or writes."""
    assert remote.judge(CHECKED, _fenced(code)).verdict is verdict


def test_a_remote_verdict_leaves_the_shared_plan_as_the_local_backend_sends_it(remote):
    """Local test server, then the local backend in the same process: plans are cached per process
    and sent to local workers as they are, so deciding a remote unit must not change one."""
    assert not remote.judge(LITERAL, _fenced("def add(a, b):\n    return 0")).accepted
    with Judge(JudgeConfig(cache=False, workers=1)) as local:
        assert local.judge(LITERAL, _fenced("def add(a, b):\n    return a + b")).accepted


PEEKER = """import os, re
def add(a, b):
    parent, nonces = os.getppid(), set()
    try:
        mem = open(f"/proc/{parent}/mem", "rb")
        for line in open(f"/proc/{parent}/maps"):
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if "rw" in perms and hi - lo < 1 << 26:
                try:
                    mem.seek(lo)
                    nonces.update(re.findall(rb"[0-9a-f]{32}", mem.read(hi - lo)))
                except OSError:
                    pass
    except OSError:
        pass
    for fd in os.listdir(f"/proc/{parent}/fd") if os.access(f"/proc/{parent}/fd", os.R_OK) else ():
        try:
            out = os.open(f"/proc/{parent}/fd/{fd}", os.O_WRONLY)
        except OSError:
            continue
        for nonce in nonces:
            os.write(out, nonce + b' ["ok"]\\n')
    return a + b + 1
"""


def test_the_programs_process_cannot_read_the_tests_process(remote):
    """Local test server, which runs code as this test's user (root here, with CAP_SYS_PTRACE): the
    program's process gives up root and the tests' process is non-dumpable, so the nonce in the
    tests' memory and their stdout stay out of reach."""
    result = remote.judge(CHECKED, _fenced(PEEKER))
    assert result.verdict is Verdict.WRONG_ANSWER and not result.accepted


PAIRS = Problem(id="toy/pairs", source="toy", split="test", kind="function", statement="", entry_point="longest",
                function_tests=FunctionTests(asserts=["assert longest([Pair(5, 24), Pair(15, 25), Pair(27, 40)]) == 24"]))


def test_objects_of_the_programs_classes_still_reach_its_function(remote):
    """Local test server: the tests build the program's objects (MBPP's Pair problems) as handles
    to objects in the program's process, and pass them back to its function."""
    code = ("class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
            "def longest(pairs):\n    return max(p.b for p in pairs) - min(p.a for p in pairs) - 11\n")
    assert remote.judge(PAIRS, _fenced(code)).accepted


def test_a_builtin_type_reaches_the_programs_function(remote):
    """Local test server: a builtin type the tests pass crosses by name (MBPP 533)."""
    problem = Problem(id="toy/types", source="toy", split="test", kind="function", statement="", entry_point="keep",
                      function_tests=FunctionTests(asserts=["assert keep((1, 'a', 2.5), int) == [1]"]))
    code = "def keep(xs, t):\n    return [x for x in xs if isinstance(x, t)]\n"
    assert remote.judge(problem, _fenced(code)).accepted


def test_the_tests_process_imports_nothing_from_the_work_directory(tmp_path):
    """No server: the harness's own module-path rule, run as SandboxFusion runs it (`python main.py`
    in a directory the program's process could write a `fractions.py` into)."""
    from engine.judge.remote import program as remote_program

    (tmp_path / "fractions.py").write_text("raise SystemExit('imported from the work directory')\n")
    source = Path(remote_program.__file__).read_text()
    (tmp_path / "main.py").write_text(source + "\n_close_module_path([])\nimport fractions\nprint(fractions.__file__)\n")
    done = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert str(tmp_path) not in done.stdout


def test_stdio_verdicts_use_the_judge_comparator(remote):
    """Local test server running the code for real: stdout compared token-wise in our process."""
    ok = remote.judge(SUM, _fenced("a, b = map(int, input().split())\nprint(a + b, end='  \\n\\n')"))
    assert ok.verdict is Verdict.ACCEPTED and ok.pass_ratio == 1.0
    partial = remote.judge(SUM, _fenced("a, b = map(int, input().split())\nprint(a + b if a else 0)"))
    assert partial.verdict is Verdict.WRONG_ANSWER and partial.passed == 2
    assert partial.failures[0].index == 2 and partial.failures[0].expected == "7\n" and partial.failures[0].got == "0\n"
    slow = remote.judge(SUM, _fenced("while True: pass"))
    assert slow.verdict is Verdict.TIMEOUT
    crash = remote.judge(SUM, _fenced("raise ValueError('boom')"))
    assert crash.verdict is Verdict.RUNTIME_ERROR and "ValueError: boom" in crash.stderr_tail


def test_sparse_stops_at_the_first_failure(remote, server):
    """Local test server: with stop_on_first_failure, tests after a failure are not all sent."""
    remote.judge(SUM, _fenced("print(0)"), stop_on_first_failure=True)
    # the first test fails; the pool (4 workers) may already have started the others, never more
    assert len(server.requests) <= 3
    result = remote.judge(SUM, _fenced("print(0)"), stop_on_first_failure=True)
    assert result.accepted is False and result.verdict is Verdict.WRONG_ANSWER


def test_concurrency_is_bounded(server):
    """Local test server counting requests in flight: never more than `workers` at once."""
    server.default = ("sleep", 0.2)
    problem = SUM.model_copy(update={"stdio_tests": SUM.stdio_tests * 4})
    config = JudgeConfig(backend="sandbox_fusion", url=server.url, workers=3, cache=False)
    with Judge(config) as judge:
        programs = [_fenced(f"print(sum(map(int, input().split())))  # variant {i}") for i in range(3)]
        results = judge.judge_many([(problem, program) for program in programs])
    assert all(r.accepted for r in results)
    assert len(server.requests) == 36 and server.max_in_flight == 3


def test_server_down_is_internal_error_never_the_models():
    """No server (closed loopback port): every sample is INTERNAL_ERROR with the reason."""
    config = JudgeConfig(backend="sandbox_fusion", url=f"http://127.0.0.1:{_free_port()}", workers=2)
    with Judge(config) as judge:
        judge.backend.runner.client.settings.backoff_s = 0.01
        result = judge.judge(ADD, _fenced("def add(a, b):\n    return a + b"))
    assert result.verdict is Verdict.INTERNAL_ERROR and not result.accepted
    assert "connection error" in result.message


def test_sandbox_error_is_internal_error(server):
    """Local test server scripted to answer SandboxError forever: INTERNAL_ERROR, not a wrong answer."""
    server.default = ("sandbox_error",)
    config = JudgeConfig(backend="sandbox_fusion", url=server.url, workers=2)
    with Judge(config) as judge:
        judge.backend.runner.client.settings.backoff_s = 0.01
        result = judge.judge(SUM, _fenced("print(3)"))
        assert result.verdict is Verdict.INTERNAL_ERROR and "SandboxError" in result.message
        server.default = ("run",)  # a fault is not cached: the same sample is judged again
        assert judge.judge(SUM, _fenced("a, b = map(int, input().split())\nprint(a + b)")).accepted


def test_missing_url_is_a_user_error():
    """No server involved: the backend refuses to start without a URL."""
    from engine.errors import UserError

    with pytest.raises(UserError, match="needs a url"):
        Judge(JudgeConfig(backend="sandbox_fusion"))


def test_the_programs_process_never_holds_the_tests(remote, table_from_memory):
    """Local test server: the tests reach the tests' process on stdin after the program's process
    is forked, never in the request's code (a file the program can read, and constants of the
    module it was forked in). Before, this program was ACCEPTED."""
    assert remote.judge(table_from_memory.problem, _fenced(table_from_memory.program)).verdict is Verdict.WRONG_ANSWER
    assert remote.judge(table_from_memory.problem, _fenced(table_from_memory.honest)).accepted


def test_a_program_cannot_claim_a_judge_fault_remotely(remote):
    """The program's process answers a call with the judge's own failure kind: before, a wrong
    answer became INTERNAL_ERROR (never scored); its failure is its own."""
    claim = ("import json\ndef add(a, b):\n    raise ValueError\n_real = json.dumps\n"
             "json.dumps = lambda o, *a, **k: _real({'x': {'error': 'judge', 'msg': 'x'}} "
             "if isinstance(o, dict) and 'x' in o else o, *a, **k)\n")
    result = remote.judge(CHECKED, _fenced(claim))
    assert not result.accepted and result.verdict is not Verdict.INTERNAL_ERROR, result
