"""Running a suite on a scheduler (LocalScheduler, or RayScheduler with `ray`): tasks submitted ahead, each
device's GPU stage fed by the CPU stage."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from kernelrl.bench.baselines import BaselineCache, environment_key
from kernelrl.bench.result import BASELINES, TaskResult, from_verdict
from kernelrl.bench.suite import Suite, SuiteTask
from kernelrl.evaluate import EvalConfig, EvaluationError, Evaluator, check_device
from kernelrl.scale import SchedulerStats, check_group
from kernelrl.task import Candidate, Task, TaskError
from kernelrl.verdict import Timing, Verdict


@dataclass(frozen=True)
class BenchConfig:
    """How to run a suite: devices, baseline, evaluator settings and which reference timings to take."""

    devices: tuple[str, ...] = ("cpu",)
    baseline: str = "eager"              # "eager" or "compile": what speedup and fast_p are measured against
    eval: EvalConfig = field(default_factory=EvalConfig)
    time_references: bool = True         # time references that have no candidate too (for the report)
    compiled_references: bool = False    # time torch.compile'd references (always when baseline is compile)
    use_cache: bool = True               # reuse cached reference timings
    lookahead: int = 3                   # jobs prepared (workers started, builds done) ahead of each device
    ray: str | None = None               # "auto" or a Ray cluster's address: its GPUs instead of `devices`
    cpu_lanes: int | None = None         # jobs prepared at once on this machine (LocalScheduler's cpu_workers)
    group: int = 1                       # candidates of one task judged together (LocalScheduler's group)
    first_call_lanes: int = 0            # threads a device for first calls, off the CPU lanes (LocalScheduler's)
    references_ahead: bool = False       # the next task's reference started ahead (LocalScheduler's)

    def __post_init__(self):
        if self.baseline not in BASELINES:
            raise ValueError(f"unknown baseline {self.baseline!r}; use one of {', '.join(BASELINES)}")
        if not self.devices:
            raise ValueError("no devices to run on")
        if self.cpu_lanes is not None and self.ray:
            raise ValueError("cpu_lanes sets this machine's lanes; on Ray each GPU's actor sets its own")
        if (self.first_call_lanes or self.references_ahead) and self.ray:
            raise ValueError("first_call_lanes and references_ahead set this machine's lanes; on Ray each GPU's actor "
                             "sets its own")
        check_group(self.group, self.ray)


def run_suite(suite: Suite, config: BenchConfig, cache: BaselineCache | None = None,
              on_result: Callable[[TaskResult], None] | None = None,
              deadline: float | None = None,
              on_stats: Callable[[SchedulerStats], None] | None = None) -> list[TaskResult]:
    """Evaluate every task's candidate on a LocalScheduler over `config.devices` (with `config.ray`, on a Ray
    cluster's GPUs, reference timings uncached); results in suite order.

    Tasks are handed out in suite order to more threads than devices, so the next jobs' workers and builds are
    ready before a device is free; `on_result` (then `on_stats`) is called as each result comes. With a
    `deadline` (a time.monotonic() value), tasks not started by then are left out of the results. Raises
    EvaluationError before any work starts when a device is unavailable.
    """
    from kernelrl.scale import make_scheduler

    if config.ray:
        cache = None  # the cluster's GPUs time the references, not this machine's devices the cache is keyed by
    else:
        for d in config.devices:
            check_device(d)
    results: dict[int, TaskResult] = {}
    lock = threading.Lock()
    todo = iter(enumerate(suite.tasks))
    stopped = threading.Event()  # set once the caller stops the run
    lanes = {"cpu_workers": config.cpu_lanes} if config.cpu_lanes else {}
    if config.first_call_lanes:
        lanes["first_call_lanes"] = config.first_call_lanes
    if config.references_ahead:
        lanes["references_ahead"] = True
    with make_scheduler(config.eval, config.devices, ray=config.ray, group=config.group, lookahead=config.lookahead,
                        **lanes) as scheduler:
        ev = _Scheduled(scheduler, config)
        env = environment_key(config.devices[0], config.eval) if not config.ray else ""  # no cache with Ray

        def work():
            while deadline is None or time.monotonic() < deadline:
                with lock:
                    i, st = next(todo, (None, None))
                if st is None:
                    return
                r = run_task(ev, st, config, cache, env)
                with lock:
                    if stopped.is_set():  # the run was interrupted: jobs cut short by the scheduler's closing are no verdicts
                        return
                    results[i] = r
                    if on_result is not None:
                        on_result(r)
                    if on_stats is not None:
                        on_stats(scheduler.stats())

        threads = [threading.Thread(target=work, name=f"bench-{i}", daemon=True)
                   for i in range(scheduler.capacity)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except BaseException:  # KeyboardInterrupt (SIGTERM in `kernelrl bench`): record nothing more
            with lock:  # a result being recorded finishes first
                stopped.set()
            raise
    return [results[i] for i in sorted(results)]


class _Scheduled:
    """What `run_task` asks of an Evaluator, answered by a scheduler's devices (each call waits for its job)."""

    def __init__(self, scheduler, config: BenchConfig):
        self.scheduler, self.config = scheduler, config.eval
        # Reference timings are cached under the first device's hardware: a run's devices are of one kind.
        self.device = ",".join(dict.fromkeys(config.devices))

    def evaluate(self, task: Task, candidate: Candidate) -> Verdict:
        return self.scheduler.submit(task, candidate).result()

    def time_reference(self, task: Task, compiled: bool = False) -> Timing:
        return self.scheduler.time_reference(task, compiled).result()


def run_task(ev: Evaluator, st: SuiteTask, config: BenchConfig, cache: BaselineCache | None,
             environment: str) -> TaskResult:
    """Reference timings (cached) and the verdict of one task's candidate on `ev`'s device.

    A verdict times the reference beside the candidate by the same method, so a task with a candidate gets a
    reference timing of its own only to derive a compile speedup (both references timed alike), or when the
    verdict timed nothing and the report asks for reference times."""
    base = dict(task=st.name, level=st.level, candidate=st.candidate_path, device=str(ev.device),
                description=st.task.meta.description, policy=ev.config.policy_for(st.task.meta), sample=st.sample)
    notes = []
    cand = invalid = None
    if st.candidate_path is not None:
        try:
            cand = Candidate.from_file(st.candidate_path)
        except TaskError as e:
            invalid = str(e)
    want_compiled = config.compiled_references or (config.baseline == "compile"
                                                   and (config.time_references or cand is not None))
    ref_t = comp_t = None
    try:
        if want_compiled or (cand is None and config.time_references):
            ref_t = reference_time(ev, st, False, cache, environment, config.use_cache)
    except Exception as e:  # noqa: BLE001 - a reference that cannot be timed is reported, not fatal
        return TaskResult(status="reference_error", message=f"timing the reference failed: {e}", **base)
    if want_compiled:
        try:
            comp_t = reference_time(ev, st, True, cache, environment, config.use_cache)
        except Exception as e:  # noqa: BLE001 - eager results stand; the compile baseline is then unknown
            notes.append(f"torch.compile of the reference failed: {str(e)[:300]}")
    if ref_t is not None and comp_t is not None and comp_t.method != ref_t.method:
        notes.append(f"the torch.compile'd reference was timed by {comp_t.method}, the reference by "
                     f"{ref_t.method}: no compile speedup")
        comp_t = None
    base.update(reference_us=ref_t.median_us if ref_t else None,
                reference_compiled_us=comp_t.median_us if comp_t else None,
                method=ref_t.method if ref_t else None)
    if invalid is not None:
        return TaskResult(status="invalid", message=invalid, **base)
    if cand is None:
        missing = "no candidate file" + (f" ({st.note})" if st.note else "")
        return TaskResult(status="missing", message="; ".join([missing] + notes), **base)
    try:
        verdict = ev.evaluate(st.task, cand)
    except EvaluationError as e:
        return TaskResult(status="reference_error", message=str(e), **base)
    except Exception as e:  # noqa: BLE001 - a worker lost mid-run (the reference's, say): this task's reason
        return TaskResult(status="reference_error", message=f"the evaluation failed: {type(e).__name__}: {e}"[:2000],
                          **base)
    if ref_t is None and verdict.timings[0] is None and config.time_references:
        try:  # the candidate failed before it was timed: the report still gives the reference's time
            ref_t = reference_time(ev, st, False, cache, environment, config.use_cache)
        except Exception as e:  # noqa: BLE001 - the verdict stands
            notes.append(f"timing the reference failed: {str(e)[:300]}")
    result = from_verdict(st.name, st.level, verdict, config.baseline, candidate=st.candidate_path,
                          reference=ref_t, reference_compiled=comp_t, description=st.task.meta.description)
    return replace(result, message="; ".join(([result.message] if result.message else []) + notes),
                   sample=st.sample)


def reference_time(ev: Evaluator, st: SuiteTask, compiled: bool, cache: BaselineCache | None,
                   environment: str, use_cache: bool = True) -> Timing:
    """The reference's Timing (by the method verdicts compare on), from the cache when it has a matching entry."""
    if cache is not None and use_cache:
        hit = cache.get(st.task.digest, environment, compiled)
        if hit is not None:
            return hit
    timing = ev.time_reference(st.task, compiled=compiled)
    if cache is not None:
        cache.put(st.task.digest, environment, compiled, timing, task=st.name)
    return timing
