"""The warm server: a command forked from it is the command a cold interpreter would have run.

A real server process (preloading torch only, to keep the test short) and the real client
shim; the commands are a probe module in a temporary folder, forwarded as the project's
own modules are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from engine.runs.executors.base import run_environment
from engine.runs.warm import WarmServer

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the warm server is Linux-only")

PROBE = textwrap.dedent('''
    import os, sys, time, threading
    what = sys.argv[1]
    if what == "report":
        print("argv", sys.argv[1:], "cwd", os.getcwd(), "run", os.environ.get("RLVR_RUN_ID"))
        print("threads", __import__("torch").get_num_threads(), "pid", os.getpid(), os.getpgrp() == os.getpid())
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[2]))
    if what == "raise":
        raise ValueError("the command's own error")
    if what == "sleep":
        open("pid", "w").write(str(os.getpid()))
        signal_seen = []
        import signal
        signal.signal(signal.SIGTERM, lambda *a: (open("got-term", "w").write("1"), sys.exit(3)))
        time.sleep(60)
    if what == "killself":
        os.kill(os.getpid(), 9)
    if what == "leave-open":
        global handle
        handle = open("out.txt", "w")
        handle.write("buffered, never closed")
    if what == "leftover":
        import subprocess
        child = subprocess.Popen(["sleep", "60"])
        open("pid", "w").write(str(child.pid))
    if what == "thread":
        def late():
            time.sleep(0.5)
            open("thread-done", "w").write("1")
        threading.Thread(target=late).start()
    if what == "hold-gil":  # one C call that never lets the GIL go: only the server can kill it
        import re
        open("pid", "w").write(str(os.getpid()))
        re.match(r"(a+)+$", "a" * 40 + "b")
    if what == "ctrl-c":
        raise KeyboardInterrupt
    if what == "blas":
        import threadpoolctl
        print(sorted({pool["num_threads"] for pool in threadpoolctl.threadpool_info()}))
    if what == "random":
        import random
        print(random.random())
''')


@pytest.fixture(scope="module")
def server():
    # pytest's per-test variable would make every later test's environment differ from the server's.
    current = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        warm = WarmServer(prefixes=("warmprobe",), preload=("torch",))
    finally:
        if current is not None:
            os.environ["PYTEST_CURRENT_TEST"] = current
    yield warm
    warm.close()


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "warmprobe.py").write_text(PROBE)
    return tmp_path


def env(**extra):
    """A launch script's environment: the runner's, less what the runner set to quiet itself."""
    base = {name: value for name, value in run_environment(os.environ).items() if name != "PYTEST_CURRENT_TEST"}
    return {**base, "CUDA_VISIBLE_DEVICES": "", **extra}


def run(server, probe, *args, **kw):
    return subprocess.run([server.python, "-m", "warmprobe", *args], cwd=probe, env=env(**kw),
                          capture_output=True, text=True, timeout=120)


def wait_for(path: Path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    time.sleep(0.1)
    return path.read_text()


def test_a_command_runs_in_a_fork_with_the_clients_files_argv_cwd_and_environment(server, probe):
    done = run(server, probe, "report", "7", RLVR_RUN_ID="r1", OMP_NUM_THREADS="1")
    assert done.returncode == 7
    assert f"argv ['report', '7'] cwd {probe} run r1" in done.stdout
    assert "threads 1 " in done.stdout and done.stdout.strip().endswith("True")  # its own group
    assert "to stderr" in done.stderr and "cold start" not in done.stderr
    again = run(server, probe, "report", "0", RLVR_RUN_ID="r2", OMP_NUM_THREADS="2")
    assert again.returncode == 0 and "threads 2 " in again.stdout and "run r2" in again.stdout


def test_its_failure_reads_as_pythons(server, probe):
    done = run(server, probe, "raise")
    assert done.returncode == 1
    assert "ValueError: the command's own error" in done.stderr
    assert "warm.py" not in done.stderr  # the server's frames are not the command's
    missing = subprocess.run([server.python, "-m", "warmprobe_missing"], cwd=probe, env=env(),
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "No module named warmprobe_missing" in missing.stderr


def test_killed_by_a_signal_reads_as_killed_by_that_signal(server, probe):
    done = subprocess.run(["bash", "-c", f'"{server.python}" -m warmprobe killself; echo "rc=$?"'],
                          cwd=probe, env=env(), capture_output=True, text=True, timeout=120)
    assert "rc=137" in done.stdout


def test_sigterm_reaches_the_command_and_its_exit_is_the_clients(server, probe):
    client = subprocess.Popen([server.python, "-m", "warmprobe", "sleep"], cwd=probe, env=env())
    wait_for(probe / "pid")
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 3
    assert (probe / "got-term").exists()


def test_a_killed_client_takes_the_command_with_it(server, probe):
    client = subprocess.Popen([server.python, "-m", "warmprobe", "sleep"], cwd=probe, env=env())
    pid = int(wait_for(probe / "pid"))
    assert pid != client.pid  # a fork of the server, not the client itself
    command = psutil.Process(pid)
    client.kill()
    client.wait()
    assert not psutil.wait_procs([command], timeout=20)[1]


def test_a_command_holding_the_gil_still_dies_with_its_client(server, probe):
    client = subprocess.Popen([server.python, "-m", "warmprobe", "hold-gil"], cwd=probe, env=env())
    pid = int(wait_for(probe / "pid"))
    command = psutil.Process(pid)
    client.kill()
    client.wait()
    assert not psutil.wait_procs([command], timeout=10)[1]


def test_ctrl_c_and_thread_counts_read_as_a_cold_start(server, probe):
    done = subprocess.run(["bash", "-c", f'"{server.python}" -m warmprobe ctrl-c; echo "rc=$?"'],
                          cwd=probe, env=env(), capture_output=True, text=True, timeout=120)
    assert "rc=130" in done.stdout and "KeyboardInterrupt" in done.stderr  # killed by SIGINT, as python is
    blas = run(server, probe, "blas", OMP_NUM_THREADS="1")
    assert blas.stdout.strip() == "[1]" and "cold start" not in blas.stderr  # every native pool, numpy's too


def test_what_the_command_leaves_is_flushed_joined_and_killed(server, probe):
    assert run(server, probe, "leave-open").returncode == 0
    assert (probe / "out.txt").read_text() == "buffered, never closed"
    assert run(server, probe, "thread").returncode == 0
    assert (probe / "thread-done").exists()  # non-daemon threads joined, as at any exit
    assert run(server, probe, "leftover").returncode == 0
    leftover = psutil.Process(int((probe / "pid").read_text()))
    assert not psutil.wait_procs([leftover], timeout=20)[1]  # killed with the command's group


def test_each_fork_draws_its_own_random_numbers(server, probe):
    draws = {run(server, probe, "random").stdout for _ in range(3)}
    assert len(draws) == 3


def test_another_environment_or_module_starts_cold_and_still_runs(server, probe):
    done = run(server, probe, "report", "0", HF_HOME=str(probe / "hf"))
    assert done.returncode == 0 and "cold start" in done.stderr and "HF_HOME" in done.stderr
    cold = subprocess.run([server.python, "-c", "import sys; print(sys.executable)"], env=env(),
                          capture_output=True, text=True)
    assert cold.returncode == 0 and cold.stdout.strip() == sys.executable
