"""Confinement of everything that runs code from a pull request: a read-only world, no escape from
the candidate's process tree, no reach into other processes.

Namespaces alone (runner/sandbox.py's ``unshare``) are not enough and not always there: Ubuntu
24.04 and Docker's default seccomp profile refuse unprivileged user namespaces, and inside them a
candidate is root of its own mount namespace, so it could unmount the fresh /proc and write every
file of its uid (the venv kernelpro runs from, the checkout's ``.git``, the results). So every
candidate, profiler and binary tool runs under **Landlock** (Linux >= 5.13, no privilege, no
dependency, works inside or outside namespaces):

- files: read only the system (``/usr``, ``/etc``, ...), the Python installation and the CUDA
  toolkit; write only its own work directory (and its compile cache). Not readable: ``/tmp`` (other
  runs, reference outputs of any run), ``$HOME`` (credentials), the checkout, the results. The
  installation is read-only, and a Landlock domain may not mount or unmount anything, so the fresh
  /proc of a pid namespace cannot be taken off to show the host's.
- processes: Landlock forbids ptrace-class access (``/proc/PID/environ``, ``/proc/PID/mem``) to
  any process outside the domain; from ABI 6 on it also forbids signals and abstract unix sockets
  outside it. No TCP bind or connect (ABI 4).
- what Landlock does not cover (``seccomp_filter``, installed after it): no socket of any family
  (UDP to the host's loopback and named unix sockets such as the systemd user manager's are
  otherwise reachable without a network namespace; ``socketpair`` stays), no io_uring (it can open
  sockets and set extended attributes past the filter), chmod/chown/xattr calls succeed
  without doing anything and utime calls fail (Landlock checks none of them: a candidate made the installation 0666).
- in its own mount namespace (pid 1 of one), empty tmpfs over ``/run`` and ``/dev/shm``.
- lifetime: a supervisor (this module's ``main``, or the fork server's child) is a child
  subreaper: what the candidate leaves behind, after ``setsid`` too, is re-parented to it and
  killed when the candidate's main process ends. In a pid namespace, the namespace's end does it.

A run needs the file rules, and either a pid namespace or Landlock ABI 6 (so the candidate cannot
kill its supervisor and escape with its daemons). Without that, ``available()`` says why and the
sandbox refuses to start candidates unless the operator opted in (``--allow-unconfined`` /
``KERNELPRO_ALLOW_UNCONFINED=1``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same on x86_64 and aarch64
_PATH_BENEATH = 1
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
_REFER, _TRUNCATE = 1 << 13, 1 << 14
# IOCTL_DEV (ABI 5) is left unhandled: the CUDA driver talks to /dev/nvidia* through ioctls.
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE
_NET_TCP = 1 | 2  # bind, connect
_SCOPE = 1 | 2  # abstract unix sockets, signals
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
_ALLOW_UNCONFINED = [False]
_TOOL_ONLY: set[str] = set()

# What a candidate may read, besides the Python installation, the CUDA toolkit, the profilers' own
# folders and its own files; and every entry of /dev but these (``_dev_entries``): POSIX shared memory
# and message queues are other processes' data (a file of the runner's user in /dev/shm was readable).
# Not /opt: self-hosted runners are installed there (/opt/actions-runner: the runner's registration key,
# its logs, the checkout and $RUNNER_TEMP with the results), and a candidate read them into its error
# message (a red-team probe, session 27); what kernelpro needs there is named on its own: a Python
# (its prefix), and NVIDIA's tools, whose installers put Nsight Compute in /opt/nvidia (the H200's
# ncu is /opt/nvidia/nsight-compute/2025.3.1; a launcher script elsewhere may start it from there).
SYSTEM_READABLE = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt/nvidia")
# Variables the Actions runner sets that name folders inside its own installation (config.sh's folder,
# which holds .runner and .credentials_rsaparams beside _work).
_RUNNER_VARIABLES = ("RUNNER_TEMP", "RUNNER_WORKSPACE", "GITHUB_WORKSPACE", "RUNNER_TOOL_CACHE")
_DEV_HIDDEN = ("shm", "mqueue", "mem", "kmem", "port", "kmsg")
# Mounted empty (tmpfs) in a child's own mount namespace: named unix sockets of the runner's services
# (/run/user/UID/systemd/private, dbus) and other processes' shared memory are not there to find.
_EMPTY_MOUNTS = ("/run", "/dev/shm")
# Character devices a process may open for writing: the null devices and the GPU's.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/nvidia*",
            "/dev/nvidia-caps/*", "/dev/dri/*")


class ConfinementError(OSError):
    """The confinement could not be applied: the process must not go on."""


@dataclass(frozen=True)
class Policy:
    """What a confined process may touch."""

    readable: tuple[str, ...]
    """Directories (and files) it may read and execute."""
    writable: tuple[str, ...]
    """Directories it may read, write, create and remove files in."""
    devices: tuple[str, ...] = ()
    """Device files it may open for writing."""
    proc: bool = False
    """All of /proc writable: a profiler (ncu, compute-sanitizer) that starts the program it
    profiles, which confines itself again, to its own threads' files, as its first act."""
    tool_writable: tuple[str, ...] = ()
    """Folders only the profiler's layer (``proc``) may write, never the harness it starts: ncu's
    log, which the orchestrator reads back (a candidate swapped it for a link to an SSH key)."""
    unix: str = field(default_factory=lambda: unix_sockets())
    """The filter's unix socket setting (``UNIX_SOCKETS``), chosen where the policy is made: under
    Landlock /dev cannot be listed, so a confined process that looked for a GPU itself found none,
    refused CUDA its unix socket, and every GPU candidate failed with error 304 (session 17)."""

    def to_json(self) -> str:
        return json.dumps({"readable": self.readable, "writable": self.writable, "devices": self.devices,
                           "proc": self.proc, "tool_writable": self.tool_writable, "unix": self.unix})

    @staticmethod
    def from_json(text: str) -> Policy:
        d = json.loads(text)
        return Policy(tuple(d["readable"]), tuple(d["writable"]), tuple(d.get("devices", ())), bool(d.get("proc")),
                      tuple(d.get("tool_writable", ())), str(d.get("unix", UNIX_SOCKETS)))


@dataclass(frozen=True)
class Availability:
    """Which confinement this machine gives a candidate."""

    landlock: int
    """Landlock ABI version (0: none)."""
    pid_namespace: bool
    """Candidates get a pid namespace of their own (unshare or the fork server)."""
    sufficient: bool
    """Files are confined and no process of a candidate can outlive it."""
    description: str
    """One line for the report and the PR comment."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is absent or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(_SYS_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(v) if v > 0 else 0


def available(pid_namespace: bool) -> Availability:
    abi = landlock_abi()
    parts = []
    if abi:
        parts.append(f"Landlock ABI {abi} (read-only world except the work directory, no access to other "
                     f"processes{', no TCP' if abi >= 4 else ''}{', signals scoped' if abi >= 6 else ''})")
    else:
        parts.append("no Landlock (kernel < 5.13 or not in the boot's lsm= list): files are NOT confined")
    parts.append("pid namespace" if pid_namespace else
                 ("subreaper supervisor" if abi >= 6 else "no pid namespace and no Landlock signal scoping: "
                  "a candidate's daemons can outlive it"))
    if abi:
        parts.append(seccomp_description())
    ok = abi >= 1 and (pid_namespace or abi >= 6)
    return Availability(abi, pid_namespace, ok, " + ".join(parts))


def required(pid_namespace: bool) -> Availability:
    """What confines the next child; ``environment.SandboxError`` where that is not enough and the
    operator did not opt in (every child: the sandbox's and the energy arms'). Every kernelpro module
    is imported first (``preload``): nothing of the installation is read from disk again after a
    candidate ran (belt and braces: the installation is read-only to it)."""
    import dataclasses

    from .environment import SandboxError

    preload()
    got = available(pid_namespace)
    root = runner_root()
    under = exposed_runner([*SYSTEM_READABLE, *_installation()], root)
    if got.sufficient and under is None:
        return got
    if not unconfined_allowed():
        raise SandboxError(REFUSAL.format(why=got.description) if under is None else
                           RUNNER_READABLE.format(root=root, under=under, system=", ".join(SYSTEM_READABLE)))
    return dataclasses.replace(got, description=f"UNCONFINED (operator opted in): {got.description}")


def runner_root(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The Actions runner's own folder (the one holding ``.runner`` and its key), found upward from the
    folders its variables name; None outside a runner."""
    for var in _RUNNER_VARIABLES:
        here = env.get(var)
        while here and os.path.isabs(here):
            here = os.path.realpath(here)
            if os.path.isfile(os.path.join(here, ".runner")) or os.path.isfile(os.path.join(here, ".credentials")):
                return here
            up = os.path.dirname(here)
            here = up if up != here else None
    return None


def exposed_runner(readable: Iterable[str], root: str | None) -> str | None:
    """The readable folder that holds the runner's own folder ``root`` (all of it, key included), if any."""
    if root is None:
        return None
    return next((r for r in readable if os.path.commonpath([os.path.realpath(r), root]) == os.path.realpath(r)), None)


RUNNER_READABLE = ("candidates were not run: the Actions runner's own folder {root} (its registration key "
                   ".credentials_rsaparams, its logs, the checkout and the results) lies under {under}, which "
                   "every candidate may read. Fix: install the runner outside {system} (in its user's home, "
                   "say: ./config.sh there), see docs/github.md 'Runner hardening'; or accept the risk with "
                   "--allow-unconfined (KERNELPRO_ALLOW_UNCONFINED=1)")


def allow_unconfined(allow: bool) -> None:
    """The operator's explicit opt-in to run candidates where the confinement is unavailable."""
    _ALLOW_UNCONFINED[0] = allow


def unconfined_allowed() -> bool:
    return _ALLOW_UNCONFINED[0]


REFUSAL = ("candidates were not run: {why}. Fix: run on a kernel with Landlock enabled (Linux >= 5.13 with "
           "landlock in /sys/kernel/security/lsm; >= 6.12 or unprivileged user namespaces for process "
           "confinement), see docs/github.md 'Runner hardening'; or accept the risk with --allow-unconfined "
           "(KERNELPRO_ALLOW_UNCONFINED=1): a pull request's code then runs with the runner user's rights")


def _existing(paths: Iterable[str | os.PathLike[str] | None]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if not p:
            continue
        with_links = os.path.abspath(p)
        for q in (with_links, os.path.realpath(with_links)):
            if os.path.exists(q) and q not in out:
                out.append(q)
    return out


def _installation() -> list[str]:
    """The interpreter, its libraries, and kernelpro's own package folders (an editable install maps
    them outside site-packages). '' (the current directory) is not among them."""
    import kernelpro

    paths: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    paths += list(kernelpro.__path__)
    for sub in ("runner", "bot"):
        mod = sys.modules.get(f"kernelpro.{sub}")
        if mod is not None:
            paths += list(getattr(mod, "__path__", []))
    return _existing([*paths, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")])


def tool_only(folder: str | os.PathLike[str]) -> None:
    """``folder`` (given to ``policy`` as writable) is written by the profiler's layer only (ncu's
    log), never by the harness and candidate it starts, which cannot read it either."""
    _TOOL_ONLY.add(os.path.realpath(folder))


def _dev_entries() -> list[str]:
    """Every entry of /dev now but shared memory and message queues, block devices and the kernel's
    memory and log; links are left out (their targets, /proc/self/fd for one, are covered, or not, on
    their own). A candidate of a root runner without a user namespace is root: a readable disk
    (/dev/vda) or /dev/mem would give it every file the runner has (a red-team lead, session 27)."""
    out = []
    with contextlib.suppress(OSError), os.scandir("/dev") as it:
        for e in it:
            if e.name in _DEV_HIDDEN or e.is_symlink():
                continue
            with contextlib.suppress(OSError):
                if stat.S_ISBLK(e.stat(follow_symlinks=False).st_mode):
                    continue
            out.append(e.path)
    return sorted(out)


def policy(writable: Sequence[str | os.PathLike[str] | None], readable: Sequence[str | os.PathLike[str]] = (),
           tools: Sequence[str] = ()) -> Policy:
    """The policy of a candidate whose own directories are ``writable`` (made here if missing: the
    candidate could not make them itself; those marked ``tool_only`` go to the profiler's layer
    alone); ``tools``: programs it runs under (ncu), whose folders it may read wherever they are
    installed."""
    import kernelpro.runner  # noqa: F401 - its folder must be readable for the harness

    for w in writable:
        if w:
            os.makedirs(w, exist_ok=True)

    devices = [d for pat in _DEVICES for d in glob.glob(pat)]
    homes = [os.path.dirname(os.path.realpath(shutil.which(t) or t)) for t in tools]
    mine = [w for w in writable if w and os.path.realpath(w) not in _TOOL_ONLY]
    theirs = [w for w in writable if w and os.path.realpath(w) in _TOOL_ONLY]
    dev = _dev_entries()
    return Policy(tuple(_existing([*SYSTEM_READABLE, *dev, *_installation(), *readable, *homes])),
                  tuple(_existing(mine)), tuple(_existing(devices)), tool_writable=tuple(_existing(theirs)))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict(p: Policy) -> int:
    """Confine the calling process (and all it starts) to ``p`` for good; the ABI used. Raises
    ConfinementError where Landlock is missing or refuses."""
    abi = landlock_abi()
    if abi < 1:
        raise ConfinementError("Landlock is not available in this kernel")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fs = _FS_ABI1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(fs, _NET_TCP if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = libc.syscall(ctypes.c_long(_SYS_CREATE), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise ConfinementError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        file_rights = _FILE_RIGHTS & fs
        # The CUDA driver opens files of its own threads under /proc/self/task for writing, truncating
        # them (fopen "w"): without write and truncate there, CUDA's initialisation fails with error
        # 304 (seen on the H200: a truncate right missing was enough). Opened here, "self" is the process
        # being confined; a profiler's layer allows all of /proc for the program it starts, which
        # then confines itself again (command()).
        procs = ("/proc",) if p.proc else ("/proc/self/task",)
        writable = (*p.writable, *p.tool_writable) if p.proc else p.writable
        for rights, paths in ((_READ, p.readable), (fs, writable), (_WRITE_FILE | _READ_FILE | (_TRUNCATE & fs), p.devices),
                              (_WRITE_FILE | _READ_FILE | _READ_DIR | (_TRUNCATE & fs), procs)):
            for path in paths:
                try:
                    pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # gone since the policy was made: nothing to allow
                try:
                    allowed = rights if os.path.isdir(path) else rights & file_rights
                    rule = _PathBeneath(allowed, pfd)
                    if libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(fd), ctypes.c_int(_PATH_BENEATH),
                                    ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                        raise ConfinementError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
                finally:
                    os.close(pfd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT), ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise ConfinementError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)
    # The profiler's own layer (ncu, NVIDIA's binary, talking to the library it injects into the
    # harness) keeps its sockets; the harness below it installs the whole filter before any
    # candidate code runs.
    seccomp_filter(sockets=not p.proc, unix=p.unix)
    return abi


# --------------------------------------------------------------------------- seccomp
#
# Landlock (up to ABI 7) leaves out: UDP and every socket family but TCP (without a network
# namespace, Ubuntu 24.04's default, a candidate sent UDP to the host's loopback), connect() to a
# named unix socket (the systemd user manager's /run/user/UID/systemd/private starts unconfined
# services that outlive the job), and file metadata: chmod, chown, utime and xattr calls on any file
# of the runner's user (a candidate made kernelpro's installed report.py 0666 and ~/.ssh 0777). A
# classic BPF seccomp filter, written here by hand (no libseccomp), covers them in the confined
# process and everything it starts.

UNIX_SOCKETS = "refuse"
"""socket(AF_UNIX, ...) where the host has no NVIDIA GPU: "refuse" (socketpair stays), "stream"
(SOCK_STREAM only), or "any"."""

UNIX_SOCKETS_GPU = "any"
"""The same on a host with an NVIDIA GPU. CUDA's initialisation fails (``cudaGetDeviceCount``: error
304, "OS call failed") when its own unix socket call is refused, and when only stream sockets are
allowed: on the H200 CUDA and Triton ran under the whole confinement with "any", under neither of the
others (benchmarks/harden_probe.py, benchmarks/results-h200-session16/). With ``REFUSE_CONNECT`` such
a socket reaches nothing of the host's: what stays open is a datagram sent with sendto/sendmsg to a
named datagram socket (journald's) on a host where /run cannot be mounted empty (no namespaces)."""

REFUSE_CONNECT = True
"""connect() refused (ECONNREFUSED, as where no daemon listens) for every family: no named socket of
the host (the systemd user manager's, dbus) can be reached, even where /run could not be mounted
empty; TCP is refused by Landlock and the network namespace anyway. ncu's injection into the
harness works under it (the GPU confinement tests, session 16)."""


def unix_sockets() -> str:
    """This host's setting: ``UNIX_SOCKETS_GPU`` where an NVIDIA device exists, else ``UNIX_SOCKETS``."""
    return UNIX_SOCKETS_GPU if glob.glob("/dev/nvidia[0-9]*") else UNIX_SOCKETS


_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, _PR_GET_SECCOMP = 22, 2, 21
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _EACCES, _ENOSYS, _ECONNREFUSED = 1, 13, 38, 111
_AF_UNIX, _SOCK_STREAM, _SOCK_TYPE_MASK = 1, 1, 0xF
_LD_W_ABS, _JEQ, _JGE, _RET, _AND = 0x20, 0x15, 0x35, 0x06, 0x54  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K, BPF_ALU|AND|K
_X32_BIT = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers, refused as a whole
# shmget, semget, msgget: System V IPC, refused where unix sockets are (a host without an NVIDIA GPU,
# where nothing a candidate needs uses it): without an IPC namespace its objects outlive the candidate,
# hold memory no watchdog sees, and carry messages to the next one (a red-team probe, session 27).
_SYSV = {"x86_64": (29, 64, 68), "aarch64": (194, 190, 186)}
# (AUDIT_ARCH_*, socket, calls made a no-op, io_uring_setup/enter/register, utime calls, connect). socketcall does not
# exist on either; fchmodat2 (452), setxattrat (463) and removexattrat (466) are the same on both.
_ARCHES = {
    "x86_64": (0xC000003E, 41,
               (90, 91, 268, 452,  # chmod, fchmod, fchmodat, fchmodat2
                92, 93, 94, 260,  # chown, fchown, lchown, fchownat
                188, 189, 190, 197, 198, 199, 463, 466),  # set/remove xattr (path, link, fd, at)
               (425, 426, 427),
               (132, 235, 280, 261),  # utime, utimes, utimensat, futimesat
               42),  # connect
    "aarch64": (0xC00000B7, 198,
                (52, 53, 452,  # fchmod, fchmodat, fchmodat2 (no chmod)
                 55, 54,  # fchown, fchownat
                 5, 6, 7, 14, 15, 16, 463, 466),
                (425, 426, 427),
                (88,),  # utimensat (no utime, utimes, futimesat)
                203),  # connect
}


def _seccomp_arch() -> str | None:
    import platform

    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if sys.platform.startswith("linux") and machine in _ARCHES else None


@functools.lru_cache(maxsize=1)
def seccomp_available() -> str | None:
    """None where the filter can be installed here, else why not."""
    arch = _seccomp_arch()
    if arch is None:
        import platform

        return f"no filter written for {platform.machine() or 'this machine'}"
    if _libc().prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        return "the kernel has no seccomp"
    return None


def seccomp_description() -> str:
    """The filter's part of the report's confinement line."""
    why = seccomp_available()
    if why is not None:
        return f"seccomp filter unavailable ({why}): UDP, unix sockets and chmod/chown/utime/xattr NOT confined"
    sockets = {"refuse": "no sockets but socketpair, no System V IPC",
               "stream": "no sockets but unix stream ones and socketpair",
               "any": "no sockets but unix ones and socketpair"}[unix_sockets()]
    if REFUSE_CONNECT:
        sockets += ", no connect"
    return f"seccomp ({sockets}, no io_uring, no chmod/chown/utime/xattr)"


def _program(arch: str, sockets: bool, unix: str) -> list[tuple[int, int, int, int]]:
    """The filter: (code, jt, jf, k) instructions. Each test falls through to its own return, or
    skips it (jf=1): no jump targets to compute."""
    audit, socket_nr, no_ops, uring, times, connect_nr = _ARCHES[arch]
    prog = [(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
            (_JEQ, 1, 0, audit), (_RET, 0, 0, _RET_ERRNO | _ENOSYS),  # another ABI (int 0x80): nothing
            (_LD_W_ABS, 0, 0, 0)]  # seccomp_data.nr
    if arch == "x86_64":
        prog += [(_JGE, 0, 1, _X32_BIT), (_RET, 0, 0, _RET_ERRNO | _ENOSYS)]
    for nr in no_ops:  # errno 0: the call returns 0 and is never run (refusing it would break ld, caches)
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _RET_ERRNO | 0)]
    for nr in uring:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _RET_ERRNO | _ENOSYS)]
    # utime is refused, not made a no-op: Path.touch takes a successful utime for "the file exists"
    # and never created the torch extension's .built marker (every build ran again); on EPERM it
    # creates the file as it should.
    for nr in times:
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _RET_ERRNO | _EPERM)]
    if sockets and unix == "refuse":
        for nr in _SYSV[arch]:
            prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _RET_ERRNO | _EACCES)]
    if sockets and REFUSE_CONNECT:
        prog += [(_JEQ, 0, 1, connect_nr), (_RET, 0, 0, _RET_ERRNO | _ECONNREFUSED)]
    if sockets:
        prog += [(_JEQ, 1, 0, socket_nr), (_RET, 0, 0, _RET_ALLOW),
                 (_LD_W_ABS, 0, 0, 16)]  # args[0], the family (an int: its low word, little-endian)
        if unix == "any":
            prog += [(_JEQ, 0, 1, _AF_UNIX), (_RET, 0, 0, _RET_ALLOW)]
        elif unix == "stream":  # args[1], the type, less SOCK_NONBLOCK and SOCK_CLOEXEC
            prog += [(_JEQ, 0, 4, _AF_UNIX), (_LD_W_ABS, 0, 0, 24), (_AND, 0, 0, _SOCK_TYPE_MASK),
                     (_JEQ, 0, 1, _SOCK_STREAM), (_RET, 0, 0, _RET_ALLOW)]
        prog += [(_RET, 0, 0, _RET_ERRNO | _EACCES)]
    else:
        prog += [(_RET, 0, 0, _RET_ALLOW)]
    return prog


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_filter(sockets: bool = True, unix: str | None = None) -> bool:
    """Install the filter on the calling thread (and all it starts), after PR_SET_NO_NEW_PRIVS;
    ``sockets`` False leaves socket() alone; ``unix``: the unix socket setting, where None this
    host's (``unix_sockets``, which needs /dev listable: call it before Landlock). False where this
    machine has none (the report says so: ``seccomp_description``); ConfinementError where the
    kernel refuses it."""
    arch = _seccomp_arch()
    if arch is None or seccomp_available() is not None:
        return False
    prog = _program(arch, sockets, unix or unix_sockets())
    insns = (_SockFilter * len(prog))(*(_SockFilter(*i) for i in prog))
    fprog = _SockFprog(len(prog), ctypes.cast(insns, ctypes.POINTER(_SockFilter)))
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True


def empty_mounts() -> None:
    """In a mount namespace of its own (before Landlock, which forbids mounting): empty tmpfs over
    ``_EMPTY_MOUNTS``. Best effort: where it fails the Landlock rules still hide /dev/shm, and the
    filter refuses connecting to the sockets of /run."""
    libc = _libc()
    for where in _EMPTY_MOUNTS:
        if os.path.isdir(where) and not os.path.islink(where):
            libc.mount(b"tmpfs", where.encode(), b"tmpfs", ctypes.c_ulong(2 | 4 | 8), b"mode=755,size=1m")


# --------------------------------------------------------------------------- the supervisor


def descendants(root: int) -> list[int]:
    """Every live process below ``root``: its children, theirs, and so on (zombies only wait to be reaped)."""
    # runner/procstat.py's reading, written again: the supervisor's interpreter loads this file alone (_BOOT).
    below: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    line = f.read()
                state, ppid = line[line.rindex(")") + 2 :].split()[:2]
                if state != "Z":
                    below.setdefault(int(ppid), []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        for pid in below.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def stop_below(root: int) -> set[int]:
    """SIGSTOP every process below ``root``, again until a pass finds none it had not stopped (a stopped
    process forks nothing); the pids it stopped. Stop ``root`` first where it must fork no more either."""
    stopped: set[int] = set()
    while new := [pid for pid in descendants(root) if pid not in stopped]:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped.update(new)
    return stopped


def kill_descendants() -> None:
    """SIGKILL every process below this one (a subreaper: orphans are its children) until none is left.
    The whole tree is stopped before any of it is killed: a chain of processes whose last link forks
    a new one whenever one above it dies outran a kill of the direct children per pass, and lived on
    past its evaluation where no pid namespace ends it (a red-team probe, session 27). A stopped
    process forks nothing, so the stopping ends once a pass finds none it had not stopped."""
    me = os.getpid()
    while True:
        for pid in stop_below(me):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.001)  # one re-parented since the listing: list again


def supervise() -> None:
    """Fork; return in the child. The parent, a subreaper, waits for the child, kills whatever the
    child left behind (daemons after ``setsid`` included) and exits with the child's status; on
    SIGTERM/SIGINT/SIGHUP it kills the whole tree first."""
    libc = _libc()
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    pid = os.fork()
    if pid == 0:
        return

    def stop(*_: object) -> None:
        kill_descendants()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGKILL)  # as if killed with the rest: the caller sees -9

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    status = 0
    while True:
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if got == pid:
            status = st
            break
    kill_descendants()
    if os.WIFSIGNALED(status):  # die the same way, so the caller sees what killed it
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def command(argv: Sequence[str], p: Policy, supervised: bool = True) -> list[str]:
    """``argv`` run confined to ``p`` under a supervisor. ``python -m MODULE ...`` (the harness)
    confines itself in its own interpreter before it imports the module (no second interpreter to
    start); anything else (a profiler that starts the harness, a tool) is started by a supervisor
    of its own, a fresh interpreter that needs none of the orchestrator's imports. ``supervised``
    False: the module runs without a supervisor of its own, for a harness that a profiler starts
    under the profiler's supervisor (ncu's ``application-only`` profiles the process it started,
    which must be the harness, not a supervisor that forks it; orphans still reach the outer one)."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        return [sys.executable, "-c", _RUN_MODULE, p.to_json(), "1" if supervised else "0", *argv[2:]]
    return [sys.executable, "-I", "-S", "-c", _BOOT, p.to_json(), *argv]


def enter(policy_json: str, supervised: bool = True) -> None:
    """In a process about to run a candidate's code: supervise (unless pid 1 of a namespace, whose
    end kills everything in it, or ``supervised`` is False) and confine; a process that cannot be
    confined ends here."""
    try:
        if supervised and os.getpid() != 1:
            supervise()
        if os.getpid() == 1:  # pid 1 of a pid namespace, in a mount namespace of its own (unshare --mount-proc)
            empty_mounts()
        lock_down(Policy.from_json(policy_json))
    except OSError as e:
        print(f"kernelpro confinement: {e}", file=sys.stderr, flush=True)
        os._exit(70)


def lock_down(p: Policy) -> None:
    """This process confined to ``p``: as root, the capabilities below dropped first (from it and from
    what it executes), then Landlock and the filter. Every process that runs a candidate's code comes
    here, a fork server's child too (which had kept all of root's capabilities, session 27)."""
    if os.geteuid() == 0:
        drop_capabilities()
    restrict(p)


# Capabilities no candidate, profiler or tool needs, dropped from the bounding set of a process that
# runs as root (a root runner's ncu child): what it executes never has them. Loading a kernel module,
# raw I/O, device nodes, the network stack, BPF would each undo any confinement. CAP_SYS_ADMIN stays:
# ncu reads the GPU's counters with it where the driver restricts them to administrators.
_DROPPED_CAPS = (12, 13, 16, 17, 19, 22, 25, 27, 29, 30, 32, 33, 34, 39, 40)
PR_CAPBSET_DROP = 24


_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """The capabilities above gone from this process too, not only from what it executes: the harness
    runs the candidate in the process that confined itself, and kept CAP_SYS_MODULE and the rest in its
    effective set as root (a red-team lead, session 27)."""
    libc = _libc()
    for cap in _DROPPED_CAPS:
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: an older kernel
            raise ConfinementError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise ConfinementError(ctypes.get_errno(), "capget failed")
    for cap in _DROPPED_CAPS:
        word, bit = divmod(cap, 32)
        for kind in ("effective", "permitted", "inheritable"):
            setattr(data[word], kind, getattr(data[word], kind) & ~(1 << bit) & 0xFFFFFFFF)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise ConfinementError(ctypes.get_errno(), "capset failed")


# argv: POLICY SUPERVISED(1|0) MODULE ARGS...; the module runs as `python -m MODULE ARGS...` would run it.
_RUN_MODULE = ("import sys\nfrom kernelpro.runner.confinement import enter\nenter(sys.argv.pop(1), sys.argv.pop(1) == '1')\n"
               "import runpy\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")


# The supervisor's interpreter imports this file alone, not kernelpro's packages (-I -S: no site,
# no user paths, nothing from the current directory).
_BOOT = ("import sys, importlib.util as u; s = u.spec_from_file_location('kp_confinement', " + repr(__file__) +
         "); m = sys.modules['kp_confinement'] = u.module_from_spec(s); s.loader.exec_module(m); m.main(sys.argv[1:])")


def main(args: Sequence[str]) -> None:
    """``POLICY_JSON ARGV...``: supervise, confine, exec."""
    enter(args[0])
    argv = list(args[1:])
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"kernelpro confinement: {e}", file=sys.stderr, flush=True)
        os._exit(70)


@functools.lru_cache(maxsize=1)
def preload() -> tuple[str, ...]:
    """Import every kernelpro module now, before any candidate runs, so that nothing of the
    installation is read from disk again once code of a pull request has run; the modules that could
    not be imported (an optional dependency missing), which are then never used."""
    import importlib
    import pkgutil

    missing: list[str] = []
    # kernelpro.runner and kernelpro.bot are mapped from folders beside kernelpro/ (package-dir), so
    # each is walked from its own path.
    for name in ("kernelpro", "kernelpro.runner", "kernelpro.bot"):
        pkg = importlib.import_module(name)
        for mod in pkgutil.walk_packages(pkg.__path__, f"{name}.", onerror=missing.append):
            try:
                importlib.import_module(mod.name)
            except Exception:  # noqa: BLE001 - an optional dependency absent: that module is never used
                missing.append(mod.name)
    return tuple(missing)


def run_tool(argv: Sequence[str], read: Sequence[str | os.PathLike[str]], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A binary tool (cuobjdump, nvdisasm, nm) on files a candidate made: confined like the candidate
    (it reads ``read`` and the system, writes only a scratch folder that is its TMPDIR and HOME),
    with the scrubbed environment: a crafted binary that takes the tool over gains nothing. Unconfined
    only where Landlock is missing (the operator opted in, or no candidate could have run)."""
    import tempfile

    from .environment import scrubbed_env

    if shutil.which(argv[0]) is None:  # as subprocess would say it, not as the supervisor's exit code
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    with tempfile.TemporaryDirectory(prefix="kernelpro-tool-") as scratch:
        env = scrubbed_env({"TMPDIR": scratch, "HOME": scratch})
        cmd = command(argv, policy([scratch], read)) if landlock_abi() else list(argv)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=scratch,
                              stdin=subprocess.DEVNULL)
