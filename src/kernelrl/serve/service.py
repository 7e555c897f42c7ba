"""The reward service without HTTP: validate requests, accept them into the job store, answer from it.

Nothing here runs task or candidate code: references and candidates are checked by parsing them (AST); the
scheduler's evaluators run them in sandboxed workers.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

from kernelrl.scale import Scheduler, SchedulerStats
from kernelrl.serve.dispatch import Dispatcher
from kernelrl.serve.jobs import Counts, Job, JobStore
from kernelrl.task import POLICIES, Candidate, Task, TaskError, TaskMeta

FIELDS = ("reference", "task", "candidate", "policy", "name", "meta", "cache")


class RequestError(ValueError):
    """A request the service refuses: the HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Accepted:
    """A job id for a request, and whether an identical earlier request's job answers it."""

    id: str
    cached: bool

    def to_dict(self) -> dict:
        return {"id": self.id, "cached": self.cached}


@dataclass(frozen=True)
class Progress:
    """What `/metrics` and the console line show: the store's jobs, the scheduler's stats, HTTP counters."""

    jobs: Counts
    scheduler: SchedulerStats
    accepted: int        # jobs accepted since start (cache hits included)
    cache_hits: int
    rejected: int        # requests refused with a 4xx since start


class Service:
    """Accepts evaluations into `jobs` and keeps `scheduler` fed through a Dispatcher."""

    def __init__(self, jobs: JobStore, scheduler: Scheduler, *, context: str, devices: tuple[str, ...] = (),
                 suite: dict[str, Task] | None = None, default_policy: str = "strict", window: int = 4):
        self.jobs, self.context, self.devices = jobs, context, devices
        self.suite = suite or {}
        self.default_policy = default_policy
        self.dispatcher = Dispatcher(jobs, scheduler, window)
        self._lock = threading.Lock()
        self.accepted = self.cache_hits = self.rejected = 0

    def submit(self, body: dict) -> Accepted:
        """Accept one evaluation request (already parsed JSON)."""
        return self.submit_many([body])[0]

    def submit_many(self, bodies: list) -> list[Accepted]:
        """Accept several requests: all of them, or (one invalid) none."""
        parsed = []
        for i, body in enumerate(bodies):
            try:
                parsed.append(self.parse(body))
            except RequestError as e:
                raise RequestError(e.status, f"evaluation {i}: {e}" if len(bodies) > 1 else str(e)) from None
        out = [Accepted(*added) for added in self.jobs.add(
            [(task, cand, policy, JobStore.key(task, cand, policy, self.context), reuse)
             for task, cand, policy, reuse in parsed])]
        with self._lock:
            self.accepted += len(out)
            self.cache_hits += sum(a.cached for a in out)
        self.dispatcher.poke()
        return out

    def parse(self, body) -> tuple[Task, Candidate, str, bool]:
        """(task, candidate, policy, reuse) of one request, or a RequestError saying what is wrong."""
        if not isinstance(body, dict):
            raise RequestError(400, "an evaluation must be a JSON object with \"reference\" (or \"task\") and "
                                    "\"candidate\"")
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise RequestError(400, f"unknown field(s) {unknown}; known fields: {', '.join(FIELDS)}")
        for key in ("reference", "task", "candidate", "policy", "name"):
            if key in body and not isinstance(body[key], str):
                raise RequestError(400, f"\"{key}\" must be a string")
        if not isinstance(body.get("meta", {}), dict):
            raise RequestError(400, "\"meta\" must be an object of task metadata (e.g. {\"atol\": 0.01})")
        if "meta" in body and "reference" not in body:
            raise RequestError(400, "\"meta\" goes with \"reference\"; a suite task has its own")
        if not isinstance(body.get("cache", True), bool):
            raise RequestError(400, "\"cache\" must be true or false")
        if ("reference" in body) == ("task" in body):
            raise RequestError(400, "give either \"reference\" (the reference's source) or \"task\" (a task id of "
                                    "the server's --suite), not both, not neither")
        if "candidate" not in body:
            raise RequestError(400, "\"candidate\" (the source defining ModelNew) is missing")
        policy = body.get("policy", self.default_policy)
        if policy not in POLICIES:
            raise RequestError(400, f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
        try:
            if "reference" in body:
                meta = TaskMeta.from_dict(body["meta"]) if "meta" in body else None
                task = Task.from_source(body["reference"], name=body.get("name") or "reference", meta=meta)
            else:
                task = self._suite_task(body["task"])
            cand = Candidate.from_source(body["candidate"], name="candidate")
        except (TaskError, TypeError) as e:  # TypeError: metadata of the wrong type
            raise RequestError(400, _one_line(str(e))) from None
        return task, cand, policy, body.get("cache", True)

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise RequestError(404, f"no evaluation {job_id!r} on this server (ids come from POST /v1/evaluations)")
        return job

    def refused(self) -> None:
        with self._lock:
            self.rejected += 1

    def progress(self) -> Progress:
        with self._lock:
            accepted, hits, rejected = self.accepted, self.cache_hits, self.rejected
        return Progress(jobs=self.jobs.counts(), scheduler=self.dispatcher.stats(), accepted=accepted,
                        cache_hits=hits, rejected=rejected)

    def close(self) -> None:
        self.dispatcher.close()
        self.jobs.close()

    def _suite_task(self, name: str) -> Task:
        if name in self.suite:
            return self.suite[name]
        if not self.suite:
            raise RequestError(400, f"unknown task {name!r}: this server has no suite (start it with --suite DIR), "
                                    "so send the reference's source as \"reference\"")
        some = ", ".join(sorted(self.suite)[:5])
        raise RequestError(400, f"unknown task {name!r}; this server's suite has {len(self.suite)} tasks, e.g. {some}")


def context_key(device_kind: str, toolchain: str, settings: dict) -> str:
    """What a verdict depends on besides its job: device kind, toolchain and evaluator settings (hex digest)."""
    payload = json.dumps({"device": device_kind, "toolchain": toolchain, "settings": settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def progress_line(p: Progress) -> str:
    """One console line: queue depth, running, done, verdicts per minute, device busy fractions."""
    s = p.scheduler
    busy = " ".join(f"{d} {100 * f:.0f}%" for d, f in sorted(s.device_busy.items())) or "n/a"
    return (f"queue {p.jobs.queued + s.queued}, running {s.running}, done {p.jobs.done} "
            f"(+{p.jobs.last_minute} in the last minute, {s.verdicts_per_minute:.1f}/min), failed {p.jobs.failed}, "
            f"busy {busy}; requests accepted {p.accepted} ({p.cache_hits} from the store), refused {p.rejected}")


def metrics_text(p: Progress) -> str:
    """Prometheus text exposition of `p`."""
    s = p.scheduler
    lines: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]):
        lines.append(f"# HELP kernelrl_{name} {help_text}")
        lines.append(f"# TYPE kernelrl_{name} {kind}")
        lines.extend(f"kernelrl_{name}{labels} {value:g}" for labels, value in samples)

    metric("jobs", "gauge", "Jobs in the store by state.",
           [(f'{{state="{st}"}}', getattr(p.jobs, st)) for st in ("queued", "running", "done", "failed")])
    metric("queue_depth", "gauge", "Jobs waiting: queued in the store or in the scheduler, not yet on a device.",
           [("", p.jobs.queued + s.queued)])
    metric("running", "gauge", "Jobs on a device or in their CPU stage now.", [("", s.running)])
    metric("verdicts_total", "counter", "Verdicts in the store.", [("", p.jobs.done)])
    metric("verdicts_per_minute", "gauge", "Verdicts per minute over the scheduler's last few minutes.",
           [("", s.verdicts_per_minute)])
    metric("device_busy_fraction", "gauge", "Fraction of wall time each device spent in its device stage.",
           [(f'{{device="{d}"}}', f) for d, f in sorted(s.device_busy.items())])
    metric("retried_total", "counter", "Jobs re-run after a worker, actor or node died under them.",
           [("", s.retried)])
    metric("requests_accepted_total", "counter", "Evaluations accepted since start.", [("", p.accepted)])
    metric("cache_hits_total", "counter", "Evaluations answered by an identical earlier job.", [("", p.cache_hits)])
    metric("requests_refused_total", "counter", "Requests refused with a 4xx since start.", [("", p.rejected)])
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]
