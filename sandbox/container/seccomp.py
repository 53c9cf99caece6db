"""The sandbox's own seccomp profile (``sandbox/container/seccomp.json``), applied to every
sandbox container instead of the engine's default (docs/design.md, Trust boundaries).

It is an allowlist: every system call of the kernel's tables (x86_64 and the generic
table of arm64) is allowed except those ``DENIED`` names below, each with the reason;
anything else, a call newer than the tables included, fails with EPERM (the engine's
runtime answers ENOSYS for numbers above the newest it knows, so a C library falls
back). ``clone`` is allowed only without the flags that make new namespaces, and
``personality`` only with the values ordinary programs use. The checks run with every
capability dropped, so most denied calls would fail anyway; the profile closes the
ones that do not need a capability and are kernel attack surface all the same
(io_uring first among them), and keeps a call that does need one from ever reaching
the kernel's permission check.

The JSON is generated from this module, never edited by hand:
``python -m sandbox.container.seccomp`` writes it from the kernel headers of the machine it runs
on (``linux-libc-dev``), with the newer calls of ``LATER`` added."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

PROFILE_PATH = Path(__file__).with_name("seccomp.json")
HEADERS = (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), Path("/usr/include/asm-generic/unistd.h"))
EPERM = 1
ENOSYS = 38
# CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
# CLONE_NEWNET: a clone() with any of them is refused.
CLONE_NAMESPACE_FLAGS = 0x7E020000
# personality(): Linux, Linux with UNAME26 or 32-bit addresses off/on, and the query
# (0xffffffff). Others turn address randomisation off or make data executable.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

_IO_URING = "a second way into the kernel that no per-call filter sees, and the source of many of its recent holes"
_NAMESPACES = "new namespaces (a user namespace above all) open kernel paths meant for root"
_MOUNTS = "mounting belongs to the engine, never to a check"
_HOST = "changes the host, not the sandbox (and needs a capability the sandbox lacks)"
_OBSOLETE = "obsolete or unimplemented; nothing a check runs needs it"

DENIED: dict[str, str] = {
    "io_uring_setup": _IO_URING,
    "io_uring_enter": _IO_URING,
    "io_uring_register": _IO_URING,
    # clone3 passes its flags in memory, where a filter cannot read them: ENOSYS makes
    # the C library fall back to clone(), whose flags it can.
    "clone3": "its namespace flags are out of a filter's sight (clone is used instead)",
    "unshare": _NAMESPACES,
    "setns": _NAMESPACES,
    "userfaultfd": "lets a process stall the kernel mid-copy: the usual lever for exploiting its races",
    "perf_event_open": "a large kernel surface and a side channel on other tenants",
    "bpf": "loads programs into the kernel",
    "add_key": "kernel keyrings are not namespaced",
    "request_key": "kernel keyrings are not namespaced",
    "keyctl": "kernel keyrings are not namespaced",
    "modify_ldt": "rewrites the x86 descriptor table, a path of several kernel exploits; only 16-bit code needs it",
    "open_by_handle_at": "opens files by handle, around the mount the sandbox sees (the classic container escape)",
    "mount": _MOUNTS,
    "umount2": _MOUNTS,
    "pivot_root": _MOUNTS,
    "chroot": _MOUNTS,
    "fsopen": _MOUNTS,
    "fsconfig": _MOUNTS,
    "fsmount": _MOUNTS,
    "fspick": _MOUNTS,
    "move_mount": _MOUNTS,
    "open_tree": _MOUNTS,
    "mount_setattr": _MOUNTS,
    "kexec_load": _HOST,
    "kexec_file_load": _HOST,
    "init_module": _HOST,
    "finit_module": _HOST,
    "delete_module": _HOST,
    "reboot": _HOST,
    "swapon": _HOST,
    "swapoff": _HOST,
    "acct": _HOST,
    "settimeofday": _HOST,
    "clock_settime": _HOST,
    "clock_adjtime": _HOST,
    "sethostname": _HOST,
    "setdomainname": _HOST,
    "syslog": _HOST,
    "iopl": _HOST,
    "ioperm": _HOST,
    "quotactl": _HOST,
    "quotactl_fd": _HOST,
    "fanotify_init": _HOST,
    "lookup_dcookie": _HOST,
    "vhangup": _HOST,
    "nfsservctl": _OBSOLETE,
    "uselib": _OBSOLETE,
    "_sysctl": _OBSOLETE,
    "sysfs": _OBSOLETE,
    "ustat": _OBSOLETE,
    "create_module": _OBSOLETE,
    "get_kernel_syms": _OBSOLETE,
    "query_module": _OBSOLETE,
    "afs_syscall": _OBSOLETE,
    "tuxcall": _OBSOLETE,
    "security": _OBSOLETE,
    "vserver": _OBSOLETE,
    "getpmsg": _OBSOLETE,
    "putpmsg": _OBSOLETE,
    "epoll_ctl_old": _OBSOLETE,
    "epoll_wait_old": _OBSOLETE,
}
# Denied with ENOSYS rather than EPERM: callers probe these and fall back on "not
# implemented" (liburing users, the C library's clone3).
NOT_IMPLEMENTED = ("io_uring_setup", "io_uring_enter", "io_uring_register", "clone3")
# Allowed only with the arguments the rules below name.
FILTERED = ("clone", "personality")
# Calls newer than the headers of a Debian 12 machine that ordinary programs use
# (the C library's fchmodat and futexes, statmount, mseal, the *xattrat family).
LATER = (
    "cachestat",
    "fchmodat2",
    "map_shadow_stack",
    "futex_wake",
    "futex_wait",
    "futex_requeue",
    "statmount",
    "listmount",
    "lsm_get_self_attr",
    "lsm_list_modules",
    "mseal",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
)
_DEFINE = re.compile(r"^#define __NR_([a-z0-9_]+)\s+\d+", re.MULTILINE)
# Numbers the generic table defines that are not calls: its size, and arm64's base.
_NOT_CALLS = {"syscalls", "arch_specific_syscall"}


def table_names(headers: tuple[Path, ...] = HEADERS) -> set[str]:
    """The system calls the kernel headers number (the generic table's names include
    arm64's)."""
    names: set[str] = set()
    for header in headers:
        names |= set(_DEFINE.findall(header.read_text()))
    return names - _NOT_CALLS


def build_profile(names: set[str]) -> dict[str, Any]:
    """The profile, in the engine's format, allowing ``names`` less the denied and
    filtered ones, which get rules of their own."""
    allowed = sorted((names | set(LATER)) - set(DENIED) - set(FILTERED))
    # MASKED_EQ: (flags & value) == valueTwo, so no namespace flag may be set.
    clone: dict[str, Any] = {
        "names": ["clone"],
        "action": "SCMP_ACT_ALLOW",
        "args": [{"index": 0, "value": CLONE_NAMESPACE_FLAGS, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
    }
    return {
        "comment": "Generated by `python -m sandbox.container.seccomp` (sandbox/container/seccomp.py says why each call is denied); do not edit.",
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []},
        ],
        "syscalls": [
            {"names": allowed, "action": "SCMP_ACT_ALLOW"},
            clone,
            *(
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": value, "op": "SCMP_CMP_EQ"}]}
                for value in PERSONALITIES
            ),
            {"names": list(NOT_IMPLEMENTED), "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
        ],
    }


@functools.cache
def security_option() -> str:
    """The container's ``seccomp=`` security option: the profile's text itself (the
    engine takes the content, not a path)."""
    return "seccomp=" + json.dumps(json.loads(PROFILE_PATH.read_text()), separators=(",", ":"))


@functools.cache
def profile_digest() -> str:
    """Part of the container spec's digest: a changed profile makes new containers."""
    return hashlib.sha256(PROFILE_PATH.read_bytes()).hexdigest()[:16]


def main() -> None:
    PROFILE_PATH.write_text(json.dumps(build_profile(table_names()), indent=1) + "\n")
    sys.stdout.write(f"wrote {PROFILE_PATH}\n")


if __name__ == "__main__":
    main()
