"""Kernel-level isolation for the sandbox worker: namespaces, mounts, rlimits, privileges.

Set up once per worker (`isolate_worker`): a network namespace (no interface
is up, so no network at all, loopback included), an IPC namespace in which no
System V IPC object or POSIX message queue can be made (they would outlive a
sample and carry its answers to the next), a private mount namespace in
which `/` is read-only, `/tmp` & co. are fresh root-owned tmpfs, and the
judge's own files (the repository, the shared data sets, the home directory,
the usual data roots such as /work, /mnt, /opt) are hidden under empty tmpfs
while the interpreter's prefix stays visible.
Once per nursery (the process forking the runners): the init of a PID namespace
of its own, so every runner dies with it, plus no_new_privs and non-dumpable,
which its runners inherit. Per sample (`new_pid_namespace` + `drop_privileges`
+ `apply_rlimits`): a fresh PID namespace whose init is the sample's runner, so
every process the sample starts dies with it; an unprivileged uid of its own per
worker, so RLIMIT_NPROC is effective and the program cannot signal or trace the
judge; rlimits on CPU, address space, processes, file size, open files and core
dumps. Without root (or where the kernel refuses) the worker falls
back to rlimits + its own session/process group, and says so.
Stdlib only: the worker imports this file before hiding the repository.
"""

from __future__ import annotations

import ctypes
import os
import resource
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = (
    1, 2, 4, 32, 4096, 8192, 16384, 1 << 18)
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38

_libc = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    pass


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise IsolationError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


class Isolation:
    """What is active in this worker; `describe()` is what results report.

    A plain class, like everything the worker imports: `dataclasses` would bring `inspect` and
    its imports into the nursery, 1.3 MB that every fork copies the page tables of."""

    def __init__(self) -> None:
        self.netns = self.ipc_off = self.keys_off = self.mountns = self.pidns = False
        self.uid: int | None = None
        self.notes: list[str] = []
        self._own_pidns_fd: int | None = None

    def describe(self) -> str:
        parts = ["rlimits", "setsid"]
        if self.uid is not None:
            parts.append(f"uid={self.uid}")
        if self.netns:
            parts.append("netns")
        if self.ipc_off:
            parts.append("ipcns(no-sysv-ipc,no-mqueue)")
        if self.keys_off:
            parts.append("seccomp(no-keyrings)")
        if self.mountns:
            parts.append("mountns(ro-root,private-tmp,hidden-judge-files)")
        if self.pidns:
            parts.append("pidns-per-sample")
        text = "+".join(parts)
        return text + (f" (fallback: {'; '.join(self.notes)})" if self.notes else "")


def isolate_worker(uid: int, hide: list[str], keep: list[str]) -> Isolation:
    """Enter new net/mount/ipc/uts namespaces once; the per-sample cost is then only a fork."""
    iso = Isolation()
    iso.keys_off = _forbid_keyrings(iso.notes)
    if os.geteuid() != 0:
        iso.notes.append("not root: no namespaces, no uid switch, RLIMIT_NPROC counts the judge's own uid")
        return iso
    iso.uid = uid
    try:
        _check(_libc.unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare(net)")
        iso.netns = True
        iso.ipc_off = _forbid_ipc_objects(iso.notes)
    except IsolationError as exc:
        iso.notes.append(f"network not isolated ({exc})")
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(mount)")
        _private_filesystem(hide, keep)
        iso.mountns = True
    except IsolationError as exc:
        iso.notes.append(f"filesystem not isolated ({exc})")
    try:
        iso._own_pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
        new_pid_namespace(iso)
        enter_own_pid_namespace(iso)
        iso.pidns = True
    except (IsolationError, OSError) as exc:
        iso.notes.append(f"no per-sample PID namespace ({exc}); leftovers are killed by uid sweep")
    return iso


# System V IPC objects and POSIX message queues outlive the process that made them: in a worker's
# IPC namespace (shared by all its samples) one sample could leave its outputs for a later sample
# of the same prompt to copy. Their per-namespace limits set to zero, none can be made at all.
_NO_IPC_OBJECTS = {"kernel/shmmni": "0", "kernel/msgmni": "0", "kernel/sem": "0 0 0 0", "fs/mqueue/queues_max": "0"}


def _forbid_ipc_objects(notes: list[str]) -> bool:
    try:
        for name, value in _NO_IPC_OBJECTS.items():
            with open(f"/proc/sys/{name}", "w") as fh:
                fh.write(value)
    except OSError as exc:
        notes.append(f"IPC objects not forbidden ({exc})")
        return False
    return True


# The kernel's key store is per uid, not per process: a sample could add a key that a later sample
# (same sandbox uid) reads back. A seccomp filter, inherited by the nursery and every runner, makes
# add_key, request_key and keyctl fail with EPERM. Syscall numbers per architecture; a syscall
# made through another ABI (i386 via int 0x80, x32) is refused whatever it is.
_KEY_SYSCALLS = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}
_X32_BIT = 0x40000000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_ALLOW, _SECCOMP_EPERM = 0x7FFF0000, 0x00050000 | 1
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06


def _keyring_filter(arch: int, numbers: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """BPF: (code, jump-if-true, jump-if-false, k); jumps count the instructions skipped."""
    n = len(numbers)
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _SECCOMP_EPERM), (_LD_ABS, 0, 0, 0),
            (_JGE, n + 1, 0, _X32_BIT)]
    prog += [(_JEQ, n - i, 0, nr) for i, nr in enumerate(numbers)]
    return prog + [(_RET, 0, 0, _SECCOMP_ALLOW), (_RET, 0, 0, _SECCOMP_EPERM)]


def _forbid_keyrings(notes: list[str]) -> bool:
    known = _KEY_SYSCALLS.get(os.uname().machine)
    if known is None:
        notes.append(f"keyrings not closed (no syscall table for {os.uname().machine})")
        return False
    prog = _keyring_filter(*known)
    filters = (ctypes.c_ubyte * (8 * len(prog))).from_buffer_copy(b"".join(struct.pack("<HBBI", *i) for i in prog))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = _Program(len(prog), ctypes.addressof(filters))
    try:
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "seccomp")
    except IsolationError as exc:
        notes.append(f"keyrings not closed ({exc})")
        return False
    return True


def _private_filesystem(hide: list[str], keep: list[str]) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    for path, size in (("/tmp", "512m"), ("/var/tmp", "1m"), ("/run/lock", "1m"), ("/dev/shm", "1m")):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=755")
    hidden = []
    for path in sorted({os.path.abspath(h) for h in hide if os.path.isdir(h)}, key=len):
        if not any(_under(path, outer) for outer in hidden):  # gone from view once its parent is covered
            hidden.append(path)
    kept = [k for k in keep if any(_under(k, h) for h in hidden)]
    staged = []
    for n, path in enumerate(kept):
        stage = f"/tmp/.keep{n}"
        os.mkdir(stage)
        _mount(path, stage, None, MS_BIND | MS_REC)
        staged.append((stage, path))
    for path in hidden:
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for stage, path in staged:
        os.makedirs(path, exist_ok=True)
        _mount(stage, path, None, MS_MOVE)
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.rmdir(stage)


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)


def new_pid_namespace(iso: Isolation) -> None:
    """Make this process's next child the init of a fresh PID namespace.

    unshare(CLONE_NEWPID) only works while the children's namespace is still
    our own, so we first point it back at our own (setns) — about 0.1 ms.
    """
    if iso._own_pidns_fd is None:
        return
    enter_own_pid_namespace(iso)
    _check(_libc.unshare(CLONE_NEWPID), "unshare(pid)")


def lock_down_descendants() -> None:
    """Once, in the process that forks every runner: both flags are inherited by its children.

    Runners then make no foreign-function call of their own (each ctypes call in a fresh fork
    copies pages the sample may never touch). no_new_privs survives the uid change; "dumpable" is
    reset by it to fs.suid_dumpable, which `runner_needs_dumpable_reset` checks.
    """
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def runner_needs_dumpable_reset() -> bool:
    """True where a uid change leaves a process dumpable (fs.suid_dumpable = 1): then, and only
    then, the runner clears the flag itself so nothing in the sandbox can ptrace it."""
    try:
        with open("/proc/sys/fs/suid_dumpable") as fh:
            return fh.read().strip() == "1"
    except OSError:
        return True


def enter_own_pid_namespace(iso: Isolation) -> None:
    """This process's next child is made in its own PID namespace again."""
    if iso._own_pidns_fd is not None:
        _check(_libc.setns(iso._own_pidns_fd, CLONE_NEWPID), "setns(pid)")


def adopt_pid_namespace(iso: Isolation) -> None:
    """In the nursery: its runners' namespaces are made from its own (the worker's is an ancestor,
    which setns cannot enter)."""
    if iso._own_pidns_fd is not None:
        os.close(iso._own_pidns_fd)
        iso._own_pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)


def drop_privileges(uid: int | None, *, reset_dumpable: bool) -> None:
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if reset_dumpable:
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def apply_rlimits(*, memory_mb: int, max_processes: int, max_open_files: int, max_file_bytes: int) -> None:
    limits = {
        resource.RLIMIT_AS: memory_mb * 1024 * 1024,
        resource.RLIMIT_NPROC: max_processes,
        resource.RLIMIT_NOFILE: max_open_files,
        resource.RLIMIT_FSIZE: max_file_bytes,
        resource.RLIMIT_CORE: 0,
    }
    for kind, value in limits.items():
        resource.setrlimit(kind, (value, value))


def set_cpu_limit(seconds: float) -> None:
    """RLIMIT_CPU counts whole seconds: SIGXCPU at the soft limit, SIGKILL one second later."""
    soft = max(1, int(seconds + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))


def kill_all_in_namespace() -> None:
    """From a PID namespace's init: SIGKILL every other process in it, then reap them."""
    try:
        os.kill(-1, 9)
    except ProcessLookupError:
        pass
    reap_zombies()


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep_uid(uid: int) -> None:
    """Fallback without a PID namespace: a throwaway child with the sandbox uid kills all its processes."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresuid(uid, uid, uid)
            os.kill(-1, 9)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


# Where users and machines keep data (a clone, its datasets, model caches): hidden whole, whatever
# the judge's own paths are. A clone's `shared/` sibling may be a bind mount of another path, so
# hiding the judge's own directories by name alone is not enough.
DATA_ROOTS = ("/home", "/root", "/work", "/workspace", "/data", "/datasets", "/mnt", "/media", "/srv", "/opt",
              "/scratch")


def private_dirs(repo: str) -> list[str]:
    """Directories no sample may read: the data roots, home, the repository and its `shared/` sibling
    (each also by its real path). Interpreter directories inside them stay visible (`keep`)."""
    named = [*DATA_ROOTS, os.path.expanduser("~"), repo, os.path.join(os.path.dirname(repo), "shared")]
    return sorted({q for p in named for q in (p, os.path.realpath(p))})


def interpreter_dirs() -> list[str]:
    """Directories the sandboxed interpreter must still read (stdlib, extension modules)."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)})


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (a judge killed mid-job leaves no sandbox behind)."""
    PR_SET_PDEATHSIG = 1
    _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)


def set_name(name: bytes) -> None:
    """The name `ps`/`top` show for this process (the judge's roles are told apart by it)."""
    _libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
