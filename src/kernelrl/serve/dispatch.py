"""Feeding the scheduler from the job store: queued jobs go out a window at a time, verdicts come back once.

The store, not the scheduler, is the queue of record: the scheduler only ever holds `window` jobs (enough to keep
its CPU stage ahead of its devices), so a killed server loses no more than those, and they are queued again on
start. Whatever scheduler it is given (this machine's devices or a Ray cluster), the dispatcher is the same.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

from kernelrl.scale import Scheduler, SchedulerStats
from kernelrl.serve.jobs import JobStore

log = logging.getLogger(__name__)


class Dispatcher:
    """Hands queued jobs to `scheduler`, at most `window` at a time, and records each verdict in `jobs`."""

    def __init__(self, jobs: JobStore, scheduler: Scheduler, window: int = 4):
        self.jobs, self.scheduler, self.window = jobs, scheduler, max(1, window)
        self.requeued = jobs.requeue_running()  # a previous process died with these in flight
        self._inflight: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kernelrl-dispatch", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """New jobs were accepted: look at the queue now rather than at the next tick."""
        self._wake.set()

    def stats(self) -> SchedulerStats:
        return self.scheduler.stats()

    def close(self) -> None:
        """Stop handing out jobs and close the scheduler; jobs it still held stay `running` until the next start."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self.scheduler.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._fill()
            except Exception:  # noqa: BLE001 - a store hiccup must not stop the service; try again next tick
                log.exception("dispatching queued jobs failed")
            self._wake.wait(0.5)
            self._wake.clear()

    def _fill(self) -> None:
        with self._lock:
            free = self.window - len(self._inflight)
        for job_id, task, candidate, policy in self.jobs.claim(free):
            if self._stop.is_set():
                return  # claimed but not handed out: `running`, so queued again on the next start
            try:
                fut = self.scheduler.submit(task, candidate, policy)
            except Exception as e:  # noqa: BLE001 - a scheduler that refuses a job fails that job, not the loop
                self.jobs.fail(job_id, _one_line(e))
                continue
            with self._lock:
                self._inflight[job_id] = fut
            fut.add_done_callback(lambda f, j=job_id: self._finished(j, f))

    def _finished(self, job_id: str, fut: Future) -> None:
        try:
            if fut.cancelled() or self._stop.is_set():
                return  # closing: left `running`, so queued again (and its verdict written) on the next start
            error = fut.exception()
            if error is not None:
                self.jobs.fail(job_id, _one_line(error))
            elif not self.jobs.finish(job_id, fut.result()):
                log.warning("job %s already had its verdict; this one was dropped", job_id)
        except Exception:  # noqa: BLE001 - e.g. the store closed during shutdown: the job is re-run on start
            log.exception("recording the verdict of job %s failed", job_id)
        finally:
            with self._lock:
                self._inflight.pop(job_id, None)
            self._wake.set()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]
