"""A client of `kernelrl serve`: submit evaluations, poll for their verdicts (standard library only).

    from kernelrl.client import Client
    c = Client("http://127.0.0.1:8000")                  # token: $KERNELRL_API_TOKEN unless given
    v = c.evaluate(reference=ref_src, candidate=cand_src)  # -> Verdict
    vs = c.evaluate_many([{"task": "level1/19_ReLU", "candidate": src}, ...])

`RemoteScheduler` offers the same service as a `kernelrl.scale.Scheduler`, so code written against schedulers
(e.g. the training reward pool) can judge on a service instead of local evaluators.
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor

from kernelrl.scale import SchedulerStats
from kernelrl.task import Candidate, Task
from kernelrl.verdict import Verdict

TOKEN_ENV = "KERNELRL_API_TOKEN"


class ServiceError(RuntimeError):
    """The service refused a request, could not be reached, or could not judge a job: one line saying which."""


class EvaluationFailed(ServiceError):
    """The service could not run an evaluation (not the candidate's fault): the job has no verdict."""


class Client:
    """Talks to one `kernelrl serve` at `url`; safe to share between threads."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0):
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.timeout = timeout  # seconds per HTTP request

    # -- one request each -----------------------------------------------------------------------------------
    def submit(self, candidate: str, reference: str | None = None, task: str | None = None,
               policy: str | None = None, cache: bool = True, name: str | None = None,
               meta: dict | None = None) -> str:
        """Queue one evaluation (reference source, or a task id of the server's suite); returns its job id."""
        return self._post("/v1/evaluations", request(candidate, reference, task, policy, cache, name, meta))["id"]

    def submit_many(self, requests: list[dict]) -> list[str]:
        """Queue several evaluations (dicts as `request()` builds) in one call; returns their job ids in order."""
        if not requests:
            return []
        return self._post("/v1/evaluations:batch", {"evaluations": requests})["ids"]

    def get(self, job_id: str) -> dict:
        """The job as the service shows it: {"id", "state", "verdict" (a dict when done), "error", ...}."""
        return self._call("GET", f"/v1/evaluations/{job_id}")

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    # -- waiting ------------------------------------------------------------------------------------------
    def wait(self, job_id: str, timeout: float | None = None) -> Verdict:
        """The job's Verdict, polling with backoff (0.2 s growing to 5 s); ServiceError after `timeout` seconds."""
        return self.wait_many([job_id], timeout)[0]

    def wait_many(self, job_ids: list[str], timeout: float | None = None,
                  return_errors: bool = False) -> list[Verdict]:
        """Verdicts of `job_ids` in order, polling those not yet done with backoff. A job that could not run
        raises EvaluationFailed, or with `return_errors` takes that exception's place in the list."""
        deadline = None if timeout is None else time.monotonic() + timeout
        verdicts: dict[str, Verdict | EvaluationFailed] = {}
        delay = 0.2
        while True:
            for job_id in dict.fromkeys(job_ids):
                if job_id in verdicts:
                    continue
                job = self.get(job_id)
                if job["state"] == "done":
                    verdicts[job_id] = Verdict.from_dict(job["verdict"])
                elif job["state"] == "failed":
                    verdicts[job_id] = EvaluationFailed(f"evaluation {job_id} could not run: {job.get('error')}")
                    if not return_errors:
                        raise verdicts[job_id]
            if len(verdicts) == len(set(job_ids)):
                return [verdicts[j] for j in job_ids]
            if deadline is not None and time.monotonic() + delay > deadline:
                raise ServiceError(f"{len(set(job_ids)) - len(verdicts)} evaluation(s) not done after {timeout:g} s "
                                   f"at {self.url}; wait longer or check the server's console")
            time.sleep(delay)
            delay = min(5.0, delay * 1.5)

    def evaluate(self, candidate: str, reference: str | None = None, task: str | None = None,
                 policy: str | None = None, cache: bool = True, timeout: float | None = None) -> Verdict:
        """Submit one evaluation and wait for its Verdict."""
        return self.wait(self.submit(candidate, reference, task, policy, cache), timeout)

    def evaluate_many(self, requests: list[dict], timeout: float | None = None) -> list[Verdict]:
        """Submit several evaluations in one call and wait for all their Verdicts (in order)."""
        return self.wait_many(self.submit_many(requests), timeout)

    # -- HTTP ---------------------------------------------------------------------------------------------
    def _post(self, path: str, body) -> dict:
        return self._call("POST", path, json.dumps(body).encode())

    def _call(self, method: str, path: str, data: bytes | None = None) -> dict:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise ServiceError(f"{method} {self.url}{path}: {e.code} {_reason(e)}") from None
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            raise ServiceError(f"cannot reach the kernelrl service at {self.url} ({why}); is `kernelrl serve` "
                               "running there?") from None
        except json.JSONDecodeError:
            raise ServiceError(f"{method} {self.url}{path}: the answer is not JSON; is this a kernelrl "
                               "service?") from None


def request(candidate: str, reference: str | None = None, task: str | None = None, policy: str | None = None,
            cache: bool = True, name: str | None = None, meta: dict | None = None) -> dict:
    """The JSON body of one evaluation: a candidate's source against a reference's source or a suite task id."""
    if (reference is None) == (task is None):
        raise ValueError("give either reference (its source) or task (a task id of the server's suite)")
    body = {"candidate": candidate, **({"reference": reference} if reference is not None else {"task": task})}
    if policy is not None:
        body["policy"] = policy
    if not cache:
        body["cache"] = False
    if name:
        body["name"] = name
    if meta is not None:
        body["meta"] = meta
    return body


class RemoteScheduler:
    """A `kernelrl.scale.Scheduler` whose evaluators are a `kernelrl serve` service: each job a thread that waits."""

    def __init__(self, client: Client, parallel: int = 64):
        self.client = client
        self._pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="kernelrl-remote")
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._queued = self._done = 0

    def submit(self, task: Task, candidate: Candidate, policy: str | None = None) -> "Future[Verdict]":
        with self._lock:
            self._queued += 1
        return self._pool.submit(self._judge, task, candidate, policy)

    def stats(self) -> SchedulerStats:
        with self._lock:
            elapsed = time.monotonic() - self._t0
            return SchedulerStats(queued=self._queued, done=self._done, elapsed_s=elapsed,
                                  verdicts_per_minute=60.0 * self._done / max(elapsed, 1e-9))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _judge(self, task: Task, candidate: Candidate, policy: str | None) -> Verdict:
        try:
            # The metadata travels too: a sidecar file's settings are not in the source.
            job = self.client.submit(candidate.source, reference=task.source, policy=policy, name=task.name,
                                     meta=task.to_dict()["meta"])
            return self.client.wait(job)
        finally:
            with self._lock:
                self._queued -= 1
                self._done += 1


def _reason(e: urllib.error.HTTPError) -> str:
    """The service's one-line `error`, or the HTTP reason phrase when the answer holds none."""
    try:
        return str(json.loads(e.read()).get("error") or e.reason)
    except (ValueError, AttributeError, OSError):
        return str(e.reason)
