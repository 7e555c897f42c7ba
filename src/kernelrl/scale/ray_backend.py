"""RayScheduler: one evaluator actor per GPU of a Ray cluster; jobs whose actor or node dies run again elsewhere.

Ray is an optional extra (`pip install "kernelrl[ray]"`) and is imported only when a RayScheduler is made, so
kernelrl without `--ray` neither needs nor starts it. Every node needs kernelrl installed, as the driver has it.

Each actor runs a `LocalScheduler` on its one device (the GPU Ray gave it, or the CPU on clusters without GPUs):
the evaluator's sandboxed workers, and so the builds they run ahead of the device, stay on that node, where the
build cache is. One dispatcher thread in the caller's process hands jobs to actors with room and collects their
verdicts. When an actor, its process or its node dies, the jobs it held go back to the front of the queue
(`stats().retried` counts them) and a fresh actor replaces it; only the tracked call of a live actor resolves a
job's Future, so a verdict is never counted twice.
"""
from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import asdict, dataclass, field

from kernelrl.evaluate.config import EvalConfig
from kernelrl.scale import SchedulerStats
from kernelrl.task import Candidate, Task
from kernelrl.verdict import Timing, Verdict

log = logging.getLogger(__name__)

INSTALL_HINT = 'Ray is not installed: pip install "kernelrl[ray]"'
_RATE_WINDOW_S = 300.0  # verdicts per minute are counted over this window
_MAX_FAILED_STARTS = 3   # actors in one place that die before they are up, before that place is given up


class RayUnavailable(RuntimeError):
    """Ray is missing or its cluster cannot be reached: the message says what to do."""


def import_ray():
    """The `ray` module, or RayUnavailable naming the extra to install."""
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(INSTALL_HINT) from e
    return ray


def device_healthy(device: str, timeout_s: float = 120.0) -> bool:
    """Whether a fresh process can still run work on `device` (a candidate may have wedged the GPU)."""
    if not device.startswith("cuda"):
        return True
    probe = "import torch; x = torch.ones(8, device='cuda'); torch.cuda.synchronize(); assert float(x.sum()) == 8"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=timeout_s).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _most_per_actor(lookahead: int) -> int:
    """The most jobs an actor's LocalScheduler keeps going, whatever its node's cores (its threads' bound)."""
    from kernelrl.scale.local import ahead_per_device, cpu_lanes  # imported where used, as `EvaluatorActor` does

    return ahead_per_device(lookahead, cpu_lanes(lookahead, 1, cores=1 << 20), 1)


class EvaluatorActor:
    """One device's evaluation pipeline inside a Ray actor: a LocalScheduler on the device Ray gave it, so the
    next jobs' CPU stage (checks, worker start-up, builds) runs on this node while the device judges."""

    def __init__(self, config: dict, lookahead: int):
        from kernelrl.scale.local import LocalScheduler  # imported in the actor's process, not at module load

        self._device = config["device"]
        self._local = LocalScheduler(EvalConfig.from_dict(config), (self._device,), lookahead=lookahead)

    def where(self) -> dict:
        """The node and device this actor runs on (answered once it is up)."""
        import ray

        from kernelrl.bench.baselines import device_name

        gpus = ray.get_gpu_ids()
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid(), "gpu": str(gpus[0]) if gpus else None, "model": device_name(self._device),
                "capacity": self._local.capacity}

    def evaluate(self, task: dict, candidate: dict, policy: str | None) -> tuple[dict, bool, float]:
        """The Verdict (as a dict), whether the device is still healthy after it, and the device's busy fraction."""
        verdict = self._local.submit(Task.from_dict(task), Candidate.from_dict(candidate), policy).result()
        healthy = verdict.status not in ("runtime_error", "timeout") or device_healthy(self._device)
        return verdict.to_dict(), healthy, self._busy()

    def time_reference(self, task: dict, compiled: bool) -> tuple[dict, bool, float]:
        """The reference's Timing alone (as a dict), as `evaluate` answers: the device stays healthy."""
        timing = self._local.time_reference(Task.from_dict(task), compiled).result()
        return asdict(timing), True, self._busy()

    def _busy(self) -> float:
        return max(self._local.stats().device_busy.values(), default=0.0)


@dataclass
class _Job:
    task: Task
    candidate: Candidate | None  # None: time the reference alone
    policy: str | None
    future: Future
    compiled: bool = False       # with no candidate: the torch.compile'd reference
    attempts: int = 0            # times the actor running it died


@dataclass
class _Slot:
    """One evaluator actor as the dispatcher sees it."""

    actor: object
    ready_ref: object
    index: int
    ready: bool = False
    name: str = ""                                # ip/device, once up
    model: str = ""                               # the device's hardware name, once up
    inflight: dict = field(default_factory=dict)  # ObjectRef -> _Job
    capacity: int = 0                             # jobs it holds at once: its pipeline's, once up
    busy: float = 0.0                             # its device's busy fraction, as last reported
    failed_starts: int = 0                        # actors in this place that died before they were up
    gone: bool = False                            # given up: its actors would not start


class RayScheduler:
    """Judges jobs on a Ray cluster: one evaluator actor per GPU, or `cpu_evaluators` CPU ones without GPUs."""

    def __init__(self, config: EvalConfig, address: str = "auto", cpu_evaluators: int | None = None,
                 max_attempts: int = 3, lookahead: int = 2, init_kwargs: dict | None = None):
        if lookahead < 1 or max_attempts < 1:
            raise ValueError(f"lookahead and max_attempts must be at least 1, not {lookahead} and {max_attempts}")
        ray = self._ray = import_ray()
        self.config = config
        self._started_ray = False
        if not ray.is_initialized():
            try:  # "auto": the cluster this machine belongs to, else a new local one
                ray.init(address=None if address == "auto" else address, log_to_driver=False,
                         **(init_kwargs or {}))
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise RayUnavailable(f"cannot reach the Ray cluster at {address!r}: {str(e).splitlines()[0]} "
                                     "(start one with `ray start --head`, or pass its address)") from e
            self._started_ray = True
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.device_kind = "cuda" if gpus else "cpu"  # what its evaluators run on, for callers that ask
        if gpus:
            self._options = {"num_gpus": 1, "num_cpus": 1}
            self._config = config.with_(device="cuda").to_dict()
            count = gpus
        else:
            self._options = {"num_cpus": 1}
            self._config = config.with_(device="cpu").to_dict()
            count = cpu_evaluators or max(1, int(ray.cluster_resources().get("CPU", 1)) // 2)
        self._actor_cls = ray.remote(EvaluatorActor)
        # Until it is up, an actor is counted as holding the job its device judges plus `lookahead` being prepared;
        # once up, it holds what keeps its pipeline full (`LocalScheduler.capacity`: the jobs its CPU lanes prepare
        # too), at most `most_per_actor`: with fewer, real candidates' builds starve its GPU.
        self.max_attempts, self.lookahead, self.per_actor = max_attempts, lookahead, lookahead + 1
        self.most_per_actor = _most_per_actor(lookahead)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._pending: collections.deque[_Job] = collections.deque()
        self._done, self._retried = 0, 0
        self._finished_at: collections.deque[float] = collections.deque()
        self._t0 = time.monotonic()
        self._closed = False
        self._slots = [self._start_actor(i) for i in range(count)]
        self._thread = threading.Thread(target=self._dispatch, name="kernelrl-ray-dispatch", daemon=True)
        self._thread.start()

    # -- the Scheduler interface --------------------------------------------------------------------------
    def submit(self, task: Task, candidate: Candidate, policy: str | None = None) -> "Future[Verdict]":
        """Queue one evaluation; `policy` overrides the evaluator's precision policy for this job."""
        return self._queue(_Job(task, candidate, policy, Future()))

    def _queue(self, job: _Job) -> Future:
        with self._lock:
            if self._closed:
                raise RuntimeError("the scheduler is closed")
            self._pending.append(job)
        self._wake.set()
        return job.future

    def time_reference(self, task: Task, compiled: bool = False) -> "Future[Timing]":
        """Queue a timing of the task's reference alone (`Evaluator.time_reference`) on one of the actors."""
        return self._queue(_Job(task, None, None, Future(), compiled=compiled))

    @property
    def capacity(self) -> int:
        """Jobs the cluster's actors hold at once, each its pipeline's (`LocalScheduler.capacity`): callers that
        wait on each job keep this many going. Waits for the actors to be up (`device_names`): what an actor holds
        depends on its node's cores."""
        self.device_names()
        return sum(s.capacity for s in self._slots)

    def device_names(self, timeout_s: float = 600.0) -> tuple[str, ...]:
        """The hardware names of the cluster's evaluator devices, once every actor is up (or `timeout_s` passed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(s.ready or s.gone for s in self._slots):
            time.sleep(0.2)
        return tuple(sorted({s.model for s in self._slots if s.model}))

    def stats(self) -> SchedulerStats:
        now = time.monotonic()
        with self._lock:
            while self._finished_at and self._finished_at[0] < now - _RATE_WINDOW_S:
                self._finished_at.popleft()
            elapsed = now - self._t0
            window = min(elapsed, _RATE_WINDOW_S)
            return SchedulerStats(
                queued=len(self._pending), running=sum(len(s.inflight) for s in self._slots), done=self._done,
                retried=self._retried, elapsed_s=elapsed,
                verdicts_per_minute=60.0 * len(self._finished_at) / window if window > 0 else 0.0,
                device_busy={s.name: s.busy for s in self._slots if s.name})

    def close(self) -> None:
        """Finish nothing more: queued jobs get cancelled Futures, jobs on actors a CancelledError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        self._thread.join()
        with self._lock:
            for job in self._pending:
                job.future.cancel()
            self._pending.clear()
            for slot in self._slots:
                for job in slot.inflight.values():
                    if not job.future.done():
                        job.future.set_exception(CancelledError("the scheduler was closed"))
                slot.inflight.clear()
                self._ray.kill(slot.actor)
        if self._started_ray:
            self._ray.shutdown()

    def __enter__(self) -> "RayScheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- actors -------------------------------------------------------------------------------------------
    def _start_actor(self, index: int, failed_starts: int = 0) -> _Slot:
        actor = self._actor_cls.options(max_restarts=0, max_task_retries=0, max_concurrency=self.most_per_actor + 1,
                                        **self._options).remote(self._config, self.lookahead)
        return _Slot(actor=actor, ready_ref=actor.where.remote(), index=index, failed_starts=failed_starts,
                     capacity=self.per_actor)

    def _replace(self, slot: _Slot, why: str, failed_start: bool = False) -> None:
        """Put the slot's jobs back at the front of the queue and start a fresh actor in its place."""
        log.warning("evaluator %s replaced: %s", slot.name or f"#{slot.index}", why)
        with self._lock:
            for job in reversed(list(slot.inflight.values())):
                job.attempts += 1
                self._retried += 1
                self._pending.appendleft(job)
            slot.inflight.clear()
        try:
            self._ray.kill(slot.actor)  # it may still be alive (unhealthy, unreachable): it must not answer later
        except Exception:  # noqa: BLE001 - already gone
            pass
        failed = slot.failed_starts + 1 if failed_start else 0
        if failed >= _MAX_FAILED_STARTS:  # e.g. the device is missing: retrying would spin forever
            log.error("evaluator #%d given up: %s", slot.index, why)
            with self._lock:
                slot.gone, slot.ready = True, False
            return
        fresh = self._start_actor(slot.index, failed)
        with self._lock:
            self._slots[slot.index] = fresh

    # -- the dispatcher thread ----------------------------------------------------------------------------
    def _dispatch(self) -> None:
        try:
            self._dispatch_loop()
        except Exception as e:  # noqa: BLE001 - e.g. Ray shut down under us: no Future may wait forever
            log.exception("the Ray dispatcher stopped")
            with self._lock:
                self._closed = True
                jobs = list(self._pending) + [j for s in self._slots for j in s.inflight.values()]
                self._pending.clear()
                for slot in self._slots:
                    slot.inflight.clear()
            for job in jobs:
                self._resolve(job, error=RuntimeError(f"the Ray scheduler stopped: {_first_line(e)}"))

    def _dispatch_loop(self) -> None:
        ray = self._ray
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._pending and all(s.gone for s in self._slots):
                    error = RuntimeError("no evaluator actor could start on the Ray cluster")
                    while self._pending:
                        self._resolve(self._pending.popleft(), error=error)
                self._assign()
                owner = {}
                for slot in self._slots:
                    if not slot.ready and not slot.gone:
                        owner[slot.ready_ref] = slot
                    owner.update((ref, slot) for ref in slot.inflight)
            if not owner:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            done, _ = ray.wait(list(owner), num_returns=1, timeout=0.05)
            for ref in done:
                self._collect(ref, owner[ref])

    def _assign(self) -> None:
        """Give queued jobs to ready actors with room (called with the lock held)."""
        for slot in self._slots:
            while slot.ready and len(slot.inflight) < slot.capacity and self._pending:
                job = self._pending.popleft()
                if job.attempts == 0 and not job.future.set_running_or_notify_cancel():
                    continue  # cancelled by the caller while queued
                if job.attempts >= self.max_attempts:
                    why = f"the evaluator died {job.attempts} times under this job (its process or node was lost)"
                    if job.candidate is None:
                        self._resolve(job, error=RuntimeError(f"{job.task.name}: {why}; not retried"))
                    else:
                        self._resolve(job, Verdict(status="runtime_error", task=job.task.name,
                                                   candidate=job.candidate.digest, device=slot.name,
                                                   message=f"{why}; not retried"))
                    continue
                if job.candidate is None:
                    ref = slot.actor.time_reference.remote(job.task.to_dict(), job.compiled)
                else:
                    ref = slot.actor.evaluate.remote(job.task.to_dict(), job.candidate.to_dict(), job.policy)
                slot.inflight[ref] = job

    def _collect(self, ref, slot: _Slot) -> None:
        ray = self._ray
        if slot.index >= len(self._slots) or self._slots[slot.index] is not slot:
            return  # an answer from an actor already replaced: its jobs run elsewhere
        if ref == slot.ready_ref and not slot.ready:
            try:
                where = ray.get(ref)
            except ray.exceptions.RayError as e:
                self._replace(slot, f"it did not start: {_first_line(e)}", failed_start=True)
                return
            kind = f"cuda:{where['gpu']}" if where["gpu"] is not None else f"cpu:{slot.index}"
            with self._lock:
                slot.ready, slot.name, slot.model = True, f"{where['ip']}/{kind}", where["model"]
                slot.capacity = min(where["capacity"], self.most_per_actor)
            return
        try:
            answer, healthy, busy = ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the evaluation itself failed (e.g. a broken reference)
            with self._lock:
                job = slot.inflight.pop(ref)
            cause = e.cause if isinstance(e.cause, BaseException) else RuntimeError(_first_line(e))
            self._resolve(job, error=cause)
            return
        except ray.exceptions.RayError as e:  # the actor, its worker process or its node died
            self._replace(slot, _first_line(e))
            return
        with self._lock:
            job = slot.inflight.pop(ref)
            slot.busy = busy
        self._resolve(job, Verdict.from_dict(answer) if job.candidate else Timing.from_dict(answer))
        if not healthy:
            self._replace(slot, "its device failed a health check after a candidate's runtime error")

    def _resolve(self, job: _Job, verdict: Verdict | Timing | None = None,
                 error: BaseException | None = None) -> None:
        """Give a job its one outcome."""
        with self._lock:
            self._done += 1
            self._finished_at.append(time.monotonic())
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(verdict)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
