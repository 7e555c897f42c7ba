"""The Evaluator: build, check, time and guard one candidate against its task's reference, on one device.

The reference runs in a worker kept per task; each candidate gets a fresh worker. This process (the caller's)
runs no task or candidate code: it picks secret seeds, keeps the reference's outputs, compares, and decides.
"""
from __future__ import annotations

import hashlib
import math
import os
import shutil
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelrl.evaluate import compare as cmp
from kernelrl.evaluate.config import EvalConfig
from kernelrl.sandbox import devshare
from kernelrl.sandbox.process import Worker, WorkerError
from kernelrl.task import Candidate, Task
from kernelrl.verdict import ErrorStats, Flag, Timing, Verdict

HARNESS = "kernelrl.evaluate.harness:Harness"
# Library operators that do a task's heavy work; a task with the own_kernels policy may not call them.
_LIBRARY_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::conv", "aten::_convolution", "aten::cudnn_", "aten::mkldnn_", "aten::scaled_dot_product",
                "aten::_scaled_dot_product", "aten::_flash_attention", "aten::_efficient_attention")


class EvaluationError(RuntimeError):
    """The evaluation itself could not run (bad reference, unavailable device): not the candidate's fault."""


def check_device(device: str) -> torch.device:
    """Parse `device` and make sure it exists here; raises EvaluationError with what to do otherwise."""
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise EvaluationError(f"unknown device {device!r}: use cpu, cuda or cuda:N") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise EvaluationError(f"device {device!r} is not available: this machine has no CUDA GPU "
                                  "(use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise EvaluationError(f"device {device!r} is not available: {torch.cuda.device_count()} GPU(s) here")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise EvaluationError(f"unsupported device {device!r}: use cpu, cuda or cuda:N")
    return dev


def toolchain_key() -> str:
    """What a cached build depends on besides its source: Python, torch and CUDA versions."""
    parts = [sys.version.split()[0], torch.__version__, str(torch.version.cuda)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]


class _Phases:
    """Wall seconds between marks, for the Verdict's `phases`."""

    def __init__(self):
        self.t = time.monotonic()
        self.seen: dict[str, float] = {}

    def mark(self, name: str):
        now = time.monotonic()
        self.seen[name] = round(self.seen.get(name, 0.0) + now - self.t, 3)
        self.t = now

    def done(self) -> dict:
        self.mark("finish")
        return dict(self.seen)


def worker_cpus(device: torch.device, per_device: int = 2) -> list[int] | None:
    """CPU cores for a CUDA device's workers to time on: `per_device` cores beside the GPU (its NUMA node's, when
    the system says which), a different pair for each device index. The reference and candidate workers share
    them, so both timings carry launch overhead from the same cores; builds run before, on every core. None on
    CPU or where affinity is unavailable."""
    if device.type != "cuda" or not hasattr(os, "sched_getaffinity"):
        return None
    cpulist = ""
    try:
        p = torch.cuda.get_device_properties(device)
        pci = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        cpulist = Path(f"/sys/bus/pci/devices/{pci}/local_cpulist").read_text()
    except (AttributeError, OSError):
        pass
    return pick_cores(os.sched_getaffinity(0), cpulist, host_index(device), per_device)


def host_index(device: torch.device) -> int:
    """The GPU's ordinal on the host: `device.index` mapped through CUDA_VISIBLE_DEVICES (a Ray actor sees its one
    GPU as cuda:0), so evaluators of different GPUs time on different cores."""
    index = device.index or 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return int(visible[index]) if index < len(visible) and visible[index].isdigit() else index


def pick_cores(allowed, cpulist: str, index: int, per_device: int = 2) -> list[int] | None:
    """`per_device` of the `allowed` cores for device `index`, from the GPU's local `cpulist` ("0-15,32-47")
    where it names any allowed core; None when fewer than two devices' worth of cores are available."""
    try:
        listed = {c for part in cpulist.strip().split(",") if part
                  for c in range(int(part.partition("-")[0]), int(part.partition("-")[2] or part) + 1)}
    except ValueError:
        listed = set()
    local = sorted(c for c in allowed if c in listed) or sorted(allowed)
    if len(local) < 2 * per_device:
        return None  # too few cores to set any aside
    start = (index * per_device) % (len(local) - per_device + 1)
    return local[start:start + per_device]


def build_cpus(device: torch.device, per_device: int = 2) -> list[int] | None:
    """The cores workers start and build on: every allowed core but the timing cores of this host's GPUs, so a
    build beside a GPU stage never shares cores with a timing (`worker_cpus`). None on CPU, or where no cores are
    set aside."""
    if device.type != "cuda" or not hasattr(os, "sched_getaffinity"):
        return None
    timing = set()
    for i in range(torch.cuda.device_count()):
        timing |= set(worker_cpus(torch.device("cuda", i), per_device) or ())
    hidden = host_gpu_cpulists()
    if len(hidden) > torch.cuda.device_count():  # GPUs CUDA_VISIBLE_DEVICES hides (other Ray actors') time too
        timing |= timing_cores(os.sched_getaffinity(0), hidden, per_device)
    rest = sorted(set(os.sched_getaffinity(0)) - timing)
    return rest if timing and rest else None


def host_gpu_cpulists() -> list[str]:
    """The local cpulist of each of the host's NVIDIA GPUs in PCI order, the ones CUDA_VISIBLE_DEVICES hides
    included; [] where the driver does not list them."""
    try:
        buses = sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return []
    lists = []
    for bus in buses:
        try:
            lists.append(Path(f"/sys/bus/pci/devices/{bus.lower()}/local_cpulist").read_text())
        except OSError:
            lists.append("")
    return lists


def timing_cores(allowed, cpulists: list[str], per_device: int = 2) -> set[int]:
    """The cores `pick_cores` sets aside for timing on each GPU of the host, given their local `cpulists`."""
    return set().union(*(pick_cores(allowed, c, i, per_device) or () for i, c in enumerate(cpulists)))


def _relative_stderr(ratios: list[float]) -> float:
    """Standard error of the mean of per-round speedups, relative to it (inf with fewer than two rounds)."""
    if len(ratios) < 2:
        return math.inf
    mean = statistics.fmean(ratios)
    return statistics.stdev(ratios) / math.sqrt(len(ratios)) / mean if mean > 0 else math.inf


class _Aborted(Exception):
    def __init__(self, verdict_kw: dict):
        self.kw = verdict_kw


@dataclass(eq=False)
class Prepared:
    """A candidate after the CPU stage: its reference and candidate workers started, the candidate built and
    loaded (or its build failed, `aborted`); `Evaluator.judge` runs the GPU stage on it."""

    task: Task
    candidate: Candidate
    t0: float                                   # time.monotonic() when preparation started
    phases: _Phases
    static: list = field(default_factory=list)  # static audit flags
    ref: Worker | None = None
    state: dict = field(default_factory=dict)   # the reference worker's state (probe results)
    cand: Worker | None = None
    slot: Path | None = None
    flags: list = field(default_factory=list)
    reported: dict = field(default_factory=dict)
    kept: bool = False                          # the build succeeded (cache it unless a flag rejects)
    aborted: object | None = None               # the _Aborted that ended the CPU stage (build failed ...)
    ready: float = 0.0                          # time.monotonic() when preparation ended
    finished: bool = False                      # candidate worker closed, build kept or dropped
    released: bool = False                      # reference worker unpinned


class Evaluator:
    """Judges candidates on one device. `prepare` (CPU stage) is thread-safe and may run for many candidates at
    once; `judge` (GPU stage) and `time_reference` are serialised; use one Evaluator per device."""

    def __init__(self, config: EvalConfig | None = None, max_reference_workers: int = 2):
        self.config = config or EvalConfig()
        self.device = check_device(self.config.device)
        self._refs: OrderedDict[str, tuple[Worker, dict]] = OrderedDict()
        self._max_refs = max_reference_workers
        self._lock = threading.RLock()  # the GPU stage: judge, time_reference, reference probes
        self._refs_lock = threading.RLock()  # self._refs, self._spare, self._starting, self._live
        self._starting: dict[str, threading.Lock] = {}  # one reference start per task at a time
        self._live: set[Prepared] = set()
        self._closed = False
        self.cache = self.config.cache_path
        self._device_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        self._device_bytes = torch.cuda.get_device_properties(self.device).total_memory \
            if self.device.type == "cuda" else 0
        self._cpu_peaks = None
        self._phases = _Phases()
        self._spare: tuple[Worker, Path] | None = None
        self._cpus = worker_cpus(self.device)
        self._build_cpus = build_cpus(self.device)
        self._current: Prepared | None = None  # the job in the GPU stage
        self._lends = False  # whether workers here have taken lent device memory for their replies
        # reads the reference's reply of a trial while the candidate's is read (gigabyte replies, both at once)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="kernelrl-reference-reply")

    # -- public -------------------------------------------------------------------------------------------
    def evaluate(self, task: Task, candidate: Candidate) -> Verdict:
        """Correctness, speed and integrity of `candidate` on `task`; never raises for candidate faults."""
        return self.judge(self.prepare(task, candidate))

    def prepare(self, task: Task, candidate: Candidate) -> Prepared:
        """The CPU stage: static checks, the task's reference worker, the candidate's worker, its import and
        build; raises EvaluationError when the reference does not run. Pass the result to `judge` (or `release`)."""
        p = Prepared(task, candidate, time.monotonic(), _Phases(),
                     static=_static_flags(candidate.source, task.source))
        p.ref, p.state = self._reference(task)
        with self._refs_lock:
            self._live.add(p)
        p.phases.mark("reference")
        left = self._left(p.t0 + self.config.timeout_s)
        try:
            p.cand, p.slot = self._candidate_worker(candidate)
            self._ask(p.cand, self._load_op(task, p.state, candidate), left(self.config.build_timeout_s), "build")
            self._reserve(p.cand, p.state)
            p.kept = True
            p.phases.mark("start_and_build")
        except _Aborted as a:  # judged without the GPU stage (its integrity report is asked for there)
            p.aborted = a
        except BaseException:
            self.release(p)
            raise
        p.ready = time.monotonic()
        return p

    def judge(self, prepared: Prepared) -> Verdict:
        """The GPU stage of a prepared candidate (correctness, timing, graphs, recheck, report): its Verdict."""
        with self._lock:
            try:
                return self._judge(prepared)
            finally:
                self._current = None
                self._rest(prepared.ref)
                self.release(prepared)

    def _rest(self, ref: Worker | None) -> None:
        """Have a reference worker put its program back as built and give back the device memory it used for the
        job just done (`op_rest`), and unlock its spill file if a failed trial left it locked (`_lock_spills`)."""
        if ref is None or not ref.alive:
            return
        try:
            h, _ = ref.request({"op": "rest"}, 60)
            ref.unlock(60)
        except WorkerError:
            return  # a dead or hung reference is replaced when next asked for
        with self._refs_lock:
            for worker, state in self._refs.values():
                if worker is ref and not h.get("compiled", True):
                    state["compiled"] = False  # its torch.compile wrapper went with the program it replaced

    def release(self, prepared: Prepared) -> None:
        """Give up a prepared candidate without judging it: its worker closed, its reference unpinned."""
        self._finish(prepared)
        with self._refs_lock:
            if prepared.released:
                return
            prepared.released = True
            self._live.discard(prepared)
            if prepared.state:
                self.let_go(prepared.state)

    def _judge(self, p: Prepared) -> Verdict:
        task, candidate = p.task, p.candidate
        start = time.monotonic()
        p.phases.mark("waited")
        waited = p.phases.seen["waited"]
        self._phases = p.phases
        self._current = p
        self._incorrect_message = ""  # set by the comparison that fails, for this evaluation only
        self._policy = self.config.policy_for(task.meta)
        self._beyond_strict = ""  # set when outputs pass only the kernelbench policy's tolerance
        self._slack = ""  # set when outputs pass KernelBench's rule only by its absolute atol
        self._accurate = {}  # output index -> relative L2 distance from the reference of outputs found accurate
        static = [_under_policy(f, self._policy) for f in p.static]
        try:
            if p.aborted is not None:
                raise p.aborted
            # The wait between the stages does not count against the evaluation's time limit.
            kw = self._evaluate(p, self._left(start + self.config.timeout_s - (p.ready - p.t0)))
        except _Aborted as a:
            kw = self._aborted(a, p)
        finally:
            self._finish(p)
        if p.state.get("mutates"):
            static = [Flag(f.check, f.message + " (the reference writes into its inputs too)", f.hack, "warn")
                      if f.hack == "input_mutation" else f for f in static]
        flags = tuple(static) + tuple(kw.pop("flags", ()))
        status = kw.pop("status")
        if status in ("ok", "incorrect") and any(f.severity == "reject" for f in flags):
            status = "rejected"
        if status != "ok":
            for key in ("speedup", "speedup_stderr", "speedup_method", "latency_speedup", "compile_speedup",
                        "graph_speedup"):
                kw[key] = None
        if status == "rejected" and not kw.get("message"):
            kw["message"] = "; ".join(f"{f.hack or f.check}: {f.message}" for f in flags
                                      if f.severity == "reject")[:2000]
        return Verdict(status=status, task=task.name, candidate=candidate.digest, device=str(self.device),
                       flags=flags, seconds=time.monotonic() - p.t0 - waited, phases=self._phases.done(),
                       policy=self._policy, **kw)

    def _left(self, deadline: float):
        """A function of an optional cap: seconds left before `deadline`; raises _Aborted (timeout) when none."""
        def left(cap: float | None = None) -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Aborted({"status": "timeout", "message": f"evaluation exceeded {self.config.timeout_s:.0f} s"})
            return min(remaining, cap) if cap else remaining
        return left

    def time_reference(self, task: Task, compiled: bool = False) -> Timing:
        """Timing of the reference alone (eager, or torch.compile'd), by the method `evaluate` compares on:
        CUDA-graph replay when the timing basis is "device" and the program captures, else per-call latency."""
        ref, state = self._reference(task)  # before the GPU lock: the probe takes it
        try:
            return self._time_reference(task, ref, compiled)
        finally:
            with self._lock:
                self._rest(ref)
            self.let_go(state)

    def hold_reference(self, task: Task) -> dict:
        """Start (or keep) the task's reference worker ahead of its `time_reference`; pass the result to `let_go`."""
        return self._reference(task)[1]

    def let_go(self, reference_state: dict) -> None:
        """Stop holding a reference worker (from `hold_reference`): it may be evicted again."""
        with self._refs_lock:
            reference_state["users"] -= 1
            self._evict()

    def _time_reference(self, task: Task, ref: Worker, compiled: bool) -> Timing:
        with self._lock:
            if compiled:
                self._compile_reference(ref, task)
            rounds = self.config.timing_rounds
            if self.device.type == "cuda" and self.config.use_graphs and self.config.timing_basis == "device":
                samples, seed = [], secrets.randbits(62)
                for _ in range(rounds):
                    h, _ = ref.request(self._time_op(seed, kind="graph", compiled=compiled), self.config.timeout_s)
                    if h.get("unavailable") or "times_us" not in h:
                        break
                    samples += h["times_us"]
                else:
                    return Timing.from_samples(samples, "cuda_graph")
            samples, walls = [], []
            for _ in range(rounds):
                h, _ = self._time(ref, compiled, self.config.timeout_s)
                samples += h["times_us"]
                walls += h["wall_us"]
            return Timing.from_samples(samples, self._method(), walls)

    def close(self):
        with self._refs_lock:
            self._closed = True
            for p in list(self._live):  # candidates still being prepared stop at their next request
                if p.cand is not None:
                    p.cand.kill()
            for worker, _ in self._refs.values():
                worker.close()
            self._refs.clear()
            self._reader.shutdown(wait=False)
            if self._spare is not None:
                self._discard(self._spare)
                self._spare = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- workers ------------------------------------------------------------------------------------------
    def _spawn(self, init: dict, build_dir: Path) -> Worker:
        build_dir.mkdir(parents=True, exist_ok=True)
        env = {"TORCH_EXTENSIONS_DIR": str(build_dir / "torch_extensions"),
               "TRITON_CACHE_DIR": str(build_dir / "triton"),
               "TORCHINDUCTOR_CACHE_DIR": str(build_dir / "inductor"),
               "CUDA_CACHE_PATH": str(build_dir / "cuda")}
        memory = int(self.config.memory_limit_gb * 2**30) if self.device.type == "cpu" else 0
        init = dict(init, device=str(self.device), writable=[str(build_dir)], cpus=self._cpus)
        return Worker(HARNESS, scratch_root=self.cache / "scratch", writable=[build_dir],
                      confine=self.config.confine, memory_bytes=memory, env=env, init=init,
                      affinity=self._build_cpus)

    def _reference(self, task: Task) -> tuple[Worker, dict]:
        """The task's reference worker and state, started (and probed) if needed; pinned until released."""
        key = task.digest
        with self._refs_lock:
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # prepares of other tasks go on while this one starts
            with self._refs_lock:
                if self._closed:
                    raise EvaluationError("the evaluator is closed")
                if key in self._refs and self._refs[key][0].alive:
                    self._refs.move_to_end(key)
                    self._refs[key][1]["users"] += 1
                    return self._refs[key]
                if key in self._refs:
                    self._refs.pop(key)[0].close()
            worker, state = self._start_reference(task)
            with self._refs_lock:
                if self._closed:
                    worker.close()
                    raise EvaluationError("the evaluator is closed")
                self._refs[key] = (worker, state)
                self._evict()
            return worker, state

    def _evict(self) -> None:
        """Close least recently used reference workers beyond the limit, sparing those a job still holds."""
        with self._refs_lock:
            idle = [k for k, (_, st) in self._refs.items() if st.get("users", 0) <= 0]
            for k in idle[:max(0, len(self._refs) - self._max_refs)]:
                self._refs.pop(k)[0].close()

    def _start_reference(self, task: Task) -> tuple[Worker, dict]:
        key = task.digest
        init = {"role": "reference", "task_source": task.source, "seed": secrets.randbits(31),
                "fixed_inputs": list(task.meta.fixed_inputs), "cpu_threads": self.config.cpu_threads}
        try:
            worker = self._spawn(init, self.cache / "build" / f"ref-{key}-{toolchain_key()}")
            h, _ = worker.request({"op": "ready"}, self.config.timeout_s)  # start-up, beside any GPU stage
            if h.get("type") != "error":
                with self._lock:  # the probe runs the reference on the device: not beside a GPU stage's timing
                    h, _ = worker.request({"op": "trial", "seed": 0, "probe": True}, self.config.timeout_s)
        except WorkerError as e:
            last = [line for line in e.stderr_tail.strip().splitlines() if line.strip()][-1:]
            raise EvaluationError(f"{task.name}: the reference does not run: {e}"
                                  + (f": {last[0].strip()}" if last else "")) from e
        if h.get("type") == "error" or h.get("problem"):
            worker.close()
            raise EvaluationError(f"{task.name}: the reference does not run: {h.get('message') or h.get('problem')}")
        state = {"init": init, "compiled": False, "out_bytes": h.get("out_bytes", 0), "in_bytes": h.get("in_bytes", 0),
                 "written_bytes": h.get("written_bytes"),
                 "mutates": set(h.get("inputs_changed", [])),  # a reference may write into its inputs
                 "stateful": bool(h.get("stateful")),  # its call replaced what it keeps (`Harness._facts`)
                 "users": 1}  # prepared jobs and timings holding it (never evicted while held)
        self._reserve(worker, state)
        return worker, state

    def _reserve(self, worker: Worker, state: dict) -> None:
        """In the CPU stage, allocate the host memory a worker's trial replies will go through (`Worker.reserve`):
        zeroing gigabytes takes seconds the GPU stage would otherwise wait for. Locking it waits for the GPU stage
        (`_lock_spills`)."""
        if self.device.type == "cuda" and isinstance(state.get("out_bytes"), int) and not self._lends:
            worker.reserve(state["out_bytes"])  # not needed once workers take lent device memory (`_lock_spills`)

    def _lock_spills(self, ref: Worker, cand: Worker, left) -> None:
        """Lend each worker device memory for the full trials' outputs, or where that cannot be done page-lock its
        spill file (`Worker.page_lock`), and only for them (`_unlock_spills`): locks taken beside another
        program's timing, or held while the programs were timed, made timed calls noisy on an H100
        (`benchmarks/results/kernelbench_l12_h100/README.md`), so nothing is locked or lent while anything on the
        GPU is timed."""
        nbytes = self._current.state.get("out_bytes")
        if self.device.type == "cuda" and isinstance(nbytes, int):
            self._on_both(ref, cand, "before the trials", "page_lock", nbytes, left(), self.device)
            if ref.lent and cand.lent:
                self._lends = True  # later jobs skip allocating host pages for replies (`_reserve`)

    def _unlock_spills(self, ref: Worker, cand: Worker) -> None:
        """Undo `_lock_spills`."""
        self._on_both(ref, cand, "after the full trials", "unlock", 60)

    def _on_both(self, ref: Worker, cand: Worker, what: str, method: str, *args) -> None:
        """Call a Worker `method` on both workers at once; the candidate's failure is its verdict, the reference's
        is found out by its next request."""
        reference = self._reader.submit(getattr(ref, method), *args)
        try:
            getattr(cand, method)(*args)
        except WorkerError as e:
            raise _Aborted({"status": "runtime_error", "message": f"{what}: {e}"})
        finally:
            try:
                reference.result()
            except WorkerError:
                pass

    def _load_op(self, task: Task, state: dict, candidate: Candidate) -> dict:
        """The request that gives a started candidate worker its task and its candidate."""
        return {"op": "load", "source": candidate.source, "task_source": task.source, "seed": state["init"]["seed"],
                "fixed_inputs": list(task.meta.fixed_inputs)}

    def _start_spare(self) -> tuple[Worker, Path]:
        """Start a task-agnostic candidate worker with an empty build slot of its own (its only writable cache)."""
        slots = self.cache / "slots"
        slots.mkdir(parents=True, exist_ok=True)
        slot = Path(tempfile.mkdtemp(prefix="slot-", dir=slots))
        return self._spawn({"role": "candidate", "cpu_threads": self.config.cpu_threads}, slot), slot

    def _candidate_worker(self, candidate: Candidate) -> tuple[Worker, Path | None]:
        """A started candidate worker and its build slot (None when it builds straight into the cache).

        C++/CUDA extensions record absolute paths in their build files, and so does torch.compile's generated code
        (its kernels' paths under the inductor cache), so they build in their own cache entry (a fixed path per
        source digest) in a worker started for them; Python and Triton candidates, whose caches are
        content-addressed, take the spare and get a copy of any cached build in its slot.
        """
        if candidate.language in ("cuda", "cpp") or _compiles(candidate.source):
            entry = self._build_entry(candidate)
            return self._spawn({"role": "candidate", "cpu_threads": self.config.cpu_threads}, entry), None
        with self._refs_lock:
            spare, self._spare = self._spare, None
        if spare is None or not spare[0].alive:
            if spare is not None:
                self._discard(spare)
            spare = self._start_spare()
        with self._refs_lock:  # the next candidate's worker starts while this one builds and is judged
            if self._spare is None and not self._closed:
                self._spare = self._start_spare()
        entry = self._build_entry(candidate)
        if entry.is_dir():
            shutil.copytree(entry, spare[1], symlinks=True, dirs_exist_ok=True)
        return spare

    def _build_entry(self, candidate: Candidate) -> Path:
        return self.cache / "build" / f"{candidate.digest}-{toolchain_key()}"

    def _keep_build(self, candidate: Candidate, slot: Path | None, keep: bool) -> None:
        """Move a new build into the cache under the candidate's digest (only this process writes the cache)."""
        if slot is None:
            return
        entry = self._build_entry(candidate)
        try:
            if keep and not entry.exists() and any(slot.iterdir()):
                entry.parent.mkdir(parents=True, exist_ok=True)
                tmp = entry.with_name(f"{entry.name}.tmp-{secrets.token_hex(4)}")
                shutil.copytree(slot, tmp, symlinks=True)
                try:
                    os.rename(tmp, entry)
                except OSError:  # another evaluator kept the same build first
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            shutil.rmtree(slot, ignore_errors=True)

    def _discard(self, spare: tuple[Worker, Path]) -> None:
        spare[0].close()
        shutil.rmtree(spare[1], ignore_errors=True)

    def _compile_reference(self, ref: Worker, task: Task):
        with self._refs_lock:
            state = next(s for w, s in self._refs.values() if w is ref)
        if not state["compiled"]:
            h, _ = ref.request({"op": "compile", "seed": 1}, self.config.timeout_s)
            _raise_reference(h, task)
            state["compiled"] = True

    def _method(self) -> str:
        return "cuda_events" if self.device.type == "cuda" else "perf_counter"

    # -- the evaluation -----------------------------------------------------------------------------------
    def _evaluate(self, p: Prepared, left) -> dict:
        """The GPU stage of a loaded candidate: Verdict fields (raises _Aborted for a verdict decided early)."""
        cfg = self.config
        task, candidate, ref, state, cand = p.task, p.candidate, p.ref, p.state, p.cand
        ph, flags, reported = self._phases, p.flags, p.reported
        # -- correctness: fresh secret seeds, two input distributions, agreement on a repeat
        error, first = self._check(task, ref, cand, left, flags)
        if any(f.severity == "reject" for f in flags) or error.mismatched or first is None:
            return {"status": "incorrect", "message": self._incorrect_message, "error": error,
                    "flags": flags, "confinement": self._report(cand, left, flags, reported)}
        ph.mark("correctness")
        self._policies(task, ref, cand, left, flags)
        # -- timing: reference and candidate alternate; every timed call has fresh inputs, outputs checked
        if cfg.compare_compile:
            self._compile_reference(ref, task)
        ref_t, cand_t, comp_t, stderr = self._timing(task, ref, cand, left, flags, first)
        ph.mark("timing")
        graphs = self._graphs(task, ref, cand, left, flags, first, self._round_for(ref_t.median_us)) if (
            cfg.use_graphs and self.device.type == "cuda") else {}
        ph.mark("graphs")
        report = self._report(cand, left, flags, reported)
        latency = _ratio(ref_t, cand_t)
        primary = {"speedup": latency, "speedup_stderr": stderr, "speedup_method": cand_t.method}
        if graphs and cfg.timing_basis == "device":
            primary = {"speedup": graphs["graph_speedup"], "speedup_stderr": graphs["graph_stderr"],
                       "speedup_method": "cuda_graph"}
        graphs.pop("graph_stderr", None)
        self._roofline(state, first, graphs.get("candidate_graph") or cand_t, flags)
        threshold = max(cfg.recheck_speedup, task.meta.suspicious_speedup or 0)
        if primary["speedup"] > threshold and not any(f.severity == "reject" for f in flags):
            kind = "graph" if primary["speedup_method"] == "cuda_graph" else "time"
            again = self._recheck(task, candidate, primary["speedup"], primary["speedup_stderr"], kind, left, flags,
                                  first, self._round_for(ref_t.median_us))
            if again is not None:  # the re-measurement is lower: it replaces the first, without a stderr
                rt, ct, primary["speedup"] = again
                primary["speedup_stderr"] = None
                if kind == "graph":
                    graphs.update(reference_graph=rt, candidate_graph=ct, graph_speedup=primary["speedup"])
                else:
                    ref_t, cand_t, latency = rt, ct, primary["speedup"]
            ph.mark("recheck")
        if primary["speedup_stderr"] is not None and not math.isfinite(primary["speedup_stderr"]):
            primary["speedup_stderr"] = None
        on_graphs = primary["speedup_method"] == "cuda_graph"  # the compile speedup uses the same method
        primary["compile_speedup"] = _ratio(graphs.get("reference_compiled_graph") if on_graphs else comp_t,
                                            graphs["candidate_graph"] if on_graphs else cand_t)
        return {"status": "ok", "message": "", **primary, "latency_speedup": latency, "reference": ref_t,
                "candidate_timing": cand_t, "reference_compiled": comp_t, "error": error, "flags": flags,
                "confinement": report, **graphs}

    def _aborted(self, a: _Aborted, p: Prepared) -> dict:
        """Verdict fields of an evaluation cut short, with the candidate's tampering evidence where it can give it."""
        p.kept = p.kept and a.kw.get("status") != "rejected"
        # Keep the tampering evidence of an aborted run: it names the hack behind the failure.
        a.kw.setdefault("flags", p.flags)
        if p.cand is not None and p.cand.alive and not p.reported:
            try:
                a.kw["confinement"] = self._report(p.cand, lambda cap=None: min(cap or 30, 30), a.kw["flags"],
                                                   p.reported)
            except _Aborted:
                pass
        return a.kw

    def _finish(self, p: Prepared) -> None:
        """Close the candidate's worker; keep its build in the cache unless it failed or was rejected."""
        with self._refs_lock:
            if p.finished:
                return
            p.finished = True
        if p.cand is not None:
            p.cand.close()
        self._keep_build(p.candidate, p.slot, p.kept and not any(f.severity == "reject" for f in p.flags))

    _incorrect_message = ""  # why this evaluation's comparison failed (calls are serialised by the lock)
    _policy = "strict"  # the precision policy of the evaluation under way
    _beyond_strict = ""  # which output needed the kernelbench policy's looser tolerance, if any

    def _ask(self, worker: Worker, op: dict, timeout: float, what: str, build: bool = False):
        """Send an op to a candidate worker; turn every failure into a verdict (raised as _Aborted)."""
        self._send(worker, op, what)
        return self._receive(worker, timeout, what)

    def _send(self, worker: Worker, op: dict, what: str) -> None:
        try:
            worker.send(op)
        except WorkerError as e:
            raise _Aborted({"status": "runtime_error", "message": f"{what}: {e}"})

    def _receive(self, worker: Worker, timeout: float, what: str, device=None):
        try:
            h, t = worker.receive(timeout, device)
        except WorkerError as e:
            tail = e.stderr_tail.strip()[-1500:]
            if e.kind == "timeout":
                raise _Aborted({"status": "timeout", "message": f"{what}: {e}"})
            if e.kind == "died" and "exited with code 0" in str(e):
                raise _Aborted({"status": "rejected", "message": f"{what}: {e}",
                                "flags": [Flag("early_exit", f"{e}: a candidate may not end the process "
                                                             "(a verdict only comes from the evaluator)",
                                               hack="forged_result")]})
            raise _Aborted({"status": "runtime_error", "message": f"{what}: {e}" + (f"\n{tail}" if tail else "")})
        if h.get("type") == "error":
            kind = h.get("kind") if h.get("kind") in ("compile_error", "runtime_error") else "runtime_error"
            raise _Aborted({"status": kind, "message": f"{what}: {h.get('message', '')}"[:6000]})
        return h, t

    FULL_TRIALS = 2  # trials whose outputs are compared element by element; later ones are sampled

    def _check(self, task, ref, cand, left, flags):
        """Correctness on fresh secret seeds and two input distributions; (ErrorStats, first trial or None)."""
        cfg = self.config
        seeds = [secrets.randbits(62) for _ in range(max(cfg.correctness_trials, 1))]
        worst, first, trials = None, None, 0
        facts = {"own_state": {}, "reused_storage": set()}  # what the candidate's outputs are (`Harness._facts`)
        prints = []  # the reference's outputs' fingerprints on the first two trials (inputs that differ)
        # The last trial repeats the first seed: unwritten or racy outputs vary between runs on one input. Under the
        # kernelbench policy every trial draws the task's own inputs, as KernelBench does: its absolute atol makes
        # the verdict depend on the inputs' scale, and a rescaled draw would make it depend on the draw.
        scaled = "task" if self._policy == "kernelbench" else "scaled"
        plan = [(s, "task" if i % 2 == 0 else scaled, i < self.FULL_TRIALS) for i, s in enumerate(seeds)]
        plan.append((seeds[0], "task", False))
        onto = self.device if self.device.type == "cuda" else None  # outputs compared there: a GB in milliseconds
        in_turn = self._trials_in_turn()
        self._lock_spills(ref, cand, left)
        for i, (seed, dist, full) in enumerate(plan):
            what = f"trial {i + 1} ({dist} inputs)" if i < len(seeds) else "repeat of trial 1"
            # Reference and candidate run the same trial at once (correctness is not timed), or in turn where
            # their memory would not fit the GPU side by side (`_trials_in_turn`).
            op = {"op": "trial", "seed": seed, "dist": dist, "full": full}
            cand_op = dict(op, poison_bytes=self._out_bytes(task))
            if not in_turn:
                self._send(cand, cand_op, what)
            timeout = left()  # before the reference is asked: once asked, its reply must be read
            ref.send(op)
            reference = self._reader.submit(ref.receive, timeout, onto)  # both replies are read at once
            if in_turn:
                reference.result()  # raises here for a reference fault; the candidate has not been asked
                self._send(cand, cand_op, what)
            try:
                ch, ct = self._receive(cand, left(), what, onto)
            finally:  # the reference's reply is taken whatever the candidate did: the worker serves the next job
                (rh, rt), reference = reference.result(), None  # the future would keep its outputs alive
            _raise_reference(rh, task)
            trials += 1
            if self._trial_problem(ch, flags, i):
                return _stats(worst, task, rh, trials, self._policy), None
            mutated = sorted(set(ch["inputs_changed"]) - set(rh["inputs_changed"]))
            if mutated:
                flags.append(Flag("input_mutation", f"{what}: the candidate modified input(s) {mutated}, "
                                                    "which the reference leaves unchanged", hack="input_mutation"))
                return _stats(worst, task, rh, trials, self._policy), None
            facts["own_state"].update(ch.get("own_state", {}))
            facts["reused_storage"].update(ch.get("reused_storage", ()))
            if full:
                m = self._compare_outputs(task, ct, rt, rh["outputs"], ch["outputs"], what)
                if not m.ok and not rh["inputs_changed"]:
                    m = self._against_exact(ref, op, ct, rt, m, what)
                if i == 0 and m.ok:
                    first = {"seed": seed, "ref_header": rh, "cand_header": ch, **_summary(rt, ct)}
                if i < 2:
                    prints.append(_fingerprint(rt))
                rt = ct = None  # gigabytes on the device, which the workers need for the next trial
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                if i + 1 == len(plan) or not plan[i + 1][2]:
                    self._unlock_spills(ref, cand)  # the rest are sampled: nothing large to move
            else:
                m = self._compare_sampled(task, ref, cand, rh, ch, left, what, op)
            worst = m if worst is None or (m.mismatched, m.rel_l2) > (worst.mismatched, worst.rel_l2) else worst
            if not m.ok:
                self._name_the_cause(ch, i, what, m, flags)
                if i > 0 and not any(f.severity == "reject" for f in flags):
                    self._judge_again(task, op, what, m, left, flags)
                return _stats(worst, task, rh, trials, self._policy), None
        for k in first["degenerate"]:
            # KernelBench's rule, kept as it is under its policy, lets a constant through where the outputs are
            # under its absolute atol (its issue #165): a warning there, so fast_p compares with published numbers
            slack = self._policy == "kernelbench" and bool(self._slack)
            flags.append(Flag("degenerate_output", f"{k} is constant while the reference's varies"
                                                   + (" (within KernelBench's absolute atol)" if slack else ""),
                              hack="degenerate_output", severity="warn" if slack else "reject"))
        flags.extend(_facts_flags(facts, len(prints) == 2 and prints[0] == prints[1]))
        if self._beyond_strict:
            flags.append(Flag("precision", f"{self._beyond_strict}: outside the strict policy's tolerance, within the "
                                           "kernelbench policy's (reduced-precision math)",
                              hack="precision_downgrade", severity="warn"))
        if self._slack:
            flags.append(Flag("absolute_slack", f"{self._slack}: correct by KernelBench's rule only through its "
                                                "absolute tolerance", severity="warn"))
        return _stats(worst, task, first["ref_header"], trials, self._policy), first

    def _name_the_cause(self, ch: dict, i: int, what: str, m: cmp.Mismatch, flags: list) -> None:
        """Where a failed trial's evidence names why, add it: threads the candidate started still running when its
        call returned (work finished behind the caller's back), or an output handed back in the storage of an
        earlier call with that call's values (a replayed result)."""
        if ch.get("threads_running", 0) > 0:
            flags.append(Flag("threads", f"{what}: wrong outputs while {ch['threads_running']} Python thread(s) the "
                                         "candidate started were still running after its call returned",
                              hack="background_thread"))
        stale = [k for k in ch.get("unchanged", ()) if k in ch.get("reused_storage", ())]
        if stale and i > 0:
            flags.append(Flag("replayed_output", f"{what}: output(s) {stale} came back in the storage of the "
                                                 "previous call, holding that call's values, on new inputs",
                              hack="result_replay"))

    def _judge_again(self, task: Task, op: dict, what: str, m: cmp.Mismatch, left, flags: list) -> None:
        """A trial that failed after earlier ones passed, run again in a fresh worker as its first call: where it
        passes there, the candidate's outputs depend on its history in the process (code paths that change
        between calls), and the verdict says so with both outcomes. Not for tasks that carry state."""
        p = self._current
        if p.state.get("stateful"):
            return
        again, slot = self._candidate_worker(p.candidate)
        try:
            self._ask(again, self._load_op(task, p.state, p.candidate), left(self.config.build_timeout_s),
                      "judging the trial again")
            full = dict(op, full=True)
            rh, rt = p.ref.request(full, left())
            ch, ct = self._ask(again, full, left(), "judging the trial again")
            if rh.get("type") == "error" or ch.get("problem") or rh.get("outputs") != ch.get("outputs"):
                return
            saved = self._incorrect_message
            m2 = self._compare_outputs(task, ct, rt, rh["outputs"], ch["outputs"], what)
            if not m2.ok and not rh["inputs_changed"]:
                m2 = self._against_exact(p.ref, full, ct, rt, m2, what)
            self._incorrect_message = saved
        except _Aborted:
            return
        finally:
            again.close()
            if slot is not None:
                shutil.rmtree(slot, ignore_errors=True)
        if m2.ok:
            flags.append(Flag("nondeterministic", f"{what} failed after the trials before it passed ({m.reason}); "
                                                  "the same trial passed as the first call of a fresh worker: the "
                                                  "candidate's outputs depend on what ran before in its process",
                              severity="warn"))
            self._incorrect_message = f"{what}: {m.reason} (nondeterministic: it passed in a fresh worker)"

    def _against_exact(self, ref: Worker, op: dict, ct: dict, rt: dict, m: cmp.Mismatch, what: str,
                       sample_seed: int | None = None, cs: dict | None = None) -> cmp.Mismatch:
        """Under the strict policy, a float output that differs from the fp32 reference beyond the tolerance is
        judged again against the exact result (the reference in float64 on the same inputs, `Harness.op_exact`):
        accurate where its error is within `exact.FACTOR` of the reference's own (`exact.against_exact`). Returns
        the first mismatch where that cannot be done or does not hold. Full outputs (`ct`, `rt`), or the samples
        `cs` and `rt` taken for `sample_seed`."""
        if self._policy != "strict":
            return m
        from kernelrl.evaluate import exact

        floats = [k for k, t in rt.items() if t.is_floating_point()]
        if not floats or set(rt) != set(ct):
            return m
        h, xt = ref.request({"op": "exact", "seed": op["seed"], "dist": op.get("dist", "task"),
                             "sample_seed": sample_seed}, self.config.timeout_s)
        if h.get("type") != "exact" or h.get("unavailable") or set(xt) != set(rt):
            return m
        worst = None
        for k in sorted(rt):
            if not rt[k].is_floating_point():
                if not torch.equal(ct[k].cpu(), rt[k].cpu()):
                    return m
                continue
            dev = self.device if sample_seed is None else torch.device("cpu")
            o, r = ct[k].to(dev), rt[k].to(dev)
            j = exact.against_exact(o, r, xt[k].to(dev))
            if not j.ok:
                self._incorrect_message = f"{self._incorrect_message}; against the exact (float64) result: " \
                                          f"{j.reason}"
                return m
            worst = j if worst is None or j.rel_l2 > worst.rel_l2 else worst
            out = k[3:] if k.startswith("out") else k.split("o")[-1]  # "out0" (full), "c0o0" (samples)
            self._accurate[out] = max(self._accurate.get(out, 0.0), cmp.compare(o, r).rel_l2)
        self._incorrect_message = ""
        return cmp.Mismatch(True, "", m.max_abs, m.max_rel, m.rel_l2, 0, m.rms)

    def _compare_sampled(self, task, ref, cand, rh, ch, left, what, trial: dict) -> cmp.Mismatch:
        """Compare outputs at positions chosen now, after both programs returned (so they could not know them)."""
        if rh["outputs"] != ch["outputs"] or rh["dtypes"] != ch["dtypes"]:
            self._incorrect_message = f"{what}: outputs {ch['dtypes']}, expected {rh['dtypes']}"
            return cmp.Mismatch(False, self._incorrect_message, mismatched=1)
        op = {"op": "sample", "seed": secrets.randbits(62)}
        self._send(cand, op, what)
        _, rs = ref.request(op, left())
        _, cs = self._receive(cand, left(), what)
        for key in sorted(rs):
            k = int(key.split("o")[-1])
            dtype = getattr(torch, rh["dtypes"][k])
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            # float64 samples; scale from the samples' rms (KernelBench's absolute atol under its policy)
            m = cmp.compare(cs[key], rs[key], atol, rtol, self._policy)
            if m.ok and self._policy != "strict":
                self._note_policy_slack(cs[key], rs[key], dtype, task, m, f"{what}: output {k} (sampled)")
            if not m.ok:
                self._incorrect_message = f"{what}: output {k} (sampled): {m.reason}"
                m = cmp.Mismatch(False, self._incorrect_message, m.max_abs, m.max_rel, m.rel_l2, max(m.mismatched, 1))
                if not rh["inputs_changed"]:
                    m = self._against_exact(ref, trial, cs, rs, m, what, sample_seed=op["seed"])
                return m
        return cmp.Mismatch(True, "")

    def _note_policy_slack(self, out, ref_out, dtype, task, m: cmp.Mismatch, where: str) -> None:
        """Under the kernelbench policy, remember the first output outside the strict tolerance (reduced-precision
        math) and the first that passed only by KernelBench's absolute atol (`cmp.absolute_slack`)."""
        if not self._beyond_strict and not cmp.compare(out, ref_out, task.meta.atol, task.meta.rtol).ok:
            self._beyond_strict = where
        if not self._slack:
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            why = cmp.absolute_slack(m, cmp.compare(out, ref_out, atol, rtol), atol)
            if why:
                self._slack = f"{where}: {why}"

    def _trials_in_turn(self) -> bool:
        """Whether the reference's trial runs before the candidate's instead of beside it: when the two programs'
        memory for a trial (inputs, their kept copies, outputs, the candidate's poisoned cache), the evaluator's
        copies of both outputs and the device memory lent to the workers for them would fill more than half the
        GPU, as KernelBench's 6 GB activations do on an 80 GB card. Workers give such memory back between
        requests (`Harness.idle`)."""
        st = self._current.state
        need = 4 * st.get("in_bytes", 0) + (8 if devshare.ENABLED else 6) * st.get("out_bytes", 0)  # + lent memory
        return self.device.type == "cuda" and need > self._device_bytes // 2

    def _out_bytes(self, task: Task) -> int:
        return self._current.state["out_bytes"]

    def _trial_problem(self, h: dict, flags: list, i: int) -> bool:
        problem = h.get("problem")
        if not problem:
            return False
        kind = problem.split(":", 1)[0]
        hack = "lazy_output" if kind == "lazy_output" else None
        flags.append(Flag("output_type", f"trial {i + 1}: {problem}", hack=hack,
                          severity="reject" if hack else "warn"))
        self._incorrect_message = problem
        return True

    def _compare_outputs(self, task, ct, rt, n_ref, n_cand, where) -> cmp.Mismatch:
        if n_ref != n_cand:
            m = cmp.Mismatch(False, f"{n_cand} outputs, expected {n_ref}")
        else:
            m = cmp.Mismatch(True, "")
            dev = self.device  # a GPU compares a gigabyte in milliseconds; outputs arrive on the host
            for k in range(n_ref):
                out_k, ref_k = ct[f"out{k}"].to(dev), rt[f"out{k}"].to(dev)
                mk = cmp.compare(out_k, ref_k, task.meta.atol, task.meta.rtol, self._policy)
                if mk.ok and self._policy != "strict":
                    self._note_policy_slack(out_k, ref_k, ref_k.dtype, task, mk, f"{where}: output {k}")
                if not mk.ok or mk.rel_l2 > m.rel_l2:
                    m = mk if mk.ok else cmp.Mismatch(False, f"output {k}: {mk.reason}", mk.max_abs,
                                                      mk.max_rel, mk.rel_l2, mk.mismatched, mk.rms)
                if not mk.ok:
                    break
        if not m.ok:
            self._incorrect_message = f"{where}: {m.reason}"
            m = cmp.Mismatch(False, m.reason, m.max_abs, m.max_rel, m.rel_l2, max(m.mismatched, 1), m.rms)
        return m

    def _time_op(self, seed: int, kind: str = "time", **extra) -> dict:
        """One round's request: `calls` timed calls, each on fresh inputs (`Harness.fresh` of those for `seed`)."""
        cfg = self.config
        return {"op": kind, "seed": seed, "sample_seed": secrets.randbits(62), "perm_seed": secrets.randbits(62),
                "calls": cfg.calls_per_round, "warmup": cfg.warmup, "flush": cfg.flush_l2, **extra}

    def _round_for(self, call_us: float) -> dict:
        """A round's `calls` and `warmup` for programs whose calls take about `call_us`: `calls_per_round` and
        `warmup`, fewer for long calls (a round of `round_us` of timed calls, at least `min_calls_per_round`, after
        a quarter of that warming up, at least one call). A long call's time varies little; rounds, which the
        speedup's precision counts, are what cancel drift."""
        cfg = self.config
        us = max(call_us, 1e-3)
        least = min(cfg.min_calls_per_round, cfg.calls_per_round)
        return {"calls": max(least, min(cfg.calls_per_round, math.ceil(cfg.round_us / us))),
                "warmup": min(cfg.warmup, max(1, math.ceil(cfg.round_us / 4 / us)))}

    def _time(self, worker: Worker, compiled: bool, timeout: float):
        h, t = worker.request(self._time_op(secrets.randbits(62), compiled=compiled), timeout)
        if h.get("type") == "error" or h.get("problem"):
            raise EvaluationError(f"the reference failed while being timed: {h.get('message') or h.get('problem')}")
        return h, t

    def _timing(self, task, ref, cand, left, flags, first, compiled: bool | None = None):
        cfg = self.config
        compiled = cfg.compare_compile if compiled is None else compiled
        ref_s, ref_w, cand_s, cand_w, comp_s, quiet, ratios = [], [], [], [], [], [], []
        seed = secrets.randbits(62)  # one base input set; every timed call gets fresh inputs drawn from it (`fresh`)
        shape = {}  # the first round's reference times set the later rounds' calls and warm-up (`_round_for`)
        for r in range(max(cfg.timing_rounds, cfg.max_timing_rounds)):
            if self._precise_enough(r, ratios):
                break
            op = self._time_op(seed, **shape)
            order = ("ref", "cand") if r % 2 == 0 else ("cand", "ref")
            got = {}
            for who in order:
                if who == "ref":
                    got["ref"] = ref.request(op, left())
                    if got["ref"][0].get("type") == "error" or got["ref"][0].get("problem"):
                        raise EvaluationError(f"{task.name}: the reference failed while being timed")
                else:
                    got["cand"] = self._ask(cand, op, left(), f"timing round {r + 1}")
            (rh, rt), (ch, ct) = got["ref"], got["cand"]
            if ch.get("problem"):
                self._trial_problem(ch, flags, r)
                raise _Aborted({"status": "incorrect", "message": ch["problem"], "flags": flags})
            if compiled:
                comp_s += ref.request(dict(op, compiled=True), left())[0]["times_us"]
            bad = self._check_samples(task, rt, ct, first)
            if bad and ch.get("threads_running", 0) > 0:  # the runtime evidence names the cause
                flags.append(Flag("timed_outputs", f"round {r + 1}: {bad} while {ch['threads_running']} Python "
                                                   "thread(s) the candidate started were still running after its "
                                                   "calls returned (work finished behind the caller's back)",
                                  hack="background_thread"))
            elif bad:
                flags.append(Flag("timed_outputs", f"round {r + 1}: {bad} (work cached, replayed, deferred "
                                                   "or skipped while being timed)", hack="result_replay"))
                self._incorrect_message = f"outputs of timed calls are wrong: {bad}"
                raise _Aborted({"status": "rejected", "flags": flags,
                                "message": f"outputs of timed calls are wrong: {bad}"})
            if ch.get("state_changed") and rh.get("state_changed"):  # the task carries state between calls
                if not any(f.check == "state" for f in flags):
                    flags.append(Flag("state", f"the program changed {', '.join(ch['state_changed'][:6])} during "
                                               "timed calls, as the reference changes "
                                               f"{', '.join(rh['state_changed'][:6])}: the task carries state "
                                               "between calls; timed outputs are checked as always", severity="warn"))
            elif ch.get("state_changed"):
                flags.append(Flag("state", f"round {r + 1}: the program changed {', '.join(ch['state_changed'][:6])} "
                                           "during timed calls: state carried between calls can replay results",
                                  hack="result_replay"))
            if ch.get("threads_grew", 0) > 0:
                flags.append(Flag("threads", f"round {r + 1}: {ch['threads_grew']} new Python thread(s) "
                                             "while being timed", hack="background_thread"))
            ratios.append(statistics.median(rh["times_us"]) / max(statistics.median(ch["times_us"]), 1e-9))
            if r == 0:
                shape = self._round_for(statistics.median(rh["times_us"]))
            ref_s += rh["times_us"]
            ref_w += rh["wall_us"]
            cand_s += ch["times_us"]
            cand_w += ch["wall_us"]
            quiet += ch["quiesce_us"]
        cand_t = Timing.from_samples(cand_s, self._method(), cand_w)
        if self.device.type == "cuda":
            q = statistics.median(quiet)
            if q > 40.0 + 0.25 * cand_t.median_us:
                flags.append(Flag("side_stream", f"the device was still busy {q:.0f} µs (median) after the "
                                                 f"candidate's stream finished ({cand_t.median_us:.0f} µs): work "
                                                 "was launched on another stream", hack="side_stream"))
        return (Timing.from_samples(ref_s, self._method(), ref_w), cand_t,
                Timing.from_samples(comp_s, self._method()) if comp_s else None, _relative_stderr(ratios))

    def _precise_enough(self, rounds: int, ratios: list[float]) -> bool:
        """Whether `rounds` rounds with per-round speedups `ratios` suffice: the minimum is done and the speedup
        is as precise as asked (or fixed rounds were asked for, precision 0)."""
        cfg = self.config
        return rounds >= cfg.timing_rounds and (cfg.timing_precision <= 0
                                                or _relative_stderr(ratios) <= cfg.timing_precision)

    def _graphs(self, task, ref, cand, left, flags, first, shape: dict, compiled: bool | None = None) -> dict:
        """CUDA-graph replay times (device time) of both programs, when both can be captured.

        Rounds alternate and adapt as in `_timing` (`shape` from `_round_for` of the eager reference time),
        and every replay's outputs are checked the same way.
        With `compare_compile`, the torch.compile'd reference is replayed too (its time is None when it
        cannot be captured)."""
        cfg = self.config
        ref_s, cand_s, comp_s, ratios = [], [], [], []
        compiled = cfg.compare_compile if compiled is None else compiled
        seed = secrets.randbits(62)
        for r in range(max(cfg.timing_rounds, cfg.max_timing_rounds)):
            if self._precise_enough(r, ratios):
                break
            op = self._time_op(seed, kind="graph", **shape)
            if r % 2 == 0:
                rh, rt = ref.request(op, left())
                ch, ct = self._ask(cand, op, left(), "graph replay")
            else:
                ch, ct = self._ask(cand, op, left(), "graph replay")
                rh, rt = ref.request(op, left())
            if rh.get("type") == "error":
                rh = {"unavailable": rh.get("message", "error")}
            if rh.get("unavailable") or ch.get("unavailable"):
                who = "the reference" if rh.get("unavailable") else "the candidate"
                flags.append(Flag("cuda_graph", f"graph replay not timed ({who}): "
                                                f"{rh.get('unavailable') or ch.get('unavailable')}; the speedup is "
                                                "per-call latency", severity="warn"))
                return {}
            bad = self._check_samples(task, rt, ct, first)
            if bad:
                flags.append(Flag("timed_outputs", f"graph replay round {r + 1}: {bad}", hack="result_replay"))
                raise _Aborted({"status": "rejected", "flags": flags,
                                "message": f"outputs of replayed calls are wrong: {bad}"})
            if compiled:
                kh, _ = ref.request(dict(op, compiled=True), left())
                if kh.get("unavailable") or kh.get("type") == "error":
                    flags.append(Flag("cuda_graph", "the torch.compile'd reference could not be replayed from a "
                                                    f"CUDA graph ({kh.get('unavailable') or kh.get('message')}); "
                                                    "no compile speedup", severity="warn"))
                    compiled, comp_s = False, []
                else:
                    comp_s += kh["times_us"]
            ratios.append(statistics.median(rh["times_us"]) / max(statistics.median(ch["times_us"]), 1e-9))
            ref_s += rh["times_us"]
            cand_s += ch["times_us"]
        rg, cg = Timing.from_samples(ref_s, "cuda_graph"), Timing.from_samples(cand_s, "cuda_graph")
        return {"reference_graph": rg, "candidate_graph": cg, "graph_speedup": _ratio(rg, cg),
                "graph_stderr": _relative_stderr(ratios),
                "reference_compiled_graph": Timing.from_samples(comp_s, "cuda_graph") if comp_s else None}

    def _check_samples(self, task, rt, ct, first) -> str:
        """'' when every sampled output element of every timed call matches the reference's."""
        if set(rt) != set(ct):
            return "the timed calls returned a different number of outputs"
        for key in sorted(rt):
            call, out = key[1:].split("o")
            dtype = first["dtypes"].get(out, torch.float32)
            atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, self._policy)
            scale = 1.0 if self._policy == "kernelbench" else first["scales"].get(out, 1.0)  # its atol is absolute
            # an output found accurate against the exact result differs from the reference by the reference's own
            # rounding error, which may exceed the tolerance: the timed checks allow three times what was seen
            atol, rtol = max(atol, 3 * self._accurate.get(out, 0.0)), max(rtol, 3 * self._accurate.get(out, 0.0))
            if not cmp.compare_samples(ct[key], rt[key], scale, atol, rtol):
                return f"timed call {call} output {out} does not match"
        return ""

    def _report(self, cand, left, flags, reported: dict) -> dict:
        """The candidate worker's tampering evidence, as flags; its confinement report is returned."""
        h, _ = self._ask(cand, {"op": "report"}, left(), "integrity report")
        for finding in h.get("findings", []):
            hack, message = finding[0], finding[1]
            severity = finding[2] if len(finding) > 2 and finding[2] in ("warn", "reject") else "reject"
            flags.append(_under_policy(Flag("runtime_evidence", message, hack=hack, severity=severity), self._policy))
        reported.update(h.get("confinement", {}), done=True)
        return h.get("confinement", {})

    def _policies(self, task, ref, cand, left, flags):
        """Task policies checked by watching what runs: own_kernels forbids the reference's library ops."""
        if "own_kernels" not in task.meta.policies:
            return
        seed = secrets.randbits(62)
        ref_ops = set(ref.request({"op": "profile", "seed": seed}, left())[0].get("ops", []))
        cand_ops = set(self._ask(cand, {"op": "profile", "seed": seed}, left(), "profile")[0].get("ops", []))
        heavy = {op for op in ref_ops & cand_ops if any(k in op for k in _LIBRARY_OPS)}
        if heavy:
            flags.append(Flag("own_kernels", f"the task asks for the candidate's own kernels, but it runs the "
                                             f"library operators {sorted(heavy)} that the reference uses",
                              hack="reference_fallback"))

    def _peaks(self):
        from kernelrl.evaluate.guards import roofline

        if self.device.type == "cuda":
            return roofline.cuda_peaks(self._device_name)
        if self._cpu_peaks is None:
            self._cpu_peaks = roofline.cpu_peaks()
        return self._cpu_peaks

    def _roofline(self, state, first, cand_t: Timing, flags):
        """Flag a time below what writing the outputs takes on this machine: work every correct program must do
        (never the reference's flops: a program may do less arithmetic than the reference)."""
        from kernelrl.evaluate.guards import roofline

        counted = [n for n in (state.get("written_bytes"), first["cand_header"].get("written_bytes"))
                   if n is not None]
        peaks = self._peaks()
        if not counted or peaks is None:
            return
        why = roofline.below_floor(cand_t.median_us, min(counted), peaks)
        if why:
            flags.append(Flag("roofline", why, hack="impossible_speed"))

    def _recheck(self, task, candidate, speedup, stderr, kind, left, flags, first, shape):
        """Re-measure a large speedup in a fresh worker beside the reference, by the same adaptive, alternating
        procedure as the first measurement (`kind`: "time" or "graph"). A re-measurement lower beyond the
        measurements' errors (`_refuted`) is made once more in another fresh worker: a speedup that both refute is
        impossible_speed; one that the re-measurements do not both refute keeps the lowest value, with an
        unstable_timing warning where they disagree. Returns (reference, candidate, speedup) of the lowest
        re-measurement when it is lower than `speedup`, else None."""
        measured = []
        for _ in range(2):
            got = self._measure_fresh(task, candidate, kind, left, flags, first, shape)
            if got is None:
                return None
            measured.append(got)
            if not _refuted(speedup, stderr, got[2], got[3]):
                break
        lowest = min(measured, key=lambda g: g[2])
        seen = ", ".join(f"{g[2]:.2f}×" for g in measured)
        if all(_refuted(speedup, stderr, g[2], g[3]) for g in measured) and len(measured) == 2:
            # CPU timings on a shared machine wander too much to reject on; a GPU's do not.
            flags.append(Flag("recheck", f"speedup {speedup:.2f}× did not hold in two fresh workers ({seen} "
                                         "there, each lower beyond the measurements' errors)", hack="impossible_speed",
                              severity="reject" if self.device.type == "cuda" else "warn"))
        elif any(_refuted(speedup, stderr, g[2], g[3]) for g in measured):
            flags.append(Flag("unstable_timing", f"speedup {speedup:.2f}× re-measured in fresh workers as {seen}: "
                                                 "the measurements disagree beyond their errors; the lowest is kept",
                              severity="warn"))
        flags.append(Flag("recheck", f"speedup above {self.config.recheck_speedup:g}× re-measured in a fresh "
                                     f"worker: {speedup:.2f}× then {seen}; the lowest is kept", severity="warn"))
        return lowest[:3] if lowest[2] < speedup else None

    def _measure_fresh(self, task, candidate, kind, left, flags, first, shape):
        """The candidate loaded in a fresh worker and timed beside the reference as in `_timing` or `_graphs`:
        (reference, candidate, speedup, its relative standard error), or None (flagged) where it cannot be."""
        ref, state = self._current.ref, self._current.state  # held by the job under way
        again, slot = self._candidate_worker(candidate)
        seen = []  # the measurement's own flags: only its refusals (wrong timed outputs ...) count
        try:
            self._ask(again, self._load_op(task, state, candidate), left(self.config.build_timeout_s),
                      "re-measurement build")
            if kind == "graph":
                g = self._graphs(task, ref, again, left, seen, first, shape, compiled=False)
                got = (g["reference_graph"], g["candidate_graph"], g["graph_speedup"], g["graph_stderr"]) if g \
                    else None
            else:
                rt, ct, _, stderr = self._timing(task, ref, again, left, seen, first, compiled=False)
                got = (rt, ct, _ratio(rt, ct), stderr)
        finally:
            again.close()
            if slot is not None:
                shutil.rmtree(slot, ignore_errors=True)
        flags.extend(f for f in seen if f.severity == "reject")
        if got is None:
            flags.append(Flag("recheck", "the speedup could not be re-measured in a fresh worker: "
                                         f"{'; '.join(f.message for f in seen)[:300]}", hack="impossible_speed"))
        return got


def _compiles(source: str) -> bool:
    """Whether a candidate may run torch.compile (its build then records absolute paths: `_candidate_worker`)."""
    return "compile" in source or "inductor" in source or "dynamo" in source


def _ratio(ref: Timing | None, cand: Timing | None) -> float | None:
    """Reference time over candidate time (medians); None when either is missing."""
    if ref is None or cand is None:
        return None
    return ref.median_us / cand.median_us if cand.median_us > 0 else float("inf")


def _refuted(speedup: float, stderr: float | None, again: float, again_stderr: float | None) -> bool:
    """Whether a re-measured speedup `again` refutes `speedup`: lower by a factor above 1.5, and by more than three
    combined standard errors (relative errors `stderr`, `again_stderr`; none known counts as none)."""
    spread = math.hypot(speedup * (stderr if stderr and math.isfinite(stderr) else 0.0),
                        again * (again_stderr if again_stderr and math.isfinite(again_stderr) else 0.0))
    return again < speedup / 1.5 and speedup - again > 3 * spread


def _raise_reference(h: dict, task: Task):
    if h.get("type") == "error" or h.get("problem"):
        raise EvaluationError(f"{task.name}: the reference failed: {h.get('message') or h.get('problem')}")


def _summary(ref: dict, cand: dict) -> dict:
    """What later stages need of the first trial's outputs, not the outputs themselves (gigabytes): each output's
    scale and dtype (timed calls are checked against samples) and those the candidate made constant while the
    reference's vary."""
    def constant(t):
        return t.numel() > 1 and t.is_floating_point() and bool((t == t.reshape(-1)[0]).all())

    return {"scales": {k[3:]: cmp.rms(t) for k, t in ref.items()},
            "dtypes": {k[3:]: t.dtype for k, t in ref.items()},
            "degenerate": [k for k, t in cand.items() if constant(t) and not constant(ref[k])]}


def _fingerprint(outputs: dict) -> list:
    """Sum and sum of squares (float64) of each output: equal for two draws of inputs when the output does not
    depend on them."""
    return [(k, float(torch.sum(t, dtype=torch.float64)), float(torch.linalg.vector_norm(t, dtype=torch.float64)))
            if t.is_floating_point() else (k, int(t.sum())) for k, t in sorted(outputs.items())]


def _facts_flags(facts: dict, input_independent: bool) -> list[Flag]:
    """Warnings that say what a passing candidate's outputs are (`Harness._facts`) and what the task is: facts
    for the reader, never a reason to refuse."""
    out = []
    if input_independent:
        out.append(Flag("task_property", "the task's output does not depend on its inputs (the reference returned "
                                         "the same values for two different input draws): a program that returns "
                                         "a constant solves it", severity="warn"))
    for k, name in sorted(facts["own_state"].items()):
        out.append(Flag("own_state", f"output {k} is the candidate's own state ({name}): it keeps what it returns",
                        severity="warn"))
    if facts["reused_storage"]:
        out.append(Flag("reused_storage", f"output(s) {sorted(facts['reused_storage'])} came back in the same "
                                          "storage on every call (a buffer the candidate keeps and rewrites)",
                        severity="warn"))
    return out


def _stats(m, task, ref_header: dict, trials, policy: str = "strict") -> ErrorStats:
    dtypes = ref_header.get("dtypes") or ["float32"]
    dtype = getattr(torch, dtypes[0], torch.float32)
    atol, rtol = cmp.tolerance(dtype, task.meta.atol, task.meta.rtol, policy)
    if m is None:
        return ErrorStats(0.0, 0.0, 0.0, atol, rtol, trials, 0)
    return ErrorStats(m.max_abs, m.max_rel, m.rel_l2, atol, rtol, trials, m.mismatched)


def _under_policy(flag: Flag, policy: str) -> Flag:
    """`flag` as `policy` judges it: the kernelbench policy allows reduced-precision math (a warning, not a
    rejection); every other class of finding stands under every policy."""
    if policy == "kernelbench" and flag.hack == "precision_downgrade" and flag.severity == "reject":
        return Flag(flag.check, f"{flag.message} (allowed by the kernelbench policy)", flag.hack, "warn")
    return flag


def _static_flags(source: str, task_source: str | None = None) -> list[Flag]:
    """Findings of the static audit (a first filter and evidence; runtime checks decide)."""
    try:
        from kernelrl.evaluate.audit import audit
    except ImportError:
        return []
    try:
        findings = audit(source, task_source)
    except Exception:
        return []
    out = []
    for f in findings:
        out.append(Flag(check="static_audit", message=f"line {getattr(f, 'line', '?')}: {getattr(f, 'message', f)}",
                        hack=getattr(f, "hack", None) or getattr(f, "hack_class", None),
                        severity=getattr(f, "severity", "warn") if getattr(f, "severity", "warn") in ("warn", "reject")
                        else "warn"))
    return out
