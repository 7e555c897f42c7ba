"""Confinement of a worker process before candidate code loads: scrubbed environment, a private /tmp, Landlock,
no network.

Every function here acts on the calling process only, is applied inside the worker (never in the evaluator),
and reports what it did rather than raising, so the Verdict can state how the candidate was confined.
Order matters: `confine()` applies them so that each step still has the rights it needs
(unshare and mount need CAP_SYS_ADMIN, so capabilities go last, and seccomp, which denies mount, after the
private /tmp; Landlock and seccomp need no_new_privs first).

Two things a worker must do itself, because they cannot be undone from inside:
- spawn the worker with `env=scrub_env(os.environ)`: /proc/self/environ shows the environment the process was
  *started* with, so deleting a key from os.environ later does not hide it (`confine` checks and reports this);
- initialise CUDA (e.g. `torch.cuda.init()`) before confining, so the driver opens its devices first.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import re
import resource
import socket
import sys
import tempfile
from pathlib import Path

# --- environment -----------------------------------------------------------------------------------------

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "COOKIE", "SESSION", "AUTH",
                 "PRIVATE")
_SECRET_PREFIXES = ("AWS_", "OPENAI_", "HF_", "HUGGING", "ANTHROPIC_", "GITHUB_", "GH_", "AZURE_", "GOOGLE_",
                    "GCP_", "GCLOUD_", "WANDB_", "DEEPSEEK_", "MISTRAL_", "GROQ_", "TOGETHER_", "COHERE_",
                    "GEMINI_", "OPENROUTER_", "SSH_", "GPG_", "NPM_", "PYPI_", "TWINE_", "DOCKER_", "KUBE",
                    "VAULT_", "DATABASE_", "PG", "MYSQL_", "REDIS_", "SLACK_", "SENTRY_")
# Never dropped even if they match a pattern above (they configure the toolchain, not credentials).
_KEEP = {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
         "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PYTHONPATH", "PYTHONHASHSEED", "OMP_NUM_THREADS",
         "MKL_NUM_THREADS", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "MAX_JOBS", "VIRTUAL_ENV", "CONDA_PREFIX"}
_KEEP_PREFIXES = ("CUDA", "NVIDIA", "NCCL_", "TORCH", "TRITON", "KERNELRL_", "PYTORCH_", "CUBLAS", "CUDNN",
                  "LC_", "XDG_", "PYENV", "NVCC")
# A value that looks like a credential is dropped whatever its name (e.g. an exported `sk-...`).
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|"
                           r"hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|"
                           r"github_pat_[A-Za-z0-9_]{20,})")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable name looks like it holds a credential."""
    up = name.upper()
    if up in _KEEP or up.startswith(_KEEP_PREFIXES):
        return False
    return any(w in up for w in _SECRET_WORDS) or up.startswith(_SECRET_PREFIXES)


def scrub_env(environ) -> dict:
    """A copy of `environ` without API keys, tokens, passwords or other credentials; toolchain variables kept."""
    return {k: v for k, v in environ.items()
            if not is_secret_name(k) and not _SECRET_VALUE.match(str(v))}


def secrets_in_initial_environ() -> list[str]:
    """Names of credential-like variables still visible in /proc/self/environ (the environment at exec)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return []
    names = []
    for entry in raw.split(b"\0"):
        name, _, value = entry.partition(b"=")
        if not name:
            continue
        n, v = name.decode(errors="replace"), value.decode(errors="replace")
        if is_secret_name(n) or _SECRET_VALUE.match(v):
            names.append(n)
    return names


def scratch_env(scratch_dir: str | os.PathLike) -> dict:
    """Variables pointing every tool's cache and temporary files into the scratch directory."""
    s = Path(scratch_dir)
    return {
        # Hyphenated names: the scratch directory is often the cwd, and a folder named like a package
        # (e.g. "triton") would shadow it as a namespace package.
        "TMPDIR": str(s / "tmp"),
        "HOME": str(s / "home"),
        "XDG_CACHE_HOME": str(s / "home" / ".cache"),
        "TORCH_EXTENSIONS_DIR": str(s / "cache-torch-extensions"),
        "TRITON_CACHE_DIR": str(s / "cache-triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(s / "cache-inductor"),
        "CUDA_CACHE_PATH": str(s / "cache-cuda"),
        "PYTHONPYCACHEPREFIX": str(s / "cache-pycache"),
    }


# --- syscalls --------------------------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

_X86_64 = platform.machine() in ("x86_64", "AMD64")
_AARCH64 = platform.machine() in ("aarch64", "arm64")
# x86_64 and aarch64 share the Landlock numbers (they were added to the generic table).
_SYS = {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
        "unshare": 272 if _X86_64 else 97, "capset": 126 if _X86_64 else 91}

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
MNT_DETACH = 2


def _syscall(name: str, *args) -> int:
    return _libc.syscall(ctypes.c_long(_SYS[name]), *args)


def _err() -> str:
    e = ctypes.get_errno()
    return f"{os.strerror(e)} (errno {e})"


def _no_new_privs() -> bool:
    return _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0


# --- Landlock --------------------------------------------------------------------------------------------

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13      # ABI 2
_FS_TRUNCATE = 1 << 14   # ABI 3
_NET_BIND_TCP = 1 << 0   # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1 << 0

_READ = _FS_READ_FILE | _FS_READ_DIR
_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if sys.platform != "linux" or not (_X86_64 or _AARCH64):
        return 0
    v = _syscall("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(v), 0)


def _write_rights(abi: int) -> int:
    rights = (_FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR | _FS_MAKE_DIR | _FS_MAKE_REG
              | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK | _FS_MAKE_SYM)
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    return rights


class _Ruleset:
    def __init__(self, handled_fs: int, handled_net: int, scoped: int, abi: int):
        attr = _RulesetAttr(handled_fs, handled_net, scoped)
        size = 8 if abi < 4 else (16 if abi < 6 else 24)
        self.fd = int(_syscall("landlock_create_ruleset", ctypes.byref(attr), ctypes.c_size_t(size),
                               ctypes.c_uint32(0)))
        if self.fd < 0:
            raise OSError(f"landlock_create_ruleset failed: {_err()}")
        self.handled = handled_fs

    def allow(self, path: str | os.PathLike, rights: int) -> bool:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                rights &= _FILE_ONLY
            attr = _PathBeneathAttr(rights & self.handled, fd)
            return _syscall("landlock_add_rule", ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                            ctypes.byref(attr), ctypes.c_uint32(0)) == 0
        finally:
            os.close(fd)

    def enforce(self) -> None:
        if not _no_new_privs():
            raise OSError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {_err()}")
        if _syscall("landlock_restrict_self", ctypes.c_int(self.fd), ctypes.c_uint32(0)) != 0:
            raise OSError(f"landlock_restrict_self failed: {_err()}")

    def close(self) -> None:
        os.close(self.fd)


def landlock_restrict_writes(allowed_dirs, hide_processes: bool = True, allow_shm: bool = True,
                             deny_tcp: bool = True) -> tuple[bool, str]:
    """Landlock: reads allowed everywhere, writes only beneath `allowed_dirs` and to existing /dev files.

    hide_processes: also deny reads of other processes' /proc/<pid> (their environ, memory, cmdline);
    allow_shm: let the process create files in /dev/shm (POSIX semaphores, shared memory);
    deny_tcp: (ABI >= 4) no TCP bind or connect at all. ABI >= 6 also scopes signals and abstract
    unix sockets to this process and its children. Returns (applied, reason).
    """
    abi = landlock_abi()
    if abi <= 0:
        return False, f"Landlock is not available on this kernel ({platform.release()}, {_err()})"
    write = _write_rights(abi)
    handled = write | (_READ if hide_processes else 0)
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if (deny_tcp and abi >= 4) else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    try:
        rs = _Ruleset(handled, handled_net, scoped, abi)
    except OSError as e:
        return False, str(e)
    try:
        if hide_processes:
            _allow_reads_except_other_processes(rs)
        for d in allowed_dirs:
            Path(d).mkdir(parents=True, exist_ok=True)
            if not rs.allow(d, write | _READ):
                return False, f"cannot add a Landlock rule for {d}: {_err()}"
        rs.allow("/dev", _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0) | _READ)
        if allow_shm and os.path.isdir("/dev/shm"):
            rs.allow("/dev/shm", write | _READ)
        rs.enforce()
    except OSError as e:
        return False, str(e)
    finally:
        rs.close()
    return True, f"Landlock ABI {abi}"


def _allow_reads_except_other_processes(rs: _Ruleset) -> None:
    # A rule on "/" would cover /proc/<pid> of every process, so grant each top-level entry but /proc,
    # then every /proc entry that is not a process, then this process's own /proc/<pid>.
    for name in os.listdir("/"):
        if name != "proc":
            rs.allow(os.path.join("/", name), _READ)
    rs.allow("/proc", _FS_READ_DIR)  # listing processes is harmless; reading their files is not
    for name in os.listdir("/proc"):
        if not name.isdigit() and name not in ("self", "thread-self"):
            rs.allow(os.path.join("/proc", name), _READ)
    rs.allow(f"/proc/{os.getpid()}", _READ)


# --- a private /tmp ---------------------------------------------------------------------------------------

def _mount(source: str | None, target: str, flags: int) -> None:
    if _libc.mount(source and os.fsencode(source), os.fsencode(target), None, flags, None) != 0:
        raise OSError(f"mount {source or ''} {target} failed: {_err()}")


def _own_mount_namespace() -> str:
    """Enter a new mount namespace (in a new user namespace where this process may not create one directly)."""
    if _syscall("unshare", ctypes.c_int(CLONE_NEWNS)) == 0:
        return "mount namespace"
    first = _err()
    uid, gid = os.getuid(), os.getgid()
    if _syscall("unshare", ctypes.c_int(CLONE_NEWUSER | CLONE_NEWNS)) != 0:
        raise OSError(f"unshare(CLONE_NEWNS) failed: {first}; with a user namespace: {_err()}")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    return "mount namespace in a user namespace"


def _under_tmp(paths, tmp: Path) -> list[Path]:
    """The existing directories among `paths` that lie beneath `tmp`, resolved, outermost first."""
    found = set()
    for p in paths:
        try:
            rp = Path(p).resolve()
        except (OSError, RuntimeError):
            continue
        if tmp in rp.parents and rp.is_dir():
            found.add(rp)
    return sorted(found, key=lambda p: len(p.parts))


def private_tmp(tmp_dir: str | os.PathLike, keep_writable=(), keep_readable=()) -> tuple[bool, str]:
    """Bind `tmp_dir` over /tmp in a mount namespace of this process's own: code that writes a literal
    /tmp/cuda_extensions runs unchanged, and no file of the real /tmp, or of another worker, can be reached.

    Folders beneath the real /tmp that this process still needs are bound back at their own paths:
    `keep_writable` (its scratch and build folders) as they are, `keep_readable` (import paths) read-only.
    Runs before seccomp (which denies mount) and before capabilities are dropped. Returns (applied, detail)."""
    if sys.platform != "linux":
        return False, "mount namespaces need Linux"
    tmp = Path("/tmp").resolve()
    writable = _under_tmp(keep_writable, tmp)
    readable = [p for p in _under_tmp(keep_readable, tmp)
                if not any(p == w or w in p.parents for w in writable)]
    keep = sorted([(p, True) for p in writable] + [(p, False) for p in readable], key=lambda k: len(k[0].parts))
    fds = []
    try:
        how = _own_mount_namespace()
        _mount(None, "/", MS_REC | MS_PRIVATE)  # nothing mounted here propagates to other namespaces
        # Opened in the new namespace (a bind's source must be in it) and before /tmp is covered: the folders
        # are bound back from these handles.
        fds = [(p, rw, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p, rw in keep]
        _mount(str(Path(tmp_dir).resolve()), str(tmp), MS_BIND)
    except OSError as e:
        for _, _, fd in fds:
            os.close(fd)
        return False, str(e)
    try:
        for p, rw, fd in fds:
            if any(q in p.parents and (q_rw or not rw) for q, q_rw, _ in fds):
                continue  # visible already, with the same rights, through an outer folder bound back
            p.mkdir(parents=True, exist_ok=True)  # inside tmp_dir, which is /tmp now
            _mount(f"/proc/self/fd/{fd}", str(p), MS_BIND)
            if not rw:
                _mount(None, str(p), MS_REMOUNT | MS_BIND | MS_RDONLY)
    except OSError as e:
        _libc.umount2(os.fsencode(str(tmp)), MNT_DETACH)  # the real /tmp again, rather than a broken one
        return False, f"{e}; /tmp left shared"
    finally:
        for _, _, fd in fds:
            os.close(fd)
    return True, f"{how}: /tmp is {Path(tmp_dir).resolve()}, {len(keep)} folder(s) of the real /tmp bound back"


def import_paths() -> list[str]:
    """Folders this process may still import or run programs from (sys.path, the interpreter, PATH, CUDA)."""
    paths = [p for p in sys.path if p] + [sys.prefix, sys.exec_prefix, os.path.dirname(sys.executable)]
    for var in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH"):
        paths += [p for p in os.environ.get(var, "").split(os.pathsep) if p]
    paths += [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH", "VIRTUAL_ENV", "CONDA_PREFIX") if os.environ.get(v)]
    return paths


# --- network ---------------------------------------------------------------------------------------------

def unshare_network() -> tuple[bool, str]:
    """Move this process into a new, empty network namespace (no interfaces up, not even loopback)."""
    if sys.platform != "linux":
        return False, "network namespaces need Linux"
    try:
        if hasattr(os, "unshare"):
            os.unshare(os.CLONE_NEWNET)
        elif _syscall("unshare", ctypes.c_int(CLONE_NEWNET)) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return True, "network namespace"
    except OSError as first:
        # Unprivileged: a user namespace mapping our own uid grants CAP_SYS_ADMIN over the new netns.
        uid, gid = os.getuid(), os.getgid()
        if _syscall("unshare", ctypes.c_int(CLONE_NEWUSER | CLONE_NEWNET)) != 0:
            return False, f"unshare(CLONE_NEWNET) failed: {first}; with a user namespace: {_err()}"
        try:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        except OSError as e:
            return True, f"network namespace in a user namespace (uid map failed: {e})"
        return True, "network namespace in a user namespace"


def network_reachable(host: str = "127.0.0.1", port: int = 9, timeout_s: float = 0.5) -> bool:
    """Whether a TCP connection to host:port gets any answer (refused counts as reachable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


# --- seccomp: syscalls that reach other processes or the kernel's global state ---------------------------

# x86_64 numbers. ptrace/process_vm_* would read the evaluator's memory; setns would undo the network
# namespace; the rest change global state or escape a container.
_DENIED_SYSCALLS_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312,
    "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "bpf": 321, "keyctl": 250, "add_key": 248,
    "request_key": 249, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "move_mount": 429, "fsopen": 430,
    "fsmount": 432, "open_tree": 428, "process_madvise": 440,
}
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EPERM = 1


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_deny(names=None) -> tuple[bool, str]:
    """Install a seccomp filter making the given syscalls (default: process-reaching ones) fail with EPERM."""
    if sys.platform != "linux" or not _X86_64:
        return False, "the seccomp filter is only built for x86_64 Linux"
    table = _DENIED_SYSCALLS_X86_64
    nrs = sorted(table[n] for n in (names or table))
    LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
    deny = _SECCOMP_RET_ERRNO | _EPERM
    prog = [(LD_W_ABS, 0, 0, 4),                                 # arch
            (JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
            (RET_K, 0, 0, deny),                                 # other ABIs (i386 via int 0x80): refuse
            (LD_W_ABS, 0, 0, 0),                                 # syscall number
            (JGE_K, len(nrs) + 1, 0, _X32_SYSCALL_BIT)]          # x32 numbering: refuse
    for i, nr in enumerate(nrs):
        prog.append((JEQ_K, len(nrs) - i, 0, nr))                # -> the deny return below the allow
    prog += [(RET_K, 0, 0, _SECCOMP_RET_ALLOW), (RET_K, 0, 0, deny)]
    arr = (_SockFilter * len(prog))(*[_SockFilter(*p) for p in prog])
    fprog = _SockFprog(len(prog), arr)
    if not _no_new_privs():
        return False, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {_err()}"
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        return False, f"prctl(PR_SET_SECCOMP) failed: {_err()}"
    return True, f"{len(nrs)} syscalls denied"


# --- capabilities ----------------------------------------------------------------------------------------

class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> tuple[bool, str]:
    """Drop every Linux capability (bounding, ambient, effective, permitted): root becomes an ordinary user."""
    if sys.platform != "linux" or not (_X86_64 or _AARCH64):
        return False, "capabilities need Linux"
    status = Path("/proc/self/status").read_text()
    eff = int(re.search(r"CapEff:\s*([0-9a-f]+)", status).group(1), 16)
    if eff == 0:
        return True, "no capabilities held"
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text()) if Path(
        "/proc/sys/kernel/cap_last_cap").exists() else 40
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit data words
    data = (_CapData * 2)()
    if _syscall("capset", ctypes.byref(header), ctypes.byref(data)) != 0:
        return False, f"capset failed: {_err()}"
    return True, "all capabilities dropped"


# --- resource limits -------------------------------------------------------------------------------------

def set_limits(memory_bytes: int | None = None, cpu_seconds: int | None = None, nofile: int | None = None,
               skip_address_space: bool = False, core_dumps: bool = False) -> dict:
    """Apply rlimits and return those set; RLIMIT_AS is skipped on request (CUDA reserves huge address space)."""
    applied: dict = {}

    def lower(which, name, value):
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value if hard == resource.RLIM_INFINITY else hard))
            applied[name] = value
        except (ValueError, OSError) as e:
            applied[name] = f"not set: {e}"

    if memory_bytes is not None:
        if skip_address_space:
            applied["as"] = "skipped (CUDA reserves address space beyond physical memory)"
        else:
            lower(resource.RLIMIT_AS, "as", int(memory_bytes))
    if cpu_seconds is not None:
        lower(resource.RLIMIT_CPU, "cpu", int(cpu_seconds))
    if nofile is not None:
        lower(resource.RLIMIT_NOFILE, "nofile", int(nofile))
    if not core_dumps:
        lower(resource.RLIMIT_CORE, "core", 0)
    return applied


# --- all together ----------------------------------------------------------------------------------------

def confine(scratch_dir: str | os.PathLike, writable_dirs=(), network: bool = False, *,
            memory_bytes: int | None = None, cpu_seconds: int | None = None, nofile: int | None = 4096,
            cuda: bool = False, landlock: bool = True, hide_processes: bool = True, seccomp: bool = True,
            drop_caps: bool = True, own_tmp: bool = True) -> dict:
    """Confine this process to `scratch_dir` (+ `writable_dirs`); returns what was applied, for the Verdict."""
    report: dict = {}
    scratch = Path(scratch_dir)
    scratch.mkdir(parents=True, exist_ok=True)

    # Environment: drop credentials and point every cache into the scratch directory.
    for k in [k for k in os.environ if is_secret_name(k) or _SECRET_VALUE.match(os.environ[k])]:
        del os.environ[k]
    extra = scratch_env(scratch)
    for k, v in extra.items():
        Path(v).mkdir(parents=True, exist_ok=True)
        os.environ[k] = v
    tempfile.tempdir = None  # re-read TMPDIR
    leftover = secrets_in_initial_environ()
    report["env_scrubbed"] = not leftover
    if leftover:
        report["env_reason"] = (f"/proc/self/environ still shows {sorted(leftover)}: spawn the worker with "
                                "env=scrub_env(os.environ)")

    # A /tmp of its own: the scratch's tmp folder (also TMPDIR). Where that is impossible, TMPDIR, HOME and
    # XDG_CACHE_HOME still point into the scratch directory, and writes to the real /tmp are refused.
    report["private_tmp"] = False
    if own_tmp:
        ok, why = private_tmp(extra["TMPDIR"], [scratch, *writable_dirs], import_paths())
        report["private_tmp"] = ok
        report["private_tmp_detail" if ok else "private_tmp_reason"] = why
        if ok:
            os.chdir(scratch)  # the working directory through the folder bound back, not the covered one

    if not network:
        ok, why = unshare_network()
        report["netns"] = ok
        if not ok:
            report["netns_reason"] = why

    report["rlimits"] = set_limits(memory_bytes, cpu_seconds, nofile, skip_address_space=cuda)

    if landlock:
        own = [Path("/tmp")] if report["private_tmp"] else []
        ok, why = landlock_restrict_writes([scratch, *map(Path, writable_dirs), *own],
                                           hide_processes=hide_processes, deny_tcp=not network)
        report["landlock"] = ok
        report["landlock_detail" if ok else "landlock_reason"] = why
        report["processes_hidden"] = ok and hide_processes
    else:
        report["landlock"] = False
        report["landlock_reason"] = "disabled by configuration"

    if seccomp:
        ok, why = seccomp_deny()
        report["seccomp"] = ok
        report["seccomp_detail" if ok else "seccomp_reason"] = why

    if drop_caps:
        ok, why = drop_capabilities()
        report["capabilities_dropped"] = ok
        if not ok:
            report["capabilities_reason"] = why
    report["scratch"] = str(scratch)
    return report
