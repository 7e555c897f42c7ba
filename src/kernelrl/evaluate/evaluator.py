"""The Evaluator: build, check, time and guard one candidate against its task's reference, on one device.

The reference runs in a worker kept per task; each candidate gets a fresh worker. This process (the caller's)
runs no task or candidate code: it picks secret seeds, keeps the reference's outputs, compares, and decides.
"""
from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from kernelrl.evaluate.config import EvalConfig
from kernelrl.sandbox.process import Worker, WorkerError
from kernelrl.task import Candidate, Task
from kernelrl.verdict import Flag, Verdict
from kernelrl.evaluate.job import Aborted, EvaluationError, Phases, Prepared
from kernelrl.evaluate.placement import build_cpus, worker_cpus
from kernelrl.evaluate.candidates import HARNESS, CandidateWorkers
from kernelrl.evaluate.refpool import ReferencePool
from kernelrl.evaluate.trials import Trials
from kernelrl.evaluate.timing import TimedRounds, _ratio, close_fresh, drop_fresh
from kernelrl.evaluate.integrity import Integrity, _static_flags, _under_policy
from kernelrl.evaluate.gpulock import device_lock
from kernelrl.evaluate.group import GroupTiming

__all__ = ["HARNESS", "EvaluationError", "Evaluator", "Prepared", "check_device"]


def _out_of_memory(e: BaseException) -> bool:
    """Whether an evaluation's failure is a program running out of device memory."""
    message = e.kw.get("message", "") if isinstance(e, Aborted) else str(e)
    return "out of memory" in message.lower()


# The GPU stage's phases in the order they run (`Phases`): a run cut short is in the first one not yet marked.
_GPU_PHASES = ("correctness", "alone", "timing", "graphs", "recheck")


def _in_progress(seen: dict) -> str:
    return next((name for name in _GPU_PHASES if name not in seen), _GPU_PHASES[-1])


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


class Evaluator(CandidateWorkers, ReferencePool, Trials, TimedRounds, Integrity, GroupTiming):
    """Judges candidates on one device. `prepare` (CPU stage) is thread-safe and may run for many candidates at
    once; `judge` (GPU stage), `judge_group` and `time_reference` are serialised; use one Evaluator per device. One job
    in order: its reference (`refpool`), its candidate's worker and build (`candidates`), correctness (`trials`),
    timing (`timing`), the integrity report (`integrity`), then the Verdict (here); candidates of one task may share
    their timing rounds (`group`)."""

    def __init__(self, config: EvalConfig | None = None, max_reference_workers: int = 2):
        self.config = config or EvalConfig()
        self.device = check_device(self.config.device)
        self._refs: OrderedDict[str, tuple[Worker, dict]] = OrderedDict()
        self._max_refs = max_reference_workers
        self._lock = threading.RLock()  # the GPU stage, one job at a time: judge, time_reference
        # the device: shared by what is not timed (correctness, probes, first calls), exclusive for timing; one lock
        # for every evaluator of a CUDA device in this process, each evaluator's GPU stage holding it as its `_stage`
        self._gpu = device_lock(self.device)
        self._stage = self._gpu.stage()
        self._refs_lock = threading.RLock()  # self._refs, self._spare, self._starting, self._live
        self._starting: dict[str, threading.Lock] = {}  # one reference start per task at a time
        self._next_seeds: dict[str, int] = {}  # task digest -> the seed its next reference start takes
        self._live: set[Prepared] = set()
        self._closed = False
        self.cache = self.config.cache_path
        self._device_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        self._device_bytes = torch.cuda.get_device_properties(self.device).total_memory \
            if self.device.type == "cuda" else 0
        self._cpu_peaks = None
        self._phases = Phases()
        self._spare: tuple[Worker, Path] | None = None
        self._cpus = worker_cpus(self.device)
        self._build_cpus = build_cpus(self.device)
        self._current: Prepared | None = None  # the job in the GPU stage
        self._lends = False  # whether workers here have taken lent device memory for their replies
        # reads the reference's reply of a trial while the candidate's is read (gigabyte replies, both at once)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="kernelrl-reference-reply")
        # starts and builds fresh workers for re-measurements while the device times on (`_foresee_recheck`)
        self._ahead = ThreadPoolExecutor(1, thread_name_prefix="kernelrl-recheck-worker")
        # reaps the candidate workers a GPU stage killed, and keeps their builds, after the stage (`_finish`)
        self._reaper = ThreadPoolExecutor(1, thread_name_prefix="kernelrl-worker-reaper")

    # -- public -------------------------------------------------------------------------------------------
    def evaluate(self, task: Task, candidate: Candidate) -> Verdict:
        """Correctness, speed and integrity of `candidate` on `task`; never raises for candidate faults. Returns once
        the candidate's worker is gone and its build kept (`judge` may return before: `_finish`)."""
        p = self.prepare(task, candidate)
        verdict = self.judge(p)
        if p.reaped is not None:
            p.reaped.result()
        return verdict

    def prepare(self, task: Task, candidate: Candidate, first_call: bool = True) -> Prepared:
        """The CPU stage: static checks, the task's reference worker, the candidate's worker, its import and
        build, its first call; raises EvaluationError when the reference does not run. Pass the result to `judge`
        (or `release`). `first_call=False` stops after the build: `first_call` then makes the rest of it (on
        another thread, say, while this one prepares the next job)."""
        p = Prepared(task, candidate, time.monotonic(), Phases(),
                     static=_static_flags(candidate.source, task.source))
        with self._refs_lock:
            self._live.add(p)
        left = self._left(p.t0 + self.config.timeout_s)
        try:  # the candidate's worker boots, loads and builds while the reference starts (or is found kept)
            p.cand, p.slot = self._candidate_worker(candidate)
            seed = self._reference_seed(task)
            built = time.monotonic() + self.config.build_timeout_s
            try:
                self._send(p.cand, self._load_op(task, seed, candidate), "build")
                sent = None
            except Aborted as a:  # the worker is gone: its verdict, once the reference runs
                sent = a
            p.ref, p.state = self._reference(task)
        except BaseException:
            self.release(p)
            raise
        p.phases.mark("reference")
        try:
            if sent is not None:
                raise sent
            self._receive(p.cand, left(max(built - time.monotonic(), 1e-3)), "build")
            if p.state["init"]["seed"] != seed:  # the reference was started again meanwhile, under another seed
                self._renew_candidate(p, left)
            self._reserve(p.cand, p.state)
            p.kept = True
            p.phases.mark("start_and_build")
        except Aborted as a:  # judged without the GPU stage (its integrity report is asked for there)
            p.aborted = a
        except BaseException:
            self.release(p)
            raise
        return self.first_call(p) if first_call else p

    def calls_first(self, p: Prepared) -> bool:
        """Whether `first_call` calls the candidate (`_first_call`), or only readies the job: not where the job is
        decided already, where the task's reference carries state from call to call (the candidate would be a call
        ahead of it), or where the call's memory is more than a quarter of the device's (`_calls_beside`)."""
        return p.aborted is None and p.cand is not None and self.config.early_first_call \
            and not p.state.get("stateful") and self._calls_beside(p.state)

    def first_call(self, p: Prepared) -> Prepared:
        """The end of the CPU stage of a job `prepare(..., first_call=False)` built: the candidate's first call
        where it makes one (`_first_call`; a wait since the build for this call to start counts as
        `first_call_wait`), then the job readied for its GPU stage."""
        try:
            if self.calls_first(p):
                queued = time.monotonic() - p.phases.t
                self._first_call(p, self._left(p.t0 + self.config.timeout_s))
                if queued >= 0.001:  # (`first_call` is marked already: it counts from the build's end)
                    p.phases.add("first_call_wait", queued)
        except Aborted as a:
            p.aborted = a
        except BaseException:
            self.release(p)
            raise
        p.ready = time.monotonic()
        if p.cand is not None:  # stopped while the device is timed for others, until its own GPU stage (`gpulock`)
            self._gpu.park(p.cand)
        return p

    FIRST_CALL_S = 120.0  # the most a candidate's first call in the CPU stage may take (`_first_call`)

    def _first_call(self, p: Prepared, left) -> None:
        """The candidate's first call, in the CPU stage, beside other untimed work on the device (`gpulock`):
        torch.compile and Triton compile a program's kernels at its first call, seconds of mostly CPU work that
        would otherwise hold the GPU stage. One call on seed 0 (no trial's secret seed), its outputs dropped and the
        candidate's output history cleared after it (`Harness.op_trial`). Made where `calls_first` says. A first
        call that fails or outlasts `FIRST_CALL_S` here decides nothing: the candidate gets a fresh worker and the GPU
        stage makes its first call, as where none is made here."""
        hold = None
        try:
            with self._gpu.beside() as hold:
                self._gated_call(p, hold, left(self.FIRST_CALL_S))
        except Aborted:
            self._renew_candidate(p, left)
        if hold is not None and hold.waited_s >= 0.001:  # the part of it that waited for the device (`gpulock`)
            p.phases.seen["first_call_wait"] = round(hold.waited_s, 3)
        p.phases.mark("first_call")

    def _gated_call(self, p: Prepared, hold, timeout: float) -> None:
        """The first call, the device held beside untimed work (`hold`, `DeviceLock.beside`) except while the
        candidate's torch.compile compiles: its worker says when a compilation starts, once the device has finished
        its work, and asks for the device again before the compiled code runs (`compilegate`), so that the GPU stage
        may time meanwhile. The seconds it gave the device back are the phase `compiling` (part of `first_call`)."""
        end = time.monotonic() + timeout
        self._send(p.cand, {"op": "trial", "seed": 0, "probe": True, "gate": True}, "first call")
        given, since = 0.0, None
        while True:
            h, _ = self._receive(p.cand, max(end - time.monotonic(), 1e-3), "first call")
            if h.get("type") != "gate":
                break
            if h.get("compiling"):
                hold.give_back()
                since = since or time.monotonic()
            else:
                given += time.monotonic() - since if since else 0.0
                since = None
                hold.take()
            self._send(p.cand, {"op": "go"}, "first call")
        if given:
            p.phases.seen["compiling"] = round(given, 3)

    def _renew_candidate(self, p: Prepared, left) -> None:
        """Replace a job's candidate worker with a fresh one (`_fresh_worker`), loaded and not yet called."""
        p.cand.close()
        self._keep_build(p.candidate, p.slot, False)
        p.slot = None  # gone with its worker; a fresh worker that fails to build is closed by `_fresh_worker`
        p.cand, p.slot = self._fresh_worker(p.task, p.candidate, p.state, left(self.config.build_timeout_s), "build")

    def judge(self, prepared: Prepared) -> Verdict:
        """The GPU stage of a prepared candidate (correctness, timing, graphs, recheck, report): its Verdict."""
        with self._lock:
            try:
                return self._judge(prepared)
            finally:
                self._current = None
                self._rest(prepared.ref)
                self._stage.let_go()
                self.release(prepared)

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
        start = time.monotonic()
        self._stage.hold(shared=self._shares(p.state))  # correctness beside other untimed work, or alone
        self._open(p, start)
        try:
            kw = self._untimed(p)
            if kw is None:
                self._stage.to_exclusive()  # nothing else runs on the device while the programs are timed
                p.phases.mark("alone")
                self._before_timing(p)
                kw = self._timed(p)
        except Aborted as a:
            kw = self._cut(a, p)
        finally:
            self._finish(p, in_stage=True)
        return self._verdict(p, kw)

    # The state of the evaluation under way, which its parts read and set (`_as` swaps it between jobs judged
    # together).
    PER_JOB = ("_phases", "_current", "_incorrect_message", "_policy", "_beyond_strict", "_slack", "_loose_exact",
               "_accurate")

    def _open(self, p: Prepared, start: float) -> None:
        """Start a job's GPU stage (begun at `start`, the device held since): its worker continued, the wait before it
        marked, its time limit (`p.left`, the wait between the stages not counted) and the evaluation's state set
        up."""
        if p.cand is not None:
            self._gpu.unpark(p.cand)
        p.phases.mark("waited")
        p.left = self._left(start + self.config.timeout_s - (p.ready - p.t0))
        self._phases = p.phases
        self._current = p
        self._incorrect_message = ""  # set by the comparison that fails, for this evaluation only
        self._policy = self.config.policy_for(p.task.meta)
        self._beyond_strict = ""  # set when outputs pass only the kernelbench policy's tolerance
        self._slack = ""  # set when outputs pass KernelBench's rule only by its absolute atol
        self._loose_exact = ""  # set when the exact-result test passed outputs with zeros inside its bound
        self._accurate = {}  # output index -> relative L2 distance from the reference of outputs found accurate

    def _cut(self, a: Aborted, p: Prepared) -> dict:
        """Verdict fields of a job cut short (`_aborted`); in the GPU stage its time so far is the phase it was in."""
        if p.aborted is None:
            p.phases.mark(_in_progress(p.phases.seen))
        return self._aborted(a, p)

    def _verdict(self, p: Prepared, kw: dict) -> Verdict:
        """The Verdict of a judged job from its fields `kw`, with its static flags."""
        static = [_under_policy(f, self._policy) for f in p.static]
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
        return Verdict(status=status, task=p.task.name, candidate=p.candidate.digest, device=str(self.device),
                       flags=flags, seconds=time.monotonic() - p.t0 - p.phases.seen["waited"],
                       phases=self._phases.done(), policy=self._policy, **kw)

    def _left(self, deadline: float):
        """A function of an optional cap: seconds left before `deadline`; raises Aborted (timeout) when none."""
        def left(cap: float | None = None) -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Aborted({"status": "timeout", "message": f"evaluation exceeded {self.config.timeout_s:.0f} s"})
            return min(remaining, cap) if cap else remaining
        return left

    def close(self):
        self._reaper.shutdown(wait=True)  # every killed worker reaped and its build kept
        with self._refs_lock:
            self._closed = True
            for p in list(self._live):  # candidates still being prepared stop at their next request
                if p.cand is not None:
                    self._gpu.unpark(p.cand)
                    p.cand.kill()
            for worker, _ in self._refs.values():
                worker.close()
            self._refs.clear()
            self._reader.shutdown(wait=False)
            self._ahead.shutdown(wait=False, cancel_futures=True)
            if self._spare is not None:
                self._discard(self._spare)
                self._spare = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the evaluation -----------------------------------------------------------------------------------
    def _untimed(self, p: Prepared) -> dict | None:
        """The GPU stage of a loaded candidate up to its timing (its evidence, its correctness trials): Verdict
        fields where that decides it, else None, the trials' results kept for `_timed` (raises Aborted for a
        verdict decided early)."""
        if p.aborted is not None:
            raise p.aborted
        task, ref, cand, left = p.task, p.ref, p.cand, p.left
        ph, flags, reported = self._phases, p.flags, p.reported
        # The evidence the candidate's process holds from its load and first call (the reference's code patched, a
        # precision switch under strict, a clock replaced) decides before any trial; it is read again after the
        # trials, for what a program does only when called, and once more after timing. Each read keeps what it
        # reads there (a patch, a switch, a set-aside), but for child processes the program left running after its
        # calls returned, which no honest program leaves. Not counted as the report (`reported`): a run cut short
        # later still asks for the evidence then.
        held = self._held(cand, left, "before the correctness trials")
        if held is not None:
            return {"status": "rejected", "message": "", "flags": flags + held[0], "confinement": held[1]}
        # -- correctness: fresh secret seeds, two input distributions, agreement on a repeat
        mark = len(flags)
        try:
            error, first = self._check(task, ref, cand, left, flags)
        except (Aborted, EvaluationError, torch.cuda.OutOfMemoryError) as e:
            if not (self._stage.shared and _out_of_memory(e)):
                raise
            # Out of device memory beside other untimed work, in a worker or in this process (the outputs it
            # receives and compares): the trials are run again with the device alone, in a fresh candidate worker
            # and the reference put back as built, so the verdict is the program's own.
            del flags[mark:]
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self._stage.to_exclusive()
            self._rest(ref)
            self._renew_candidate(p, left)
            cand = p.cand
            error, first = self._check(task, ref, cand, left, flags)
        if any(f.severity == "reject" for f in flags) or error.mismatched or first is None:
            ph.mark("correctness")  # the trials' time; the integrity report that follows is `finish`
            return {"status": "incorrect", "message": self._incorrect_message, "error": error,
                    "flags": flags, "confinement": self._report(cand, left, flags, reported)}
        held = self._held(cand, left, "after the correctness trials")
        if held is not None:
            ph.mark("correctness")
            return {"status": "rejected", "message": "", "error": error, "flags": flags + held[0],
                    "confinement": held[1]}
        ph.mark("correctness")
        p.error, p.first = error, first
        if first.get("ref_call_us") and first.get("cand_call_us"):
            # the trials' call times read a speedup above the re-measurement's threshold: its worker starts and
            # builds on a CPU lane now, while the device times this job (and, in a group, the others)
            self._foresee_recheck(task, first["ref_call_us"] / first["cand_call_us"])
        return None

    def _before_timing(self, p: Prepared) -> None:
        """What a job checks and readies with the device to itself before it is timed: the task's policies watched
        as the programs run, the reference compiled where compiled references are compared."""
        self._policies(p.task, p.ref, p.cand, p.left, p.flags)
        if self.config.compare_compile:
            self._compile_reference(p.ref, p.task)

    def _timed(self, p: Prepared, measured: tuple | None = None) -> dict:
        """The rest of a job's GPU stage, the device held alone: its timing (or `measured`, the eager timings and
        graph replays a group's timing gave it, `judge_group`), the integrity report, the re-measurement of a
        large speedup; its Verdict fields."""
        cfg = self.config
        task, candidate, ref, state, cand, left = p.task, p.candidate, p.ref, p.state, p.cand, p.left
        ph, flags, reported, error, first = self._phases, p.flags, p.reported, p.error, p.first
        # -- timing: reference and candidate alternate; every timed call has fresh inputs, outputs checked
        # Where graph replay will give the speedup, eager latency is measured to `latency_precision` only, after
        # `latency_rounds` and in `timing_rounds` at most (a launch-bound program's latency can take every round to
        # the limit, for a figure the verdict only reports), and to `timing_precision` after all if the programs
        # cannot be replayed (the rounds go on where they stopped).
        replayed = cfg.use_graphs and self.device.type == "cuda"
        if measured is None:
            rounds = {}
            ref_t, cand_t, comp_t, stderr = self._timing(task, ref, cand, left, flags, first, rounds=rounds,
                                                         **self._latency_bounds())
            ph.mark("timing")
            graphs = self._graphs(task, ref, cand, left, flags, first, self._round_for(ref_t.median_us)) \
                if replayed else {}
            ph.mark("graphs")
        else:
            rounds, graphs = measured
            ref_t, cand_t, comp_t, stderr = self._eager_timings(rounds, flags)
        if not graphs and len(rounds["ref_r"]) < self._round_limit() \
                and not self._precise_enough(rounds["ref_r"], rounds["cand_r"]):
            # A capture the device invalidated (a synchronisation inside it, say) can leave the candidate's process
            # computing wrong results afterwards: its rounds go on in a fresh worker.
            again = self._fresh_worker(task, candidate, state) if p.uncaptured == "candidate" else None
            try:
                ref_t, cand_t, comp_t, stderr = self._timing(task, ref, again[0] if again else cand, left, flags,
                                                             first, rounds=rounds)
            finally:
                if again:
                    close_fresh(*again)
            ph.mark("timing")
        report = self._report(cand, left, flags, reported)
        latency = _ratio(ref_t, cand_t)
        primary = {"speedup": latency, "speedup_stderr": stderr, "speedup_method": cand_t.method}
        if graphs and cfg.timing_basis == "device":
            primary = {"speedup": graphs["graph_speedup"], "speedup_stderr": graphs["graph_stderr"],
                       "speedup_method": "cuda_graph"}
        graphs.pop("graph_stderr", None)
        self._roofline(state, first, graphs.get("candidate_graph") or cand_t, flags)
        threshold = self._recheck_threshold(task)
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

    def _latency_bounds(self) -> dict:
        """`_timing`'s bounds on the eager rounds: where graph replay will give the speedup, latency to
        `latency_precision` in `latency_rounds` to `timing_rounds` (`_timed`); else the config's own."""
        cfg = self.config
        if not (cfg.use_graphs and self.device.type == "cuda" and cfg.timing_basis == "device"):
            return {}
        return {"precision": max(cfg.latency_precision, cfg.timing_precision),
                "least": min(cfg.latency_rounds, cfg.timing_rounds), "most": cfg.timing_rounds}

    def _held(self, cand, left, when: str) -> tuple[list[Flag], dict] | None:
        """The candidate's tampering evidence read `when` (its flags, its confinement report) where any of it
        refuses the candidate; None where none does."""
        held: list[Flag] = []
        confinement = self._report(cand, left, held, {}, when=when)
        return (held, confinement) if any(f.severity == "reject" for f in held) else None

    def _aborted(self, a: Aborted, p: Prepared) -> dict:
        """Verdict fields of an evaluation cut short, with the candidate's tampering evidence where it can give it."""
        p.kept = p.kept and a.kw.get("status") != "rejected"
        # Keep the tampering evidence of an aborted run: it names the hack behind the failure.
        a.kw.setdefault("flags", p.flags)
        if p.cand is not None and p.cand.alive and not p.reported:
            try:
                a.kw["confinement"] = self._report(p.cand, lambda cap=None: min(cap or 30, 30), a.kw["flags"],
                                                   p.reported)
            except Aborted:
                pass
        return a.kw

    def _finish(self, p: Prepared, in_stage: bool = False) -> None:
        """Close the candidate's worker; keep its build in the cache unless it failed or was rejected. At the end of a
        GPU stage on a shared device the worker is killed there and reaped after it (`_reap`), the device held
        shared for its end (`DeviceLock.teardown`): the next job's untimed work goes on beside its end, and nothing is
        timed before it is gone."""
        with self._refs_lock:
            if p.finished:
                return
            p.finished = True
        if p.cand is not None:
            self._gpu.unpark(p.cand)
        drop_fresh(p.fresh)
        p.fresh = None
        keep = p.kept and not any(f.severity == "reject" for f in p.flags)
        if in_stage and p.cand is not None and self._gpu.sharing:
            p.cand.signal_kill()
            hold = self._gpu.teardown()
            try:
                p.reaped = self._reaper.submit(self._reap, p.cand, p.candidate, p.slot, keep, hold)
                return
            except RuntimeError:  # the evaluator is closing: reaped here
                hold.release()
        if p.cand is not None:
            p.cand.close()
        self._keep_build(p.candidate, p.slot, keep)

    def _reap(self, worker: Worker, candidate: Candidate, slot: Path | None, keep: bool, hold) -> None:
        """Wait for a killed candidate worker to end and remove what it left (its spill file unlocked, its lent
        memory given back: never while anything is timed), let the device go, then keep its build."""
        try:
            worker.close()
        finally:
            hold.release()
        self._keep_build(candidate, slot, keep)

    _incorrect_message = ""  # why this evaluation's comparison failed (calls are serialised by the lock)
    _policy = "strict"  # the precision policy of the evaluation under way
    _beyond_strict = ""  # which output needed the kernelbench policy's looser tolerance, if any
    _loose_exact = ""  # where the exact-result test's bound let zeros through (the reference itself far from exact)

    def _ask(self, worker: Worker, op: dict, timeout: float, what: str, build: bool = False):
        """Send an op to a candidate worker; turn every failure into a verdict (raised as Aborted)."""
        self._send(worker, op, what)
        return self._receive(worker, timeout, what)

    def _send(self, worker: Worker, op: dict, what: str) -> None:
        try:
            worker.send(op)
        except WorkerError as e:
            raise Aborted({"status": "runtime_error", "message": f"{what}: {e}"})

    def _receive(self, worker: Worker, timeout: float, what: str, device=None):
        try:
            h, t = worker.receive(timeout, device)
        except WorkerError as e:
            tail = e.stderr_tail.strip()[-1500:]
            if e.kind == "timeout":
                raise Aborted({"status": "timeout", "message": f"{what}: {e}"})
            if e.kind == "died" and "exited with code 0" in str(e):
                raise Aborted({"status": "rejected", "message": f"{what}: {e}",
                                "flags": [Flag("early_exit", f"{e}: a candidate may not end the process "
                                                             "(a verdict only comes from the evaluator)",
                                               hack="forged_result")]})
            raise Aborted({"status": "runtime_error", "message": f"{what}: {e}" + (f"\n{tail}" if tail else "")})
        if h.get("type") == "error":
            kind = h.get("kind") if h.get("kind") in ("compile_error", "runtime_error") else "runtime_error"
            raise Aborted({"status": kind, "message": f"{what}: {h.get('message', '')}"[:6000]})
        return h, t
