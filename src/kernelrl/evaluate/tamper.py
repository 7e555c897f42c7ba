"""Evidence of tampering inside a worker: identity snapshots, an audit hook, thread and precision accounting.

Everything here is set up *before* candidate code loads, and read back after it ran. Python audit hooks
cannot be removed once added, and the identity snapshot holds the original objects, so a candidate that
patches a timer, a checker or a torch op is seen whatever its code looks like.
"""
from __future__ import annotations

import os
import sys
import threading
import time

# Bound before any candidate loads: a program that patches these later cannot change what the harness reads.
_enumerate = threading.enumerate
_sleep = time.sleep
_cpu_ns = time.clock_gettime_ns
_cpu_clock = getattr(time, "pthread_getcpuclockid", None)  # Unix only

# Patching any of these changes what a timer or checker reports.
_TIMER_NAMES = {"perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "process_time", "thread_time", "Event", "synchronize", "elapsed_time", "record", "allclose",
                "isclose", "equal", "testing", "do_bench", "manual_seed", "randn", "rand", "randint",
                "normal", "seed", "Generator", "empty", "zeros", "cuda", "type", "isinstance", "len", "id",
                "hash", "getattr", "setattr", "open", "print", "sha256"}
# Audit events that honest kernels never need, by the hack class they point to.
_AUDIT_CLASSES = {
    "gc.get_objects": "harness_introspection", "gc.get_referrers": "harness_introspection",
    "gc.get_referents": "harness_introspection", "sys._current_frames": "harness_introspection",
    "sys.settrace": "harness_introspection", "sys.setprofile": "harness_introspection",
    "socket.connect": "environment_tampering", "socket.bind": "environment_tampering",
    "socket.getaddrinfo": "environment_tampering", "os.putenv": "environment_tampering",
    "os.unsetenv": "environment_tampering", "os.system": "background_thread",
    "subprocess.Popen": "background_thread", "os.fork": "background_thread", "os.forkpty": "background_thread",
    "os.posix_spawn": "background_thread", "os.exec": "background_thread", "os.kill": "environment_tampering",
    "_thread.start_new_thread": "background_thread", "sys.addaudithook": "timer_tampering",
    "sys._getframe": "harness_introspection", "ctypes.dlsym": "timer_tampering",
}
# Evidence only: each has an honest reading (os.environ["TORCH_CUDA_ARCH_LIST"] = ... before a build; a compiler
# the candidate runs itself). Children left running, threads during timed calls and wrong outputs still reject.
_WARN_EVENTS = {"ctypes.dlsym", "os.putenv", "os.unsetenv", "subprocess.Popen", "os.system", "os.posix_spawn",
                "os.exec", "os.fork", "os.forkpty"}


def _modules(torch) -> list:
    import builtins, time, hashlib, math
    mods = [builtins, time, hashlib, math, torch, torch.nn.functional, torch.Tensor, torch.nn.Module,
            torch.testing, torch.linalg, torch.fft, torch.special]
    if hasattr(torch, "cuda"):
        mods += [torch.cuda, torch.cuda.Event, torch.cuda.Stream]
    return mods


def snapshot(torch) -> dict:
    """Identity of every public attribute of the modules a timer, checker or reference relies on."""
    snap = {}
    for mod in _modules(torch):
        owner = getattr(mod, "__name__", repr(mod))
        for name in list(vars(mod)) if hasattr(mod, "__dict__") else dir(mod):
            if name.startswith("__") and name not in ("__torch_function__", "__call__", "__init__"):
                continue
            try:
                snap[(owner, name)] = (mod, vars(mod)[name])
            except (KeyError, TypeError):
                continue
    for cls in _module_classes(torch):
        for attr in ("forward", "__call__", "_call_impl"):
            if attr in vars(cls):
                snap[(f"{cls.__module__}.{cls.__qualname__}", attr)] = (cls, vars(cls)[attr])
    return snap


def _module_classes(torch):
    return [c for c in vars(torch.nn).values() if isinstance(c, type) and issubclass(c, torch.nn.Module)]


def changed(snap: dict) -> list[tuple[str, str]]:
    """(hack class, message) for every snapshotted attribute that was replaced, added back or removed."""
    found = []
    for (owner, name), (mod, obj) in snap.items():
        try:
            now = vars(mod).get(name, _MISSING)
        except TypeError:
            continue
        if now is not obj:
            cls = "timer_tampering" if (name in _TIMER_NAMES or owner in ("time", "hashlib", "builtins")
                                        or "Event" in owner) else "baseline_tampering"
            found.append((cls, f"{owner}.{name} was replaced"))
    return found


_MISSING = object()


def decoy_snapshot(module) -> dict:
    """What the task module in a candidate's process is made of: every global, every attribute of the classes it
    defines, and the code of its functions and methods. The reference runs in another process, so this copy is a
    decoy: a candidate that changes it tried to tamper with the reference (`decoy_changes`)."""
    snap = {}
    for name, obj in vars(module).items():
        if name.startswith("__") or isinstance(obj, type(sys)):
            continue
        snap[name] = (module, obj, _code(obj))
        if isinstance(obj, type) and obj.__module__ == module.__name__:
            for attr, value in vars(obj).items():
                if attr not in ("__dict__", "__weakref__", "__doc__"):
                    snap[f"{name}.{attr}"] = (obj, value, _code(value))
            snap[f"{name}.*"] = (obj, frozenset(vars(obj)), None)
    snap["*"] = (module, frozenset(k for k in vars(module) if not k.startswith("__")), None)
    return snap


def _code(obj):
    """The code, defaults and keyword defaults of a function (or of the function behind a method wrapper)."""
    fn = getattr(obj, "__func__", obj)
    return (getattr(fn, "__code__", None), getattr(fn, "__defaults__", None), getattr(fn, "__kwdefaults__", None)) \
        if callable(fn) else None


def decoy_changes(snap: dict) -> list[str]:
    """What changed in the task module's decoy since `decoy_snapshot`: names rebound, added or removed, and code
    replaced; [] when nothing did."""
    found = []
    for key, (owner, obj, code) in snap.items():
        where = key.rpartition(".")[0] or "the task module"
        if key.endswith("*"):
            names = frozenset(k for k in vars(owner) if not (key == "*" and k.startswith("__")))
            added, removed = sorted(names - obj), sorted(obj - names)
            if added:
                found.append(f"{where}: {', '.join(added[:5])} added")
            if removed:
                found.append(f"{where}: {', '.join(removed[:5])} removed")
            continue
        now = vars(owner).get(key.rpartition(".")[2], _MISSING)
        if now is _MISSING:
            continue  # reported as removed
        if now is not obj:
            found.append(f"{key} was replaced")
        elif _code(now) != code:
            found.append(f"{key} had its code replaced")
    return found


class AuditLog:
    """An audit hook that records suspicious events caused directly by code in `candidate_file`."""

    def __init__(self, candidate_file: str, allowed_write_dirs: list[str]):
        self.candidate_file = candidate_file
        self.allowed = [os.path.realpath(d) for d in allowed_write_dirs]
        self.events: list[tuple[str, str]] = []
        self.armed = False
        events, getframe = self.events, sys._getframe

        busy: set[int] = set()  # threads inside the hook: its own sys._getframe call raises an event too
        ident = threading.get_ident

        def hook(event, args, _len=len):
            me = ident()
            if not self.armed or me in busy or _len(events) > 200:
                return
            busy.add(me)
            try:
                _record(event, args)
            finally:
                busy.discard(me)

        def _record(event, args, _classes=_AUDIT_CLASSES, _append=events.append):
            if event == "open":
                path, mode = args[0], args[1]
                if not isinstance(path, (str, bytes)):
                    return
                path = os.fsdecode(path)
                if "/proc/" in path and ("environ" in path or "/mem" in path or "cmdline" in path):
                    cls = "harness_introspection"
                elif isinstance(mode, str) and any(c in mode for c in "wax+") and not self._allowed(path):
                    cls = "environment_tampering"
                else:
                    return
            elif event in _classes:
                cls = _classes[event]
            else:
                return
            # sys._getframe is also called by stdlib helpers a module may use (namedtuple): only direct calls count.
            # Frame 0 is _record, 1 the hook, 2 the code that raised the event.
            if self._from_candidate(getframe(2), 1 if event == "sys._getframe" else 3):
                _append((cls, f"{event} {str(args)[:160]}", "warn" if event in _WARN_EVENTS else "reject"))

        sys.addaudithook(hook)

    def _allowed(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real.startswith("/dev/") or any(real.startswith(d) for d in self.allowed)

    def _from_candidate(self, frame, max_depth: int) -> bool:
        # Only the innermost frames count: an event deep inside torch (a compiler it spawns) is torch's own.
        depth = 0
        while frame is not None and depth < max_depth:
            if frame.f_code.co_filename == self.candidate_file:
                return True
            frame = frame.f_back
            depth += 1
        return False


class ThreadWork:
    """CPU time spent by the Python threads started after this was made (the candidate's, when made just before it
    loads). Read right after a call returns and again once those threads are quiet, it measures the work a program
    went on doing behind its caller's back. CPU time, not wall time: a loaded machine does not inflate it."""

    QUIET_NS = 20_000  # less CPU than this over one settle interval: the threads are idle (an idle pool's bookkeeping)

    def __init__(self):
        self._base = {t.ident for t in _enumerate()}
        self._seen: dict[int, int] = {}  # ident -> the most CPU time read (a thread that ended keeps its last reading)

    def _started(self):
        """The threads started since this was made that are alive now."""
        return [t for t in _enumerate() if t.ident is not None and t.ident not in self._base]

    def cpu_ns(self) -> int:
        """Total CPU time of the threads started since, those that ended included."""
        if _cpu_clock is None:
            return 0
        for t in self._started():
            try:
                self._seen[t.ident] = max(self._seen.get(t.ident, 0), _cpu_ns(_cpu_clock(t.ident)))
            except (OSError, OverflowError, ValueError):
                pass  # it ended between the listing and the read
        return sum(self._seen.values())

    def runnable(self) -> bool:
        """Whether any of the threads is running or waiting for a core (Linux: state R in /proc), so that a thread
        the scheduler put aside for a moment is not taken for a quiet one."""
        for t in self._started():
            try:
                with open(f"/proc/self/task/{t.native_id}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] == b"R":
                        return True
            except (OSError, IndexError, TypeError):
                continue
        return False

    def settle(self, since_ns: int, interval_s: float = 0.0005, limit_s: float = 5.0) -> int:
        """Wait until the threads are quiet (or `limit_s`); return the CPU time they spent since `since_ns`."""
        if not self._seen and not self._started():
            return 0
        prev, waited = since_ns, 0.0
        while True:
            _sleep(interval_s)
            waited += interval_s
            now = self.cpu_ns()
            if (now - prev < self.QUIET_NS and not self.runnable()) or waited >= limit_s:
                return max(0, now - since_ns)
            prev = now


def python_threads() -> int:
    """Live Python threads in this process."""
    return threading.active_count()


def child_processes() -> int:
    """Live child processes of this process."""
    try:
        import psutil
        return len(psutil.Process().children(recursive=True))
    except Exception:
        return 0


def precision_flags(torch) -> dict:
    """Global precision settings a candidate might flip to gain speed."""
    flags = {"matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
             "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
             "float32_matmul_precision": torch.get_float32_matmul_precision()}
    red = getattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", None)
    if red is not None:
        flags["fp16_reduced_reduction"] = bool(red)
    return flags


def secrets_in_env() -> list[str]:
    """Names of environment variables that look like secrets (should be none in a worker)."""
    from kernelrl.sandbox.confine import is_secret_name
    return [k for k in os.environ if is_secret_name(k)]
