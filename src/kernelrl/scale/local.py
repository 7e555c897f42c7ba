"""LocalScheduler: this machine's devices, each fed by a CPU stage that runs ahead of its GPU stage.

A pool of `cpu_workers` CPU-stage threads prepares jobs (`Evaluator.prepare`: checks, worker start-up, imports
and builds) while fewer than `lookahead` prepared jobs wait for their device; one GPU-stage thread per device
judges whichever prepared job is ready first (`Evaluator.judge`), so a slow build never holds the device up
while another job is ready. Each started worker holds a CUDA context (about 0.5 GB): a device has at most
`lookahead` prepared jobs waiting plus its share of the jobs being prepared and those being judged (a group's
members together).

With `references_ahead`, a lane that takes a job starts the reference of the next task waiting (on another
thread, `Evaluator.warm_reference`), so that its jobs find it started instead of holding their lanes while it
starts. With `first_call_lanes` > 0, a candidate's first call (`Evaluator.first_call`, made beside the GPU stage: mostly
waiting for the device and compiling) runs on that many first-call threads a device instead of the lane that built
it, which goes on to the next job meanwhile; the job counts ahead of its device as before.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from concurrent.futures import Future

from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.evaluator import Prepared
from kernelrl.scale import SchedulerStats, check_group
from kernelrl.task import Candidate, Task
from kernelrl.verdict import Timing, Verdict

RATE_WINDOW_S = 300.0  # verdicts per minute are counted over this many recent seconds


@dataclasses.dataclass(eq=False)
class _Job:
    task: Task
    candidate: Candidate
    policy: str | None
    future: Future
    prepared: Prepared | None = None      # after the CPU stage (an evaluation)
    prepared_by: Evaluator | None = None
    compiled: bool | None = None          # set for a reference timing job: time_reference(task, compiled)


class _Device:
    """One device's evaluators (one per precision policy asked for), its prepared jobs and its busy time."""

    def __init__(self, name: str, key: str, config: EvalConfig):
        self.name, self.key, self.config = name, key, config
        self.evaluators: dict[str | None, Evaluator] = {None: Evaluator(config)}
        self.ready: collections.deque[_Job] = collections.deque()  # prepared, waiting for the GPU stage
        self.ahead = 0          # jobs being prepared, prepared or being judged
        self.busy_s = 0.0       # wall seconds spent in the GPU stage
        self.busy_since: float | None = None
        self._lock = threading.Lock()

    def evaluator(self, policy: str | None) -> Evaluator:
        with self._lock:
            if policy not in self.evaluators:
                self.evaluators[policy] = Evaluator(self.config.with_(policy=policy))
            return self.evaluators[policy]


LANES_PER_DEVICE = 12  # CPU lanes a device gets at most by default (three per four cores below that)


def usable_cores() -> int:
    """The cores this process may run on: its affinity (taskset, a container's cpuset), not the host's count."""
    try:
        return len(os.sched_getaffinity(0)) or 2
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 2


def cpu_lanes(lookahead: int, n_dev: int, cores: int | None = None) -> int:
    """The CPU lanes a scheduler of `n_dev` devices starts by default given `cores` (those this process may use)."""
    cores = cores if cores is not None else usable_cores()
    return max(lookahead * n_dev, min(cores * 3 // 4, LANES_PER_DEVICE * n_dev))


def ahead_per_device(lookahead: int, lanes: int, n_dev: int, judged: int = 1) -> int:
    """Jobs a device may have ahead: `lookahead` waiting, its share of `lanes` being prepared, and `judged` being
    judged (a group's members are judged together: while they are, the lanes go on preparing the next ones)."""
    return lookahead + -(-lanes // n_dev) + judged


class LocalScheduler:
    """Judges jobs on this machine's devices; ("cpu", "cpu") gives two CPU "devices" (each its own evaluator)."""

    def __init__(self, config: EvalConfig | None = None, devices: tuple[str, ...] | list[str] = ("cpu",),
                 lookahead: int = 3, cpu_workers: int | None = None, group: int = 1, first_call_lanes: int = 0,
                 references_ahead: bool = False):
        config = config or EvalConfig()
        if not devices:
            raise ValueError("no devices to run on")
        if lookahead < 1:
            raise ValueError(f"lookahead must be at least 1, not {lookahead}")
        if first_call_lanes < 0:
            raise ValueError(f"first_call_lanes must be 0 or more, not {first_call_lanes}")
        check_group(group)
        # group > 1: a device judges up to that many prepared jobs of one task together (`Evaluator.judge_group`),
        # as many as are waiting when it starts them; that many may wait
        self.group = group
        lookahead = max(lookahead, group)
        keys = [d if list(devices).count(d) == 1 else f"{d}#{i}" for i, d in enumerate(devices)]
        self._devices: list[_Device] = []
        try:
            for d, key in zip(devices, keys):
                self._devices.append(_Device(d, key, config.with_(device=d)))
        except BaseException:
            for dev in self._devices:
                dev.evaluators[None].close()
            raise
        self.lookahead = lookahead
        self._cond = threading.Condition()
        self._pending: collections.deque[_Job] = collections.deque()  # submitted, on no device yet
        self._in_prep: set[_Job] = set()  # on a lane, or built and waiting for or making its first call
        self._calls: collections.deque[tuple[_Device, _Job]] = collections.deque()  # built, for a first-call lane
        self._apart = first_call_lanes > 0
        self._references_ahead = references_ahead
        self._warmed: set[str] = set()  # tasks whose reference was started ahead (`references_ahead`)
        self._done = 0
        self._finished_at: collections.deque[float] = collections.deque()
        self._closed = False
        self._t0 = time.monotonic()
        n_dev = len(self._devices)
        n_cpu = cpu_workers or cpu_lanes(lookahead, n_dev)
        self._max_ahead = ahead_per_device(lookahead, n_cpu, n_dev, group)
        self._threads = [threading.Thread(target=self._cpu_stage, name=f"prepare-{i}", daemon=True)
                         for i in range(n_cpu)]
        self._threads += [threading.Thread(target=self._first_call_stage, name=f"first-call-{i}", daemon=True)
                          for i in range(first_call_lanes * n_dev)]
        self._threads += [threading.Thread(target=self._gpu_stage, args=(dev,), name=f"judge-{dev.key}",
                                           daemon=True) for dev in self._devices]
        for t in self._threads:
            t.start()

    # -- the Scheduler protocol ----------------------------------------------------------------------------
    def submit(self, task: Task, candidate: Candidate, policy: str | None = None) -> "Future[Verdict]":
        """Queue one evaluation; `policy` overrides the evaluators' precision policy for this job."""
        if policy is not None:
            self._devices[0].config.with_(policy=policy)  # an unknown policy is refused here, in one line
        return self._queue(_Job(task, candidate, policy, Future()))

    def time_reference(self, task: Task, compiled: bool = False) -> "Future[Timing]":
        """Queue a timing of the task's reference alone (`Evaluator.time_reference`) on one of the devices."""
        return self._queue(_Job(task, None, None, Future(), compiled=compiled))

    def _queue(self, job: _Job) -> Future:
        with self._cond:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._pending.append(job)
            self._cond.notify_all()
        return job.future

    @property
    def capacity(self) -> int:
        """Jobs that keep every device's pipeline full: callers that wait on each job keep this many going. That
        is every job a device may have ahead (being prepared on the CPU lanes, prepared and waiting, being
        judged): with fewer, the CPU stage, which takes longer than the GPU stage for most jobs, starves it."""
        return self._max_ahead * len(self._devices)

    def stats(self) -> SchedulerStats:
        now = time.monotonic()
        with self._cond:
            while self._finished_at and self._finished_at[0] < now - RATE_WINDOW_S:
                self._finished_at.popleft()
            elapsed = now - self._t0
            window = min(elapsed, RATE_WINDOW_S)
            busy = {d.key: (d.busy_s + (now - d.busy_since if d.busy_since else 0.0)) / elapsed if elapsed else 0.0
                    for d in self._devices}
            return SchedulerStats(queued=len(self._pending), running=sum(d.ahead for d in self._devices),
                                  done=self._done, elapsed_s=elapsed,
                                  verdicts_per_minute=60.0 * len(self._finished_at) / window if window else 0.0,
                                  device_busy=busy)

    def close(self) -> None:
        """Cancel every job not yet on a device's GPU stage, let those on it finish, stop every evaluator."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            dropped = list(self._pending) + list(self._in_prep) + [j for d in self._devices for j in d.ready]
            self._pending.clear()
            for d in self._devices:
                d.ready.clear()
            self._cond.notify_all()
        for job in dropped:
            _cancel(job.future)
            if job.prepared is not None and job not in self._in_prep:
                self._release(job)
        for t in self._threads:
            if t.name.startswith("judge-") and t is not threading.current_thread():
                t.join()
        for d in self._devices:
            for ev in d.evaluators.values():
                ev.close()  # candidates still being prepared are stopped; their jobs were cancelled above

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the stages ----------------------------------------------------------------------------------------
    def _cpu_stage(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (self._pending and self._free_device()):
                    self._cond.wait()
                if self._closed:
                    return
                dev = self._free_device()
                job = self._pending.popleft()
                dev.ahead += 1
                self._in_prep.add(job)
                ahead = self._next_reference(job)
            if ahead is not None:
                threading.Thread(target=dev.evaluator(ahead.policy).warm_reference, args=(ahead.task,),
                                 name="reference-ahead", daemon=True).start()
            if job.future.cancelled():
                _cancel(job.future)  # cancelled by its caller: wake whoever waits on it
                self._drop(dev, job)
                continue
            try:
                ev = job.prepared_by = dev.evaluator(job.policy)
                if job.compiled is None:
                    job.prepared = ev.prepare(job.task, job.candidate, first_call=not self._apart)
                    if self._apart:
                        if ev.calls_first(job.prepared):
                            with self._cond:  # its first call on a first-call lane; this lane takes the next job
                                self._calls.append((dev, job))
                                self._cond.notify_all()
                            continue
                        ev.first_call(job.prepared)  # no call to make: readied at once
                else:  # a reference timing: its worker starts here, the timing waits for the device
                    job.prepared = ev.hold_reference(job.task)
            except BaseException as e:  # the reference does not run (EvaluationError), the evaluator closed ...
                self._drop(dev, job)
                self._resolve(job, error=e)
                continue
            self._to_ready(dev, job)

    def _next_reference(self, job: _Job) -> _Job | None:
        """With `references_ahead`: the first job waiting whose task is not `job`'s and has had no reference started
        ahead, marked as started (called holding the lock)."""
        if not self._references_ahead:
            return None
        for other in self._pending:
            if other.task.digest != job.task.digest:
                if other.task.digest in self._warmed:
                    return None
                self._warmed.add(other.task.digest)
                return other
        return None

    def _first_call_stage(self) -> None:
        """A first-call lane (`first_call_lanes`): built jobs' first calls, then the jobs readied for their device."""
        while True:
            with self._cond:
                while not self._closed and not self._calls:
                    self._cond.wait()
                if self._closed:
                    return  # jobs left waiting are in `_in_prep`: cancelled by `close`, closed with their evaluator
                dev, job = self._calls.popleft()
            if job.future.cancelled():  # by its caller while it waited: released, not called
                self._to_ready(dev, job)
                continue
            try:
                job.prepared_by.first_call(job.prepared)
            except BaseException as e:  # the evaluator closed ... (the job is released by `first_call`)
                self._drop(dev, job)
                self._resolve(job, error=e)
                continue
            self._to_ready(dev, job)

    def _to_ready(self, dev: _Device, job: _Job) -> None:
        """A job's CPU stage is done: it waits for its device's GPU stage (released where it was cancelled)."""
        with self._cond:
            self._in_prep.discard(job)
            cancelled = self._closed or job.future.cancelled()
            if cancelled:
                dev.ahead -= 1
            else:
                dev.ready.append(job)
            self._cond.notify_all()
        if cancelled:
            self._release(job)
            _cancel(job.future)

    def _gpu_stage(self, dev: _Device) -> None:
        while True:
            with self._cond:
                while not self._closed and not dev.ready:
                    self._cond.wait()
                if self._closed:
                    return
                jobs = [dev.ready.popleft()]
                jobs += self._same_task(dev, jobs[0])
                dev.busy_since = time.monotonic()
            outcomes = self._judge_jobs(jobs)
            with self._cond:
                dev.busy_s += time.monotonic() - dev.busy_since
                dev.busy_since = None
                dev.ahead -= len(jobs)
                self._cond.notify_all()
            for job, verdict, error in outcomes:
                self._resolve(job, verdict, error, running=True)

    def _same_task(self, dev: _Device, job: _Job) -> list[_Job]:
        """Jobs waiting on `dev` to judge with `job` (taken off its queue): up to `group` in all, of its task and
        prepared by its evaluator (so under its policy, with its reference worker). Called holding the lock."""
        if self.group < 2 or job.compiled is not None:
            return []
        same = [j for j in dev.ready if j.compiled is None and j.prepared_by is job.prepared_by
                and j.task.digest == job.task.digest][:self.group - 1]
        for j in same:
            dev.ready.remove(j)
        return same

    def _judge_jobs(self, jobs: list[_Job]) -> list[tuple]:
        """The GPU stage of `jobs` (several only where they are of one task: `_same_task`): (job, verdict, error) for
        each one started (a job cancelled meanwhile is let go)."""
        started = []
        for job in jobs:
            if _start(job.future):
                started.append(job)
            else:
                self._release(job)
        if not started:
            return []
        job = started[0]
        try:
            if job.compiled is not None:
                try:
                    return [(job, job.prepared_by.time_reference(job.task, job.compiled), None)]
                finally:
                    self._release(job)
            if len(started) == 1:
                return [(job, job.prepared_by.judge(job.prepared), None)]
            got = job.prepared_by.judge_group([j.prepared for j in started])
            return [(j, None, v) if isinstance(v, BaseException) else (j, v, None) for j, v in zip(started, got)]
        except BaseException as e:  # the evaluation could not run (a reference that fails while timed ...)
            return [(j, None, e) for j in started]

    @staticmethod
    def _release(job: _Job) -> None:
        if job.compiled is None:
            job.prepared_by.release(job.prepared)
        else:
            job.prepared_by.let_go(job.prepared)

    def _free_device(self) -> _Device | None:
        """The device with room for one more job ahead of it and the least work ahead; None when none has room."""
        free = [d for d in self._devices if len(d.ready) < self.lookahead and d.ahead < self._max_ahead]
        return min(free, key=lambda d: (len(d.ready), d.ahead)) if free else None

    def _drop(self, dev: _Device, job: _Job) -> None:
        with self._cond:
            dev.ahead -= 1
            self._in_prep.discard(job)
            self._cond.notify_all()

    def _resolve(self, job: _Job, verdict: Verdict | None = None, error: BaseException | None = None,
                 running: bool = False) -> None:
        """Set the job's outcome once (a job cancelled meanwhile stays cancelled)."""
        if not running and not _start(job.future):
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(verdict)
        if job.compiled is None:
            with self._cond:
                self._done += 1
                self._finished_at.append(time.monotonic())


_NOTIFYING = threading.Lock()


def _start(future: Future) -> bool:
    """Mark a job's Future running; False (its waiters woken, once) when it was cancelled. A Future whose waiters
    were woken already is left alone: `set_running_or_notify_cancel` would log it as an error."""
    with _NOTIFYING:
        if getattr(future, "_kernelrl_notified", False):
            return False
        try:
            running = future.set_running_or_notify_cancel()
        except RuntimeError:  # already running or done
            return False
        future._kernelrl_notified = not running
        return running


def _cancel(future: Future) -> None:
    """Cancel a job's Future unless it runs or is done, and wake its waiters (`concurrent.futures.wait` counts a
    cancelled Future only once notified)."""
    if future.cancel():
        _start(future)
