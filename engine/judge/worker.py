"""The pre-warmed sandbox worker (zygote): `python -I -S engine/judge/worker.py UID`.

A small interpreter started once per core by `engine.judge.local`; it sets up
its namespaces once (`engine.judge.sandbox`), pre-imports common modules, then
reads jobs (length-prefixed JSON on fd 0) and answers one result per job.

Per job it forks a *runner* (init of a fresh PID namespace, unprivileged uid,
rlimits). The runner compiles the program once (SYNTAX_ERROR) and forks one
*test process* per test: for stdio tests a fresh execution of the compiled
program with the test's input file as stdin and a size-capped file as stdout;
for function tests a child of the runner after it executed the program once,
evaluating that assert's operands. Each test reports over a pipe; the worker
— which never runs untrusted code — counts the reports, applies the per-test
wall-clock guard, decodes values into its own plain objects and compares
them. A pass needs a report for every test: an early exit, a killed parent or
a closed pipe leave tests unreported, which fail.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import select
import signal
import struct
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":
    sys.path.insert(0, _REPO)

from engine.judge import plain, sandbox  # noqa: E402
from engine.judge.outcome import Collector  # noqa: E402

# Modules solutions commonly import: loaded once here, shared by every fork.
PREIMPORT = (
    "array bisect builtins collections copy dataclasses datetime decimal enum fractions functools hashlib heapq "
    "io itertools json math operator random re statistics string threading traceback typing"
).split()

_HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


def send(fd: int, message: dict) -> None:
    data = json.dumps(message).encode()
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> dict | None:
    head = read_exact(fd, _HEADER.size)
    if head is None:
        return None
    body = read_exact(fd, _HEADER.unpack(head)[0])
    return None if body is None else json.loads(body)


# ---------------------------------------------------------------- runner side (inside the sandbox)


class _Frames:
    """Non-blocking frame reader for the worker side of the result pipe."""

    def __init__(self, fd: int, control: int | None = None) -> None:
        self.fd, self.buf, self.eof, self.bad = fd, bytearray(), False, False
        self.control, self.orphaned = control, False

    def pump(self, timeout: float) -> list[dict]:
        watched = [self.fd] if self.control is None else [self.fd, self.control]
        ready, _, _ = select.select(watched, [], [], max(0.0, timeout))
        if self.control in ready:
            # The judge never writes while a job runs: readable means it closed the pipe (it exited
            # or was killed). Stop now instead of finishing a job nobody will read.
            self.orphaned = self.eof = True
            return []
        if ready:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                self.eof = True
            self.buf += chunk
        out = []
        while len(self.buf) >= 4:
            size = _HEADER.unpack(self.buf[:4])[0]
            if size > MAX_FRAME:
                self.bad = self.eof = True
                break
            if len(self.buf) < 4 + size:
                break
            try:
                frame = json.loads(bytes(self.buf[4:4 + size]))
            except ValueError:
                frame = None
            del self.buf[:4 + size]
            if not isinstance(frame, dict):
                self.bad = self.eof = True
                break
            out.append(frame)
        return out


def _tail(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_capped(path: str, cap: int) -> tuple[str, bool]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError:
        return "", False
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


class Runner:
    """Runs inside the sandbox (pid 1 of its namespace, unprivileged). Never returns."""

    def __init__(self, job: dict, wfd: int, pidns: bool) -> None:
        self.job, self.wfd, self.pidns = job, wfd, pidns
        self.limits = job["limits"]
        self.pristine = dict(vars(__import__("builtins")))

    def main(self) -> None:
        try:
            code = compile(self.job["program"], "<solution>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
            send(self.wfd, {"t": "syntax", "msg": f"{type(exc).__name__}: {exc}"})
            return
        if self.job["mode"] == "stdio":
            self.stdio(code)
        else:
            self.function(code)
        send(self.wfd, {"t": "end"})

    # ---- stdio: one fresh execution of the compiled program per test
    def stdio(self, code) -> None:
        send(self.wfd, {"t": "ready"})
        for i in self.job["order"]:
            with open(f"in{i}", "w", encoding="utf-8", newline="") as fh:
                fh.write(self.job["plan"]["inputs"][i])
            done = self.run_test(i, lambda i=i: self._stdio_child(code, i))
            done["out"], done["out_truncated"] = _read_capped(f"out{i}", self.limits["output_bytes"])
            send(self.wfd, done)
            for name in (f"in{i}", f"out{i}", f"err{i}"):
                os.unlink(name)

    def _stdio_child(self, code, i: int) -> None:
        import builtins

        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        fd = os.open(f"in{i}", os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = out = open(1, "w", encoding="utf-8", closefd=False)
        sys.argv = ["solution.py"]
        atexit._clear()
        status = 0
        try:
            exec(code, {"__name__": "__main__", "__builtins__": builtins})
        except SystemExit as exc:
            status = _exit_status(exc)
        except BaseException:  # noqa: BLE001 — the program's own failure, reported via stderr
            import traceback

            traceback.print_exc()
            status = 1
        status = _finish_like_python(status, (out, sys.__stderr__))
        os._exit(status)

    # ---- function: execute the program once, then fork per test from that state
    def function(self, code) -> None:
        plan = self.job["plan"]
        before = self._before_values(plan)
        send(self.wfd, {"t": "before", "values": before})
        ns = {"__name__": "solution", "__builtins__": __import__("builtins")}
        try:
            exec(code, ns)
            if plan["setup"]:
                exec(compile(plan["setup"], "<test setup>", "exec"), ns)
        except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
            send(self.wfd, {"t": "module", **_exc_report(exc)})
            return
        if plan["candidate"] and plan["entry"] in ns:
            ns[plan["candidate"]] = ns[plan["entry"]]
        send(self.wfd, {"t": "ready"})
        self._batches(ns, plan["units"])

    def _before_values(self, plan: dict) -> dict:
        """Operands that name only builtins and the test's imports: evaluated before any untrusted code."""
        ns = {"__builtins__": __import__("builtins")}
        values: dict[str, object] = {}
        try:
            exec(plan["imports"], ns)
        except BaseException as exc:  # noqa: BLE001
            return {"error": f"test imports failed: {type(exc).__name__}: {exc}"}
        for u, unit in enumerate(plan["units"]):
            for n, leaf in enumerate(unit.get("leaves", ())):
                if leaf.get("phase") == "before":
                    values[f"{u}.{n}"] = _evaluate(leaf["src"], ns)
        return values

    def _batches(self, ns: dict, units: list) -> None:
        """All tests in one process forked from the loaded program; if it dies mid-way
        (timeout, crash, exit), the test it was on fails and a fresh fork resumes after it."""
        import mmap

        order = list(self.job["order"])
        progress = mmap.mmap(-1, 8)
        start = 0
        while start < len(order):
            progress.seek(0)
            progress.write(start.to_bytes(8, "little"))
            done = self.run_test("f", lambda s=start: self._function_child(ns, units, order, s, progress))
            reached = int.from_bytes(progress[:8], "little")
            if reached >= len(order):
                break
            done["i"] = order[reached]
            send(self.wfd, done)
            start = reached + 1
        send(self.wfd, {"t": "tails", "stdout_tail": _tail("outf", self.limits["tail_bytes"]),
                        "stderr_tail": _tail("errf", self.limits["tail_bytes"])})

    def _function_child(self, ns: dict, units: list, order: list, start: int, progress) -> None:
        import builtins
        import resource

        ns["__judge_plain__"] = lambda v: plain.decode(plain.encode(v))
        cpu_s = self.limits["cpu_s"]
        for k in range(start, len(order)):
            i = order[k]
            progress[:8] = k.to_bytes(8, "little")
            used = time.process_time()
            resource.setrlimit(resource.RLIMIT_CPU, (int(used + cpu_s + 1), resource.getrlimit(resource.RLIMIT_CPU)[1]))
            builtins.__dict__.clear()
            builtins.__dict__.update(self.pristine)
            ns["__builtins__"] = builtins
            wall = time.monotonic()
            report = self._unit(ns, units[i], i)
            report.update(cpu=time.process_time() - used, wall=time.monotonic() - wall)
            send(self.wfd, report)
        progress[:8] = len(order).to_bytes(8, "little")
        _finish_like_python(0)
        os._exit(0)

    def _unit(self, ns: dict, unit: dict, i: int) -> dict:
        if unit["kind"] == "assert":
            values = {str(n): _evaluate(leaf["src"], ns) for n, leaf in enumerate(unit["leaves"])
                      if leaf.get("phase") == "after"}
            return {"t": "result", "i": i, "values": values}
        try:
            exec(compile(unit["src"], "<test>", "exec"), ns)
            if unit["kind"] == "check":
                ns["check"](ns[self.job["plan"]["entry"]])
            return {"t": "result", "i": i, "ok": True}
        except BaseException as exc:  # noqa: BLE001
            return {"t": "result", "i": i, **_exc_report(exc)}

    # ---- one test process, watched by its runner
    def run_test(self, i: int, body) -> dict:
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                fd_out = os.open(f"out{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                fd_err = os.open(f"err{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd_out, 1)
                os.dup2(fd_err, 2)
                os.close(fd_out)
                os.close(fd_err)
                if self.job["mode"] == "stdio":
                    sandbox.set_cpu_limit(self.limits["cpu_s"])
                body()
            finally:
                os._exit(70)
        timed_out = _wait_or_kill(pid, self.limits["wall_s"])
        _, status, usage = os.wait4(pid, 0)
        if self.pidns:
            sandbox.kill_all_in_namespace()
        done = {"t": "done", "i": i, "cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - start,
                "rss_kb": usage.ru_maxrss, "wall_killed": timed_out,
                "stderr_tail": _tail(f"err{i}", self.limits["tail_bytes"])}
        if os.WIFSIGNALED(status):
            done["sig"] = os.WTERMSIG(status)
        else:
            done["code"] = os.WEXITSTATUS(status)
        return done


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish_like_python(status: int, originals: tuple = ()) -> int:
    """What interpreter shutdown does: join non-daemon threads, run atexit, flush."""
    import threading

    try:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        status = status or 1
    # CPython flushes the current sys.stdout/stderr and, when finalizing, the original streams too
    # (a program may swap sys.stdout for a buffer and write the buffer to sys.__stdout__ at exit).
    streams = {id(s): s for s in (sys.stdout, sys.stderr, *originals)}
    for stream in streams.values():
        try:
            if not stream.closed:  # CPython's shutdown skips a stream the program closed (`with sys.stdout`)
                stream.flush()
        except BaseException:  # noqa: BLE001 — e.g. EFBIG past the output cap
            status = status or 1
    return status


def _evaluate(src: str, ns: dict) -> dict:
    try:
        value = eval(compile(src, "<assert operand>", "eval"), ns)
        return {"v": plain.encode(value)}
    except plain.NotPlain as exc:
        return {"notplain": str(exc)}
    except BaseException as exc:  # noqa: BLE001
        return _exc_report(exc)


def _exc_report(exc: BaseException) -> dict:
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, AssertionError):
        kind = "assert"
    elif isinstance(exc, plain.NotPlain):
        kind = "notplain"
    else:
        kind = "output" if getattr(exc, "errno", None) == 27 else "runtime"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 — a hostile __str__
        text = type(exc).__name__
    return {"error": kind, "msg": text[:500]}


def _wait_or_kill(pid: int, wall_s: float) -> bool:
    """Wait up to wall_s for pid to exit; SIGKILL it past that. True when it was killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    if pidfd is not None:
        ready, _, _ = select.select([pidfd], [], [], wall_s)
        os.close(pidfd)
        if ready:
            return False
    else:
        deadline = time.monotonic() + wall_s
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return False
            time.sleep(0.002)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


# ---------------------------------------------------------------- worker side (trusted)


class Worker:
    def __init__(self, uid: int, control_in: int, control_out: int) -> None:
        self.uid, self.cin, self.cout = uid, control_in, control_out
        hide = [os.path.expanduser("~"), _REPO, os.path.join(os.path.dirname(_REPO), "shared")]
        self.iso = sandbox.isolate_worker(uid, hide, sandbox.interpreter_dirs())
        self.seq = 0

    def serve(self) -> None:
        send(self.cout, {"hello": self.iso.describe(), "pid": os.getpid()})
        while True:
            job = receive(self.cin)
            if job is None:
                return
            try:
                result = self.run_job(job)
            except Exception as exc:  # noqa: BLE001 — a judge fault, reported as such
                result = {"internal": f"{type(exc).__name__}: {exc}"}
            try:
                send(self.cout, result)
            except BrokenPipeError:
                return  # the judge is gone

    def run_job(self, job: dict) -> dict:
        workdir = self._workdir()
        rfd, wfd = os.pipe()
        sandbox.new_pid_namespace(self.iso)
        pid = os.fork()
        if pid == 0:
            self._become_runner(job, rfd, wfd, workdir)
        os.close(wfd)
        start = time.monotonic()
        try:
            # The expected side arrives only now, so the runner's memory never held it.
            secret = receive(self.cin) or {}
            outcome = Collector(job, secret).collect(_Frames(rfd, control=self.cin))
        finally:
            _kill_group(pid)
            _, _, usage = os.wait4(pid, 0)
            if not self.iso.pidns and self.iso.uid is not None:
                sandbox.sweep_uid(self.uid)
            os.close(rfd)
            _remove_tree(workdir)
        outcome.update(wall=time.monotonic() - start, cpu=usage.ru_utime + usage.ru_stime,
                       rss_kb=usage.ru_maxrss)
        return outcome

    def _workdir(self) -> str:
        self.seq += 1
        path = os.path.join("/tmp", f"judge-{os.getpid()}-{self.seq}")
        os.mkdir(path, 0o700)
        if self.iso.uid is not None:
            os.chown(path, self.iso.uid, self.iso.uid)
        return path

    def _become_runner(self, job: dict, rfd: int, wfd: int, workdir: str) -> None:
        try:
            os.setsid()
            os.close(rfd)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, wfd)
            os.closerange(wfd + 1, 65536)
            os.chdir(workdir)
            os.environ.clear()
            os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=workdir, TMPDIR=workdir,
                              LANG="C.UTF-8", PYTHONIOENCODING="utf-8")
            sandbox.drop_privileges(self.iso.uid)
            limits = job["limits"]
            sandbox.apply_rlimits(memory_mb=limits["memory_mb"], max_processes=limits["max_processes"],
                                  max_open_files=limits["max_open_files"], max_file_bytes=limits["output_bytes"])
            # The runner's own CPU (loading the program) gets one test's budget; the hard limit
            # leaves room for the forked test processes, which lower their soft limit per test.
            budget = int(limits["cpu_s"] * (len(job["order"]) + 2)) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (int(limits["cpu_s"]) + 2, budget))
            Runner(job, wfd, self.iso.pidns).main()
        finally:
            os._exit(0)


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _install_exit_builtins() -> None:
    """`exit`/`quit` come from the `site` module, which `-S` skips; programs use them."""
    import builtins

    def exit(code=None):  # noqa: A001
        raise SystemExit(code)

    builtins.exit = builtins.quit = exit


def main() -> None:
    uid = int(sys.argv[1])
    control_in, control_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for name in PREIMPORT:
        __import__(name)
    _install_exit_builtins()

    sys.set_int_max_str_digits(0)
    Worker(uid, control_in, control_out).serve()


if __name__ == "__main__":
    main()
