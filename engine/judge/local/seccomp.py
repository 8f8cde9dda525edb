"""Seccomp filters: the kernel's key store closed for the whole sandbox, and, in the program's
processes where nothing else bounds them, no new process (and no way to another process).
"""

from __future__ import annotations

import ctypes
import os
import struct

from engine.judge.local.syscalls import PR_SET_NO_NEW_PRIVS, IsolationError, check_rc, libc

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


def forbid_keyrings(notes: list[str]) -> bool:
    known = _KEY_SYSCALLS.get(os.uname().machine)
    if known is None:
        notes.append(f"keyrings not closed (no syscall table for {os.uname().machine})")
        return False
    try:
        _install_filter(_keyring_filter(*known))
    except IsolationError as exc:
        notes.append(f"keyrings not closed ({exc})")
        return False
    return True


# Where RLIMIT_NPROC cannot bound the program's processes (`limits.choose_process_bound`), a
# filter in the program's process refuses new processes: clone without CLONE_THREAD, fork and
# vfork fail with EPERM (threads are still made, each bounded by the address-space limit), and
# clone3, whose flags a filter cannot read, with ENOSYS, which makes the C library use clone.
# Where no PID namespace hides the user's other processes either, it also refuses every syscall
# that signals, traces or reads another process (the program may then not signal itself either).
_PROCESS_SYSCALLS = {"x86_64": (0xC000003E, 56, (57, 58), 435), "aarch64": (0xC00000B7, 220, (), 435)}
_SIGNAL_SYSCALLS = {  # kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo ptrace process_vm_readv/writev,
    # pidfd_send_signal pidfd_open pidfd_getfd
    "x86_64": (62, 200, 234, 129, 297, 101, 310, 311, 424, 434, 438),
    "aarch64": (129, 130, 131, 138, 240, 117, 270, 271, 424, 434, 438),
}
_JSET, _CLONE_THREAD, _ENOSYS = 0x45, 0x00010000, 38


def _no_fork_filter(arch: int, clone: int, denied: tuple[int, ...], clone3: int) -> list[tuple[int, int, int, int]]:
    """BPF as `_keyring_filter`; the three returns last: allow at 9+n, deny at 10+n, ENOSYS at 11+n."""
    n = len(denied)
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _SECCOMP_EPERM), (_LD_ABS, 0, 0, 0),
            (_JGE, 5 + n, 0, _X32_BIT), (_JEQ, 5 + n, 0, clone3)]
    prog += [(_JEQ, 3 + n - k, 0, nr) for k, nr in enumerate(denied)]
    prog += [(_JEQ, 0, 2, clone), (_LD_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_THREAD)]
    return prog + [(_RET, 0, 0, _SECCOMP_ALLOW), (_RET, 0, 0, _SECCOMP_EPERM), (_RET, 0, 0, 0x00050000 | _ENOSYS)]


# Signals reach another process by more than the signal syscalls: an fd's owner (fcntl F_SETOWN,
# F_SETOWN_EX, and F_SETSIG, which picks any signal, SIGKILL included; ioctl FIOSETOWN, SIOCSPGRP)
# is sent it when the fd is ready, and prlimit64 on another process of the same uid can set its
# CPU limit to 0 (SIGKILL). Where no PID namespace hides the user's processes, a second filter
# refuses those: prlimit64 unless on the caller itself (pid 0: how setrlimit and getrlimit reach
# it), and those fcntl and ioctl commands.
_OTHER_PROCESS_SYSCALLS = {"x86_64": (302, 72, 16), "aarch64": (261, 25, 29)}  # prlimit64 fcntl ioctl
_FD_OWNER_FCNTL, _FD_OWNER_IOCTL = (8, 10, 15), (0x8901, 0x8902)


def _other_process_filter(arch: int, prlimit: int, fcntl: int, ioctl: int) -> list[tuple[int, int, int, int]]:
    """BPF as `_keyring_filter`, laid out from labels (`_assemble`)."""
    arg0_low, arg0_high, arg1_low = 16, 20, 24
    code: list = [(_LD_ABS, 4), (_JEQ, arch, None, "deny"), (_LD_ABS, 0), (_JEQ, prlimit, "prlimit", None),
                  (_JEQ, fcntl, "fcntl", None), (_JEQ, ioctl, "ioctl", None), "allow:",
                  "prlimit", (_LD_ABS, arg0_low), (_JEQ, 0, None, "deny"), (_LD_ABS, arg0_high),
                  (_JEQ, 0, "allow", "deny"), "fcntl", (_LD_ABS, arg1_low)]
    code += [(_JEQ, cmd, "deny", None) for cmd in _FD_OWNER_FCNTL] + ["allow:", "ioctl", (_LD_ABS, arg1_low)]
    code += [(_JEQ, cmd, "deny", None) for cmd in _FD_OWNER_IOCTL] + ["allow:"]
    return _assemble(code)


def _assemble(code: list) -> list[tuple[int, int, int, int]]:
    """Labels (a name), loads (code, offset), jumps (code, k, label if true, label if false; None:
    the next instruction) and returns ("allow:", "deny:") into BPF instructions; "allow" and
    "deny" label the two returns appended last."""
    returns = {"allow:": _SECCOMP_ALLOW, "deny:": _SECCOMP_EPERM}
    at: dict[str, int] = {}
    out: list = []
    for item in code:
        if isinstance(item, str) and item not in returns:
            at[item] = len(out)
        else:
            out.append(item)
    at.update({name.rstrip(":"): len(out) + n for n, name in enumerate(returns)})

    def skip(pc: int, label: str | None) -> int:
        return 0 if label is None else at[label] - pc - 1

    prog = []
    for pc, item in enumerate(out):
        if isinstance(item, str):
            prog.append((_RET, 0, 0, returns[item]))
        elif len(item) == 2:
            prog.append((item[0], 0, 0, item[1]))
        else:
            prog.append((item[0], skip(pc, item[2]), skip(pc, item[3]), item[1]))
    return prog + [(_RET, 0, 0, value) for value in returns.values()]


def forbid_new_processes(*, signals: bool) -> None:
    """In the program's process, before it runs (see `_no_fork_filter`); `signals`: no signal to,
    trace of or read from any other process either. Raises where it cannot: a program whose
    processes nothing bounds must not run."""
    machine = os.uname().machine
    known = _PROCESS_SYSCALLS.get(machine)
    if known is None:
        raise IsolationError(0, f"no syscall table for {machine}: the program's processes are unbounded")
    arch, clone, forks, clone3 = known
    _install_filter(_no_fork_filter(arch, clone, forks + (_SIGNAL_SYSCALLS[machine] if signals else ()), clone3))
    if signals:
        _install_filter(_other_process_filter(arch, *_OTHER_PROCESS_SYSCALLS[machine]))


def _install_filter(prog: list[tuple[int, int, int, int]]) -> None:
    filters = (ctypes.c_ubyte * (8 * len(prog))).from_buffer_copy(b"".join(struct.pack("<HBBI", *i) for i in prog))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = _Program(len(prog), ctypes.addressof(filters))
    check_rc(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
    check_rc(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0), "seccomp")
