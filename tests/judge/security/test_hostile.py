"""Hostile programs get the right verdict, leave nothing behind, and do not disturb the judge."""

from __future__ import annotations

import glob
import json
import os
import time
import uuid
from pathlib import Path

import psutil
import pytest

from engine.judge.api import Judge, JudgeConfig
from engine.judge.local.spawn import BASE_UID, SLOTS, UID_BLOCKS
from engine.judge.local.sandbox import DATA_ROOTS
from engine.problem import FunctionTests, Problem, StdioTest

ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(-1, 1) == 0",
                                                    "assert add(10, 5) == 15"]))
SUM = Problem(id="toy/sum", source="toy", split="test", kind="stdio", statement="sum",
              stdio_tests=[StdioTest(input="1 2\n", output="3\n"), StdioTest(input="5 6\n", output="11\n")])
# The test data sets inside this clone (tests/conftest.py); the judge must hide them from every sample.
MANIFEST = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "datasets" / "README.md"
assert MANIFEST.is_file()  # a missing file would fail to open anyway and prove nothing
# Only the interpreter's own directory (and the empty directories leading to it) may show.
LIST_DATA_ROOTS = f"""import os, sys
seen = []
for d in {DATA_ROOTS!r}:
    for r, ds, fs in os.walk(d):
        ds[:] = [x for x in ds if not os.path.join(r, x).startswith(sys.base_prefix)]  # not the interpreter's
        seen += [os.path.join(r, f) for f in fs]
assert not seen, seen[:3]
"""
GOOD_ADD = "def add(a, b):\n    return a + b\n"
# The runner's result pipe, as a program finds it: the one pipe among its open files.
RESULT_PIPE = ("import os, stat\nPIPE = [fd for fd in range(3, 256)\n        if os.path.exists(f'/proc/self/fd/{fd}')"
               " and stat.S_ISFIFO(os.fstat(fd).st_mode)][0]\n")
GOOD_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"

# Tests that run code of their own (not a flat list of asserts): they run apart from the program,
# which answers their calls from a child process (engine.judge.local.program.ProgramProcess).
CHECK = Problem(id="toy/add_check", source="toy", split="test", kind="function", statement="add", entry_point="add",
                function_tests=FunctionTests(candidate="candidate", check=(
                    "def check(candidate):\n    for x in range(5):\n        y = 7 * x\n"
                    "        assert candidate(x, y) == x + y\n")))
# Every pipe the program can see gets a well-formed frame claiming every test passed.
FORGE_PASS = ("import json, os, stat, struct\n"
              "def _forge():\n    for fd in range(3, 256):\n        try:\n"
              "            if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
              "                for f in ({'t': 'ready'}, {'t': 'result', 'i': 0, 'ok': True}, {'t': 'end'}):\n"
              "                    b = json.dumps(f).encode()\n                    os.write(fd, struct.pack('>I', len(b)) + b)\n"
              "        except OSError:\n            pass\n")

# Operands computed by the tests' own code from the program's value (they too run apart).
CLOSE = Problem(id="toy/add_close", source="toy", split="test", kind="function", statement="add", entry_point="add",
                function_tests=FunctionTests(setup="import math", asserts=[
                    "assert abs(add(1, 2) - 3) < 1e-9", "assert math.isclose(add(2, 2), math.sqrt(16))"]))
FORGE_FRAMES = FORGE_PASS.replace("for f in ({'t': 'ready'}, {'t': 'result', 'i': 0, 'ok': True}, {'t': 'end'}):",
                                  "for f in FRAMES:")

F, S, C, K = ADD, SUM, CHECK, CLOSE
CASES = [
    ("fork_bomb", F, "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n" + GOOD_ADD,
     {"TIMEOUT", "RUNTIME_ERROR"}),
    ("memory_bomb", F, "def add(a, b):\n    x = bytearray(8 * 1024**3)\n    return a + b\n", {"MEMORY_LIMIT"}),
    ("memory_bomb_list", S, "x = [0] * (10**10)\n", {"MEMORY_LIMIT"}),
    ("infinite_output", S, "while True:\n    print('y' * 1000)\n", {"OUTPUT_LIMIT"}),
    ("sleep_past_limit", S, "import time\ntime.sleep(60)\n", {"TIMEOUT"}),
    ("busy_loop", F, "def add(a, b):\n    while True: pass\n", {"TIMEOUT"}),
    ("busy_loop_stdio", S, "while True: pass\n", {"TIMEOUT"}),
    ("deep_recursion", F, "def add(a, b):\n    return add(a, b)\n", {"RUNTIME_ERROR"}),
    ("write_outside_workdir", F, "open('/etc/judge_pwned', 'w').write('x')\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("write_tmp", F, "open('/tmp/judge_pwned', 'w').write('x')\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("read_judge_files", S, f"print(open({str(MANIFEST)!r}).read()[:10])\n", {"RUNTIME_ERROR"}),
    ("read_real_path_of_judge_files", S, f"print(open({os.path.realpath(MANIFEST)!r}).read()[:10])\n",
     {"RUNTIME_ERROR"}),
    # Data roots are hidden whole (empty), wherever this clone and its data sets live.
    ("list_data_roots", F, LIST_DATA_ROOTS + GOOD_ADD, {"ACCEPTED"}),
    # The sandbox is a fork of the judge's worker, so its modules are loaded; their files stay hidden.
    ("read_own_judge_source", F, "import engine.judge.local.worker as w\nopen(w.__file__).read()\n" + GOOD_ADD,
     {"RUNTIME_ERROR"}),
    ("import_judge_module", F, "import engine.judge.local.pool\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("open_socket", F, "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n" + GOOD_ADD,
     {"RUNTIME_ERROR"}),
    ("daemon_outlives", F, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n    os._exit(0)\n"
     + GOOD_ADD, {"ACCEPTED"}),
    # The parent is outside the PID namespace (getppid() == 0): the kill hits only the sandbox itself.
    ("kill_parent", F, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + GOOD_ADD,
     {"RUNTIME_ERROR", "ACCEPTED"}),
    ("kill_all", S, "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint(3)\n", {"RUNTIME_ERROR", "WRONG_ANSWER"}),
    ("os_exit_before_tests", F, "import os\nos._exit(0)\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("sys_exit_before_tests", F, "import sys\nsys.exit(0)\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("os_exit_in_function", F, "import os\ndef add(a, b):\n    os._exit(0)\n", {"RUNTIME_ERROR"}),
    ("close_pipes", F, "import os\nfor fd in range(3, 256):\n    try: os.close(fd)\n    except OSError: pass\n"
     + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("always_equal", F, "class E:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
     "def add(a, b):\n    return E()\n", {"WRONG_ANSWER"}),
    ("int_subclass", F, "class I(int):\n    def __eq__(self, o): return True\ndef add(a, b):\n    return I(0)\n",
     {"WRONG_ANSWER"}),
    ("patched_builtins", F, "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 0\n"
     "def add(a, b):\n    return 0\n", {"WRONG_ANSWER", "RUNTIME_ERROR"}),
    ("patched_import", F, "import builtins\nbuiltins.__import__ = None\ndef add(a, b):\n    return 0\n",
     {"WRONG_ANSWER", "RUNTIME_ERROR"}),
    ("ignore_sigterm", S, "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
     "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass\n", {"TIMEOUT"}),
    ("threads", F, "import threading\ndef add(a, b):\n    r = []\n    t = threading.Thread(target=lambda: r.append(a + b))\n"
     "    t.start(); t.join()\n    return r[0]\n", {"ACCEPTED"}),
    ("thread_bomb", S, "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(30,)).start()\n",
     {"RUNTIME_ERROR", "TIMEOUT", "MEMORY_LIMIT"}),
    ("huge_int_print", S, "print(7 ** 10**7)\n", {"OUTPUT_LIMIT", "TIMEOUT"}),
    ("stdin_in_function_mode", F, "x = input()\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("large_correct_output", S, "import sys\nsys.stdout.write('1 ' * (256 * 1024))\n", {"WRONG_ANSWER"}),
    ("syntax_error", F, "def add(a, b) return a + b\n", {"SYNTAX_ERROR"}),
    ("forged_frame", F, RESULT_PIPE + "os.write(PIPE, b'\\x00\\x00\\x00\\x0b{\"t\":\"end\"}')\n" + GOOD_ADD,
     {"RUNTIME_ERROR"}),
    ("garbled_frame", F, RESULT_PIPE + "os.write(PIPE, b'\\x00\\x00\\x00\\x05{\"t\":')\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    # A check function decides in the sandbox; a program sharing its process could claim the pass.
    ("check_forged_pass_at_load", C, FORGE_PASS + "_forge()\ndef add(a, b):\n    return 0\n", {"RUNTIME_ERROR"}),
    ("check_forged_pass_in_call", C, FORGE_PASS + "def add(a, b):\n    _forge()\n    os._exit(0)\n", {"RUNTIME_ERROR"}),
    ("check_forged_pass_then_wrong", C, FORGE_PASS + "def add(a, b):\n    _forge()\n    return 0\n",
     {"WRONG_ANSWER", "RUNTIME_ERROR"}),
    ("check_wrong", C, "def add(a, b):\n    return a - b\n", {"WRONG_ANSWER"}),
    ("check_always_equal", C, "class E:\n    def __eq__(self, o): return True\ndef add(a, b):\n    return E()\n",
     {"WRONG_ANSWER"}),
    ("check_busy_loop", C, "def add(a, b):\n    while True: pass\n", {"TIMEOUT"}),
    ("check_sleep", C, "import time\ndef add(a, b):\n    time.sleep(60)\n", {"TIMEOUT"}),
    ("check_busy_loop_at_load", C, "while True: pass\n" + GOOD_ADD, {"TIMEOUT"}),
    ("check_memory_bomb", C, "def add(a, b):\n    x = bytearray(8 * 1024**3)\n    return a + b\n", {"MEMORY_LIMIT"}),
    ("check_os_exit_in_function", C, "import os\ndef add(a, b):\n    os._exit(0)\n", {"RUNTIME_ERROR"}),
    ("check_sys_exit_at_load", C, "import sys\nsys.exit(0)\n" + GOOD_ADD, {"RUNTIME_ERROR"}),
    ("check_kill_parent", C, "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n"
     "    return a + b\n", {"ACCEPTED"}),
    ("check_kill_all", C, "import os, signal\ndef add(a, b):\n    os.kill(-1, signal.SIGKILL)\n", {"RUNTIME_ERROR"}),
    ("check_daemon_outlives", C, "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n"
     "    os._exit(0)\n" + GOOD_ADD, {"ACCEPTED"}),
    ("check_patched_builtins", C, "import builtins\nbuiltins.range = lambda *a: [0]\nbuiltins.isinstance = "
     "lambda *a: True\ndef add(a, b):\n    return 0\n", {"WRONG_ANSWER"}),
    ("check_forged_judge_fault", C, FORGE_PASS.replace("{'t': 'result', 'i': 0, 'ok': True}",
     "{'t': 'result', 'i': 0, 'error': 'judge', 'msg': 'x'}") + "def add(a, b):\n    _forge()\n    return 0\n",
     {"WRONG_ANSWER", "RUNTIME_ERROR"}),
    ("forged_judge_fault", F, RESULT_PIPE + "import json, struct\nb = json.dumps({'t': 'result', 'i': 0, 'error': "
     "'judge', 'msg': 'x'}).encode()\nos.write(PIPE, struct.pack('>I', len(b)) + b)\n" + GOOD_ADD,
     {"RUNTIME_ERROR"}),
    ("forged_ok_results", F, FORGE_FRAMES + "FRAMES = [{'t': 'ready'}] + [{'t': 'result', 'i': k, 'ok': True} "
     "for k in range(3)] + [{'t': 'end'}]\ndef add(a, b):\n    _forge()\n    os._exit(0)\n", {"RUNTIME_ERROR"}),
    ("close_forged_values", K, FORGE_FRAMES + "FRAMES = [{'t': 'ready'}, {'t': 'result', 'i': 0, 'values': {'0': "
     "['f', '0.0']}}, {'t': 'result', 'i': 1, 'values': {'0': True}}, {'t': 'end'}]\ndef add(a, b):\n    _forge()\n"
     "    os._exit(0)\n", {"RUNTIME_ERROR"}),
    ("close_patched_module", K, "import math\ndef add(a, b):\n    math.isclose = lambda *a, **k: True\n"
     "    math.sqrt = lambda v: 0.0\n    return 0\n", {"WRONG_ANSWER"}),
    ("close_wrong", K, "def add(a, b):\n    return a * b\n", {"WRONG_ANSWER"}),
    ("check_garbage_answers", C, "import os\ndef add(a, b):\n    for fd in range(3, 64):\n        try: "
     "os.write(fd, b'\\x00\\x00\\x00\\x02{}')\n        except OSError: pass\n    return a + b\n",
     {"RUNTIME_ERROR", "WRONG_ANSWER"}),
]


def _sandbox_processes(judge: Judge) -> list[psutil.Process]:
    """This judge's sandbox processes still alive after a grace period (a killed namespace exits
    asynchronously): every descendant of its workers but their nurseries, plus orphans adopted by
    the host's init with one of this judge's sandbox uids (as root; in a user namespace the
    sandbox runs as the judge's own uid, and only the process tree tells its processes apart)."""
    deadline = time.monotonic() + 3.0
    while True:
        found = [p for p in _descendants(judge) + _orphans_with_our_uids() if _alive(p)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _descendants(judge: Judge) -> list[psutil.Process]:
    found = []
    for worker in judge.backend._all:
        try:
            tree = psutil.Process(worker.pid).children(recursive=True)
        except psutil.Error:
            continue
        found += [p for p in tree if not _is_nursery(p, worker.pid)]
    return found


def _is_nursery(proc: psutil.Process, worker: int) -> bool:
    try:
        return proc.ppid() == worker and proc.name() == "judge-nursery"
    except psutil.Error:
        return False


def _orphans_with_our_uids() -> list[psutil.Process]:
    if os.geteuid() != 0:
        return []
    ours = range(BASE_UID + (os.getpid() % UID_BLOCKS) * SLOTS, BASE_UID + (os.getpid() % UID_BLOCKS + 1) * SLOTS)
    found = []
    for proc in psutil.process_iter(["uids", "ppid"]):
        uids = proc.info["uids"]
        if uids and uids.real in ours and proc.info["ppid"] == 1:
            found.append(proc)
    return found


# test_unprivileged.py runs this file again as an unprivileged user, with the workers under the
# system interpreter, and compares the verdicts it writes here (JSON) with this run's.
VERDICTS_FILE_ENV, WORKER_PYTHON_ENV = "HOSTILE_VERDICTS_FILE", "HOSTILE_WORKER_PYTHON"
VERDICTS: dict[str, str] = {}


@pytest.fixture(scope="module")
def judge():
    with Judge(JudgeConfig(timeout_s=1.0, wall_timeout_s=3.0, memory_mb=512, max_output_bytes=1024 * 1024,
                           cache=False, workers=2, python=os.environ.get(WORKER_PYTHON_ENV))) as j:
        yield j
        if os.environ.get(VERDICTS_FILE_ENV):
            Path(os.environ[VERDICTS_FILE_ENV]).write_text(json.dumps(
                {"uid": os.geteuid(), "level": j.backend.isolation_level(), "isolation": j.stats()["isolation"],
                 "verdicts": VERDICTS}))


@pytest.mark.parametrize("name,problem,program,allowed", CASES, ids=[c[0] for c in CASES])
def test_hostile_program(judge, name, problem, program, allowed):
    result = judge.judge(problem, program, code_is_program=True)
    VERDICTS[name] = result.verdict.value
    assert result.verdict.value in allowed, (result.verdict, result.message, result.failures[:1])
    if "ACCEPTED" not in allowed:
        assert not result.accepted
    assert not _sandbox_processes(judge), f"{name} left processes behind"
    good = judge.judge(problem, GOOD_SUM if problem is SUM else GOOD_ADD, code_is_program=True)
    assert good.accepted, (name, good)


def test_host_unaffected_and_no_temp_dirs_left(judge):
    judge.judge(ADD, CASES[8][2], code_is_program=True)
    assert not glob.glob("/etc/judge_pwned") and not glob.glob("/tmp/judge_pwned")
    assert not glob.glob("/tmp/judge-[0-9]*")  # work dirs live in the worker's private /tmp, and are removed


def test_isolation_is_reported(judge):
    result = judge.judge(ADD, GOOD_ADD, code_is_program=True)
    assert result.isolation and result.isolation == judge.stats()["isolation"]


_OWNER = """
from engine.judge.api import Judge, JudgeConfig
from engine.problem import Problem, StdioTest
problem = Problem(id="t", source="toy", split="test", kind="stdio", statement="",
                  stdio_tests=[StdioTest(input="1\\n", output="1\\n")] * 30)
judge = Judge(JudgeConfig(timeout_s=5.0, workers=1, cache=False))
judge.stats()
print(judge.backend._all[0].pid, flush=True)
judge.judge(problem, "while True: pass\\n", code_is_program=True)
"""


def test_a_killed_judge_leaves_no_worker_mid_job():
    """A trainer killed while its judge is busy must not leave workers grinding through the job."""
    import subprocess
    import sys

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    try:
        worker = psutil.Process(int(owner.stdout.readline()))
        time.sleep(0.5)  # the job is running
    finally:
        owner.kill()
        owner.wait()
    try:
        worker.wait(timeout=5)
    except psutil.TimeoutExpired:
        worker.kill()
        pytest.fail("the worker kept running its job after the judge died")


def test_a_dead_nursery_is_a_judge_fault_and_its_sample_is_judged_again():
    """Runners are forked by each worker's nursery; if it dies, that job is a judge fault (counted,
    never a model verdict): its worker is replaced and the job judged again there."""
    import os
    import signal

    with Judge(JudgeConfig(timeout_s=1.0, workers=1, cache=False)) as judge:
        assert judge.judge(ADD, GOOD_ADD, code_is_program=True).accepted
        worker = judge.backend._all[0]
        os.kill(psutil.Process(worker.pid).children()[0].pid, signal.SIGKILL)
        time.sleep(0.2)
        hit = judge.judge(ADD, GOOD_ADD + "# 2\n", code_is_program=True)
        assert hit.accepted and judge.stats()["judge_faults"] == 1, hit
        assert judge.judge(ADD, GOOD_ADD + "# 3\n", code_is_program=True).accepted
        assert judge.backend._all[0].pid != worker.pid


# Scans this process's whole memory for a marker that only the *earlier* sample's source contains
# whole: the scan holds its two halves apart (each half sits in its own bytes object), so finding
# them side by side means another sample's program is readable from inside this sandbox.
_SCAN = """
import ctypes
found = False
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
for fields in regions:
    lo, hi = (int(x, 16) for x in fields[0].split("-"))
    if not fields[1].startswith("rw") or found:
        continue  # every writable mapping, private or shared: heaps, arenas, buffers
    data = ctypes.string_at(lo, hi - lo)
    i = data.find(HEAD)
    while i != -1 and not found:
        found = data[i + len(HEAD):i + len(HEAD) + len(TAIL)] == TAIL
        i = data.find(HEAD, i + 1)
def add(a, b):
    return a + b if found else 0
"""


def test_a_sample_cannot_read_an_earlier_samples_program():
    """For RL, an earlier sample of the same prompt is often correct: a later one must not find its
    program (or anything else of it) in the memory its sandbox was forked from."""
    head, tail = "QZXMARK", uuid.uuid4().hex
    earlier = GOOD_ADD + "# padding: a longer job than the later one\n" * 2000 + f"# {head}{tail}\n"
    later = f"HEAD = bytes.fromhex('{head.encode().hex()}')\nTAIL = bytes.fromhex('{tail.encode().hex()}')\n" + _SCAN
    with Judge(JudgeConfig(timeout_s=5.0, memory_mb=1024, workers=1, cache=False)) as judge:
        assert judge.judge(ADD, earlier, code_is_program=True).accepted
        result = judge.judge(ADD, later, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", (result.verdict, result.message, result.failures[:1])


def test_runners_die_with_their_nursery():
    """A runner has no parent-death signal of its own: it lives in a PID namespace nested in the
    nursery's, which the kernel empties when the nursery dies, however it dies."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    with Judge(JudgeConfig(timeout_s=2.0, wall_timeout_s=5.0, workers=1, cache=False)) as judge:
        judge.stats()  # starts the worker
        nursery = psutil.Process(judge.backend._all[0].pid).children()[0]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(judge.judge, ADD, "import time\ntime.sleep(60)\n" + GOOD_ADD, code_is_program=True)
            deadline = time.monotonic() + 10
            while not nursery.children() and time.monotonic() < deadline:
                time.sleep(0.02)
            runner = nursery.children()[0]
            os.kill(nursery.pid, signal.SIGKILL)
            # A judge fault: judged again on a fresh worker, where it sleeps past the wall limit.
            assert pending.result(timeout=30).verdict.value == "TIMEOUT"
            assert judge.stats()["judge_faults"] == 1
        deadline = time.monotonic() + 5
        while _alive(runner) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(runner), "a runner outlived its nursery"


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


_LEAVE_IN_IPC = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(0x5EED, 4096, 0o1666)
if segment >= 0:
    ctypes.memmove(libc.shmat(segment, None, 0), b"ANSWER:3", 8)
libc.mq_open(b"/answers", 0o100 | 2, 0o666, None)
"""

_FIND_IN_IPC = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
segment = libc.shmget(0x5EED, 4096, 0o666)
left = ctypes.string_at(libc.shmat(segment, None, 0), 8) if segment >= 0 else b""
queue = libc.mq_open(b"/answers", 2)
def add(a, b):
    return a + b if left == b"ANSWER:3" or queue >= 0 else 0
"""


def test_samples_cannot_leave_ipc_objects_for_later_samples():
    """Shared memory segments and message queues outlive their process: a sample must not be able
    to leave answers in them for a later sample (of the same prompt, say) to pick up."""
    with Judge(JudgeConfig(timeout_s=5.0, workers=1, cache=False)) as judge:
        assert judge.judge(ADD, _LEAVE_IN_IPC + GOOD_ADD, code_is_program=True).accepted
        result = judge.judge(ADD, _FIND_IN_IPC, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", (result.verdict, result.message)


_LEAVE_IN_KEYRING = """
import ctypes, platform
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(ADD_KEY, b"user", b"answers", b"ANSWER:3", 8, -4)  # the uid's own keyring
"""

_FIND_IN_KEYRING = """
import ctypes, platform
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(KEYCTL, 10, -4, b"user", b"answers", 0)  # KEYCTL_SEARCH
left = ctypes.create_string_buffer(8)
if key > 0:
    libc.syscall(KEYCTL, 11, key, left, 8)  # KEYCTL_READ
def add(a, b):
    return a + b if left.raw == b"ANSWER:3" else 0
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="no syscall table for this machine")
def test_samples_cannot_leave_keys_for_later_samples():
    """The kernel's key store is per uid and outlives processes; the sandbox's seccomp filter
    refuses the key syscalls, so no sample can pass answers to a later one through it."""
    with Judge(JudgeConfig(timeout_s=5.0, workers=1, cache=False)) as judge:
        assert judge.judge(ADD, _LEAVE_IN_KEYRING + GOOD_ADD, code_is_program=True).accepted
        result = judge.judge(ADD, _FIND_IN_KEYRING, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", (result.verdict, result.message)


# The page a runner shares with its worker (which test runs) is the one memory every sandbox of a
# worker maps: a sample must find nothing there from the sample before.
_LEAVE_IN_SHARED_PAGE = """
import ctypes
with open("/proc/self/maps") as maps:
    for line in maps:
        span, perms = line.split()[:2]
        if perms == "rw-s":
            lo, hi = (int(x, 16) for x in span.split("-"))
            ctypes.memmove(hi - 64, b"ANSWER:3", 8)
"""

_FIND_IN_SHARED_PAGE = """
import ctypes
left = []
with open("/proc/self/maps") as maps:
    for line in maps:
        span, perms = line.split()[:2]
        if perms == "rw-s":
            lo, hi = (int(x, 16) for x in span.split("-"))
            left.append(ctypes.string_at(hi - 64, 8))
def add(a, b):
    return a + b if b"ANSWER:3" in left else 0
"""


def test_samples_cannot_leave_answers_in_the_page_they_share_with_the_judge():
    """The worker empties the whole page before each runner, not only the bytes it uses."""
    with Judge(JudgeConfig(timeout_s=5.0, workers=1, cache=False)) as judge:
        assert judge.judge(ADD, _LEAVE_IN_SHARED_PAGE + GOOD_ADD, code_is_program=True).accepted
        result = judge.judge(ADD, _FIND_IN_SHARED_PAGE, code_is_program=True)
    assert result.verdict.value == "WRONG_ANSWER", (result.verdict, result.message)


# A stdio program answers its own input right, forges the report of its test (little CPU, exit 0)
# on every pipe it can find, then runs on past the limit: only the runner may report a test.
_FORGE_REPORT = """
import json, os, stat, struct
a, b = map(int, input().split())
for fd in range(3, 256):
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            for i in range(2):
                body = json.dumps({"t": "done", "i": i, "cpu": 0.01, "wall": 0.01, "rss_kb": 1000,
                                   "wall_killed": False, "stderr_tail": "", "code": 0, "out": f"{a + b}\\n",
                                   "out_truncated": False}).encode()
                os.write(fd, struct.pack(">I", len(body)) + body)
    except OSError:
        pass
while True:
    pass
"""


def test_a_stdio_program_cannot_report_its_own_test(judge):
    result = judge.judge(SUM, _FORGE_REPORT, code_is_program=True)
    assert result.verdict.value == "TIMEOUT" and result.passed == 0, (result.verdict, result.passed, result.message)
