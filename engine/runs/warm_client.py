"""The python a local launch script runs: `-m engine.*` in a fork of the warm interpreter, the rest cold.

The local executor sets RLVR_PYTHON to a two-line shim that runs this file as
`python -I -S warm_client.py SOCKET PREFIXES ARGS...`. It imports only the standard library (it must
start in milliseconds, before any site or engine import). For `-m engine.<module> ...` it
hands its stdin/stdout/stderr, argv, environment and working directory to the warm server
(`engine.runs.warm`), which forks an interpreter that already imported torch and
transformers (PREFIXES: the modules it forwards, comma-separated: `engine.`); it forwards SIGTERM/SIGINT/SIGHUP to that fork and exits as the fork did
(killed by a signal: killed by the same signal, so bash's `$?` reads the same). Anything
else, or a server that refuses or cannot be reached before it forked, runs exactly as
before: `exec` of the real interpreter with the same arguments.
"""

import array
import json
import os
import signal
import socket
import sys

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_READY_S = 120.0  # the server's imports; past this the command starts cold rather than wait


def _cold(argv):
    os.execv(sys.executable, [sys.executable, *argv])


def _module(argv, prefixes):
    """The module of `-m <prefix>X ...` when that is the whole command line's shape, else None."""
    if len(argv) >= 2 and argv[0] == "-m" and argv[1].startswith(prefixes):
        return argv[1]
    return None


def _read_line(conn, buf):
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            return None, buf
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return json.loads(line), rest


def main():
    path, prefixes, argv = sys.argv[1], tuple(sys.argv[2].split(",")), sys.argv[3:]
    if _module(argv, prefixes) is None:
        _cold(argv)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reply, buf = None, b""
    try:
        conn.settimeout(_READY_S)
        conn.connect(path)
        header = json.dumps({"argv": argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        fds = array.array("i", (0, 1, 2)).tobytes()
        data = len(header).to_bytes(8, "big") + header
        sent = conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        if sent < len(data):  # (an empty send to a server that already answered would fail)
            conn.sendall(data[sent:])
        reply, buf = _read_line(conn, b"")
        if reply and reply.get("ready"):
            # From here this client waits, whatever it takes: the server forks only on this `go`,
            # so a client that gave up before it (and ran cold) never has its command run twice.
            conn.settimeout(None)
            conn.sendall(b"go\n")
            reply, buf = _read_line(conn, buf)
            if not reply or "pid" not in reply:
                _no_status(None)
    except (OSError, ValueError) as err:
        why = f"the warm server did not answer: {type(err).__name__}: {err}"
        reply = {"refused": why}
    if not reply or "pid" not in reply:
        # Nothing was forked: running cold is the same run, only slower.
        conn.close()
        why = (reply or {}).get("refused") or "the warm server closed the connection"
        print(f"rlvr-run: cold start ({why})", file=sys.stderr, flush=True)
        _cold(argv)

    def forward(signum, _frame):
        try:
            conn.sendall(f"{signum}\n".encode())
        except OSError:
            pass

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    status, _ = _read_line(conn, buf)  # (a forwarded signal does not interrupt it: PEP 475)
    if status is None or "exit" not in status:
        _no_status(reply["pid"])
    code = status["exit"]
    if code < 0:
        for signum in _FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    sys.exit(code)


def _no_status(pid):
    print(f"rlvr-run: the warm process {pid} of this command ended without an exit status "
          "(the runner's warm server was killed?)", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
