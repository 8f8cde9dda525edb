"""Kernel-level isolation for the sandbox worker: namespaces and mounts (the per-sample steps that
drop privileges and set rlimits are `engine.judge.local.limits`).

Set up once per worker (`isolate_worker`). Not root (a cluster's ordinary user): first an
unprivileged user namespace, in which the worker is root over its own namespaces only (as
bubblewrap and nsjail do); as root, a sandbox uid per worker instead. Then, either way: a
network namespace (no interface is up, so no network at all, loopback included), an IPC
namespace in which no System V IPC object or POSIX message queue can be made (they would
outlive a sample and carry its answers to the next), a UTS namespace, and a private mount
namespace: fresh tmpfs on /tmp & co., a /dev with only null, zero, full, random and urandom,
an empty /sys and /run, the judge's own files (the repository, the shared data sets, the home
directory, the usual data roots such as /work, /mnt, /opt, the judge's working directory)
hidden under empty tmpfs while the interpreter's prefix stays visible, and one tmpfs of its
own for the samples' work directory.
Once per nursery (the process forking the runners): the init of a PID namespace of its own,
so every runner dies with it; a fresh /proc that shows only its runners, and every mount but
the work directory read-only (in a user namespace the sandbox runs as the judge's own uid, so
read-only is what keeps it from writing where a later sample could read); no_new_privs and
non-dumpable, which its runners inherit. Per sample
(`new_pid_namespace` + `limits.drop_privileges` + `limits.runner_limits`, then `limits.program_limits`
in the program's processes): a fresh PID namespace whose init
is the sample's runner, so every process the sample starts dies with it; the sandbox uid (as
root) or no capabilities at all (in a user namespace), so the program can neither signal nor
trace the judge nor undo a mount; rlimits on CPU, address space, processes (or a seccomp filter
where a per-uid limit would count the judge's own processes), file size, open files and core dumps. Where the kernel refuses a step the worker goes on without it and says
so: `Isolation.level()` names exactly what was obtained, and is part of the judge's version.
Stdlib only: the worker imports this file before hiding the repository.
"""

from __future__ import annotations

import os
import sys

from engine.judge.local import faults
from engine.judge.local.seccomp import forbid_keyrings
from engine.judge.local.syscalls import PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, IsolationError, check_rc, libc

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 8192, 16384, 1 << 18)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check_rc(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


class Isolation:
    """What is active in this worker; `level()` names it for versions, `describe()` for results.

    A plain class, like everything the worker imports: `dataclasses` would bring `inspect` and
    its imports into the nursery, 1.3 MB that every fork copies the page tables of."""

    def __init__(self) -> None:
        self.userns = self.netns = self.ipc_off = self.keys_off = self.mountns = self.pidns = False
        self.proc = "host"  # the runners' /proc: "private" (their own PID namespace), "hidden" or "host"
        self.read_only = False  # every mount but the work directory read-only for the runners
        self.procs = "rlimit"  # how the program's processes are bounded (`limits.choose_process_bound`)
        self.uid: int | None = None  # the sandbox uid (root only)
        self.notes: list[str] = []
        self._own_pidns_fd: int | None = None
        # Where this process's next child goes: "own" PID namespace, a "fresh" one (it will be its
        # init), or one "used" already by an earlier child.
        self._children = "own"

    def level(self) -> str:
        """The isolation obtained, in words that change only when it does: `none` or e.g.
        `userns+netns+ipcns+mountns+pidns`. The filesystem counts as isolated (`mountns`) only
        when the judge's files are hidden, the runners' /proc is not the host's and they can write
        nowhere but their work directory."""
        fs = self.mountns and self.read_only and self.proc != "host"
        parts = [name for name, on in (("userns", self.userns), ("sandbox-uid", self.uid is not None),
                                       ("netns", self.netns), ("ipcns", self.ipc_off), ("mountns", fs),
                                       ("pidns", self.pidns)) if on]
        return "+".join(parts) or "none"

    def describe(self) -> str:
        parts = ["rlimits", "setsid"]
        if self.userns:
            parts.append("userns(no-capabilities)")
        if self.uid is not None:
            parts.append(f"uid={self.uid}")
        if self.netns:
            parts.append("netns")
        if self.ipc_off:
            parts.append("ipcns(no-sysv-ipc,no-mqueue)")
        if self.keys_off:
            parts.append("seccomp(no-keyrings)")
        if self.mountns:
            parts.append("mountns(private-tmp,private-dev,hidden-judge-files"
                         + (",read-only" if self.read_only else "") + f",proc-{self.proc})")
        if self.pidns:
            parts.append("pidns-per-sample")
        if self.procs != "rlimit":
            parts.append("seccomp(no-new-processes" + (",no-signals)" if self.procs == "no-fork-no-signals" else ")"))
        text = "+".join(parts)
        return text + (f" (fallback: {'; '.join(self.notes)})" if self.notes else "")


def isolate_worker(uid: int, hide: list[str], keep: list[str], workdir: str) -> Isolation:
    """Enter new user (not root), net, ipc, uts, mount namespaces once; the per-sample cost is then
    only a fork. Each step that the kernel refuses is left out and noted."""
    iso = Isolation()
    iso.keys_off = forbid_keyrings(iso.notes)
    if os.geteuid() == 0:
        iso.uid = uid
    else:
        try:
            _enter_user_namespace(iso.notes)
            iso.userns = True
        except (IsolationError, OSError) as exc:
            iso.notes.append(f"no user namespace ({exc}): no namespaces at all; RLIMIT_NPROC counts the "
                             "judge's own uid")
            return iso
    try:
        check_rc(libc.unshare(CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare(net)")
        iso.netns = True
        iso.ipc_off = _forbid_ipc_objects(iso.notes)
    except IsolationError as exc:
        iso.notes.append(f"network not isolated ({exc})")
    try:
        check_rc(libc.unshare(CLONE_NEWNS), "unshare(mount)")
        _private_filesystem(hide, keep, workdir, iso.uid)
        iso.mountns = True
    except (IsolationError, OSError) as exc:
        iso.notes.append(f"filesystem not isolated ({exc})")
    iso._own_pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
    iso.pidns = True  # until the nursery's namespace is refused (`nursery_pid_namespace`)
    return iso


def _enter_user_namespace(notes: list[str]) -> None:
    """Become root of a user namespace of our own: capabilities over the namespaces made from it,
    none over the machine. Only our own uid and gid are mapped (to 0), as an unprivileged user may."""
    uid, gid = os.getuid(), os.getgid()
    check_rc(libc.unshare(CLONE_NEWUSER), "unshare(user)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    # Samples must not make user namespaces of their own (each one is kernel attack surface and
    # gives capabilities back): the limit is per namespace, so this one sets it for ours.
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as fh:
            fh.write("0")
    except OSError as exc:
        notes.append(f"nested user namespaces not forbidden ({exc})")


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


WORKDIR_INODES = 65536  # files and directories a sample may hold in its work directory


# Replaced by an empty tmpfs of their own (size) in every worker's view.
_FRESH = (("/tmp", "1m"), ("/var/tmp", "1m"), ("/run", "1m"), ("/sys", "1k"))


def _private_filesystem(hide: list[str], keep: list[str], workdir: str, uid: int | None) -> None:
    """The worker's view, which its nursery copies (and makes read-only, `lock_filesystem`)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path, size in _FRESH:
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=755")
    os.mkdir(workdir, 0o700)
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    # Inodes bounded too: `size` counts file contents only, so empty files would be limited only by
    # the kernel's memory (each ≈ 1 KB, charged to no limit of the program) and would take the
    # worker longer to remove than the watchdog allows (a hung worker: a judge fault).
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"size=512m,nr_inodes={WORKDIR_INODES},mode=700{owner}")
    _private_dev()
    hidden = []
    for path in sorted({os.path.abspath(h) for h in hide if os.path.isdir(h)}, key=len):
        # A fresh tmpfs (or a directory in one) hides nothing more, and covering it again would cover
        # the work directory and the interpreter's staged directories in /tmp (run from /tmp: the
        # judge's working directory is one of `hide`).
        if any(_under(path, fresh) for fresh, _ in _FRESH):
            continue
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
        os.rmdir(stage)


DEVICES = ("null", "zero", "full", "random", "urandom")


def _private_dev() -> None:
    """A /dev with the harmless character devices only: no disk, GPU or terminal of the host
    (in a user namespace the sandbox runs as the user who owns them)."""
    stage = "/tmp/.dev"
    os.mkdir(stage)
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{stage}/{name}", "w").close()
            _mount(f"/dev/{name}", f"{stage}/{name}", None, MS_BIND)
    os.mkdir(f"{stage}/shm")
    _mount("tmpfs", f"{stage}/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=755")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{stage}/{name}")
    _mount(stage, "/dev", None, MS_MOVE)
    os.rmdir(stage)


def lock_filesystem(iso: Isolation, workdir: str) -> None:
    """In the nursery, once: a /proc of its PID namespace (only its runners show; the judge, the
    trainer and the host do not) and every mount read-only but the work directory, whose contents
    the worker empties between samples. Done in the worker's mount namespace, which the worker no
    longer reads /proc or writes outside the work directory in: a mount namespace of the nursery's
    own cost every sample ≈ 10 % more CPU (measured with bench/judge_ab.py)."""
    if not iso.mountns:
        return
    with open("/proc/self/mountinfo") as fh:  # before /proc is replaced
        points = [_unescape(line.split()[4]) for line in fh]
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        iso.proc = "private"
    except IsolationError as exc:
        try:
            _mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1k,mode=555")
            iso.proc = "hidden"
            iso.notes.append(f"no private /proc ({exc}): runners have none")
        except IsolationError as exc2:
            iso.notes.append(f"runners see the host's /proc ({exc2})")
    failed = _read_only_mounts(points, except_for=workdir)
    if failed:
        iso.notes.append("could not make read-only: " + ", ".join(failed[:5]))
    iso.read_only = not failed


_ST_TO_MS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
             (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))


def _read_only_mounts(points: list[str], except_for: str) -> list[str]:
    """Remount every visible mount read-only, keeping its other flags (a user namespace may not
    clear flags the host set). Returns the mount points that stayed writable."""
    failed = []
    for point in dict.fromkeys(points):
        if point == except_for or _under(point, "/proc"):
            continue
        try:
            flags = os.statvfs(point).f_flag
        except OSError:
            continue  # covered by a later mount: not visible
        if flags & os.ST_RDONLY:
            continue
        keep = sum(ms for st, ms in _ST_TO_MS if flags & st)
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except IsolationError:
            failed.append(point)
    return [p for p in failed if not (os.statvfs(p).f_flag & os.ST_RDONLY)] if failed else []


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a path as octal escapes."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(root)]) == os.path.abspath(root)


def new_pid_namespace(iso: Isolation) -> None:
    """Make this process's next child the init of a fresh PID namespace.

    unshare(CLONE_NEWPID) only works while the children's namespace is still
    our own, so we first point it back at our own (setns) — about 0.1 ms. Not
    in the worker, which makes one child only (its nursery): in a user namespace
    it may not enter its own PID namespace again (the machine's owns it).
    """
    if iso._own_pidns_fd is None or iso._children == "fresh":
        return
    if iso._children == "used":
        enter_own_pid_namespace(iso)
    check_rc(libc.unshare(CLONE_NEWPID), "unshare(pid)")
    iso._children = "fresh"


def nursery_pid_namespace(iso: Isolation) -> None:
    """For the worker's one child, its nursery (made after the worker's own forks at warm-up)."""
    try:
        if faults.fires("pidns"):
            raise IsolationError(1, "unshare(pid): Operation not permitted (injected)")
        new_pid_namespace(iso)
    except IsolationError as exc:
        iso.notes.append(f"no per-sample PID namespace ({exc}); leftovers are killed by uid sweep")
        iso.pidns = False
        os.close(iso._own_pidns_fd)  # type: ignore[arg-type]
        iso._own_pidns_fd = None


def forked(iso: Isolation) -> None:
    """In the parent, after a fork: the fresh PID namespace is the child's now."""
    if iso._children == "fresh":
        iso._children = "used"


def lock_down_descendants() -> None:
    """Once, in the process that forks every runner: both flags are inherited by its children.

    Runners then make no foreign-function call of their own (each ctypes call in a fresh fork
    copies pages the sample may never touch). no_new_privs survives the uid change; "dumpable" is
    reset by it to fs.suid_dumpable, which `runner_needs_dumpable_reset` checks.
    """
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


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
        check_rc(libc.setns(iso._own_pidns_fd, CLONE_NEWPID), "setns(pid)")
        iso._children = "own"


def adopt_pid_namespace(iso: Isolation) -> None:
    """In the nursery: its runners' namespaces are made from its own (the worker's is an ancestor,
    which setns cannot enter)."""
    iso._children = "own"
    if iso._own_pidns_fd is not None:
        os.close(iso._own_pidns_fd)
        iso._own_pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY)


# Where users and machines keep data (a clone, its datasets, model caches): hidden whole, whatever
# the judge's own paths are. A clone's `shared/` sibling may be a bind mount of another path, so
# hiding the judge's own directories by name alone is not enough.
DATA_ROOTS = ("/home", "/root", "/work", "/workspace", "/data", "/datasets", "/mnt", "/media", "/srv", "/opt",
              "/scratch")


def private_dirs(repo: str, extra: list[str]) -> list[str]:
    """Directories no sample may read: the data roots, home, the repository and its `shared/` sibling,
    and what the judge names in `extra` (its working directory, the run's directories), each also by
    its real path. Interpreter directories inside them stay visible (`keep`); of `extra`, the root,
    a directory holding an interpreter directory or one inside it is never hidden."""
    named = [*DATA_ROOTS, os.path.expanduser("~"), repo, os.path.join(os.path.dirname(repo), "shared")]
    keep = interpreter_dirs()
    named += [p for p in extra if p and os.path.realpath(p) != "/"
              and not any(_under(k, p) or _under(p, k) for k in keep)]
    return sorted({q for p in named for q in (p, os.path.realpath(p))})


def interpreter_dirs() -> list[str]:
    """Directories the sandboxed interpreter must still read (stdlib, extension modules)."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)})
