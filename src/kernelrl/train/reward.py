"""Judging rollouts: parse each reply, record it in the store, evaluate it in a pool of Evaluators (one per device).

Evaluation runs on threads, so the caller can keep generating while earlier rollouts are judged; identical
programs are evaluated once (the store keys evaluations by source digest, and in-flight duplicates share one
future). A candidate that crashes, hangs or cheats comes back as a verdict; an evaluator that itself fails is
rebuilt and the rollout gets no reward (`reward None`), so training never stops on a bad program.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from kernelrl.evaluate.config import EvalConfig
from kernelrl.scale import Scheduler
from kernelrl.search.parse import parse_reply
from kernelrl.search.prompt import prompt_hash
from kernelrl.search.store import PENDING, Store
from kernelrl.task import Candidate, Task, TaskError
from kernelrl.train.shaping import Outcome
from kernelrl.verdict import Verdict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rollout:
    """One reply generated for one task, with the prompt that produced it and the exemplars it showed."""

    task: Task
    reply: str
    prompt: list | None = None
    parent_ids: tuple[int, ...] = ()
    source: str | None = None   # a program given directly (seeds), not parsed from a reply


@dataclass(frozen=True)
class Judged:
    """A rollout's fate: the status ('error' when the evaluator itself failed), speedup, verdict, store ids."""

    task: str
    status: str
    speedup: float | None = None
    verdict: Verdict | None = None
    candidate_id: int | None = None
    source: str | None = None
    evaluated: bool = False     # evaluated now (False: an earlier verdict of the same source was reused)

    @property
    def outcome(self) -> Outcome:
        return Outcome(task=self.task, status=self.status, speedup=self.speedup)


class RewardPool:
    """Evaluators on `devices`, fed from a thread pool; every judged rollout is recorded in `store`. With a
    `scheduler` (e.g. `kernelrl.client.RemoteScheduler`, a reward service), it judges instead of local evaluators."""

    def __init__(self, store: Store, devices: tuple[str, ...], eval_overrides: dict | None = None,
                 proposer: str = "train", model: str | None = None, scheduler: Scheduler | None = None,
                 parallel: int = 64):
        from kernelrl.evaluate import Evaluator  # the evaluator is heavy; import it only when judging

        self.store, self.proposer, self.model, self.scheduler = store, proposer, model, scheduler
        self.policy = (eval_overrides or {}).get("policy")  # the precision policy, sent with each scheduled job
        self._make = lambda device: Evaluator(EvalConfig(device=device).with_(**(eval_overrides or {})))
        self._free: queue.Queue = queue.Queue()
        self._all = []
        for d in devices if scheduler is None else ():
            ev = self._make(d)
            ev.__enter__()
            self._all.append(ev)
            self._free.put((d, ev))
        # With a scheduler a thread only waits for its verdict: `parallel` of them keep its queue full.
        workers = len(devices) if scheduler is None else parallel
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernelrl-eval")
        self._inflight: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()
        self.evaluations = 0  # how many programs this pool actually evaluated

    def submit(self, rollout: Rollout, proposer: str | None = None, unique: bool = False) -> Future:
        """Record the rollout and start judging it; the future yields a Judged."""
        task = rollout.task
        self.store.add_task(task)
        source, error = _program(rollout)
        rec = self.store.add_candidate(task, source, proposer or self.proposer, parent_ids=rollout.parent_ids,
                                       model=None if rollout.source else self.model, prompt=rollout.prompt,
                                       prompt_hash=prompt_hash(rollout.prompt) if rollout.prompt else None,
                                       reply=rollout.reply or None, parse_error=error, unique=unique)
        if source is None:
            return _done(Judged(task=task.name, status="no_code", verdict=rec.verdict, candidate_id=rec.id))
        if rec.status != PENDING:
            return _done(Judged(task=task.name, status=rec.status, speedup=rec.speedup, verdict=rec.verdict,
                                candidate_id=rec.id, source=source))
        key = (task.digest, rec.digest)
        with self._lock:
            fut = self._inflight.get(key)
            if fut is None:
                fut = self._threads.submit(self._evaluate, task, Candidate.from_source(source), rec.digest)
                self._inflight[key] = fut
                fut.add_done_callback(lambda _f, k=key: self._forget(k))
        out: Future = Future()

        def relay(f: Future, cid=rec.id, src=source):
            if f.exception() is not None:  # e.g. the store stayed locked: no verdict, but no hang either
                log.error("judging candidate %s of %s failed: %s", cid, task.name, f.exception())
                out.set_result(Judged(task=task.name, status="error", candidate_id=cid, source=src))
                return
            j = f.result()
            out.set_result(Judged(task=j.task, status=j.status, speedup=j.speedup, verdict=j.verdict,
                                  candidate_id=cid, source=src, evaluated=j.evaluated))
        fut.add_done_callback(relay)
        return out

    def judge(self, rollouts: list[Rollout], proposer: str | None = None, unique: bool = False) -> list[Judged]:
        """Judge a batch concurrently across devices; results in input order."""
        futures = [self.submit(r, proposer, unique) for r in rollouts]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        if self.scheduler is not None:
            self.scheduler.close()
        for ev in self._all:
            try:
                ev.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - closing must not mask the run's own outcome
                log.exception("closing an evaluator failed")

    def __enter__(self) -> "RewardPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _forget(self, key):
        with self._lock:
            self._inflight.pop(key, None)

    def _evaluate(self, task: Task, cand: Candidate, digest: str) -> Judged:
        if self.scheduler is not None:
            return self._schedule(task, cand, digest)
        device, ev = self._free.get()
        try:
            self.store.start_evaluation(task, digest, device)
            verdict = ev.evaluate(task, cand)
        except Exception:  # noqa: BLE001 - an evaluator fault must not end training
            log.exception("the evaluator on %s failed on %s/%s; rebuilding it", device, task.name, digest)
            ev = self._rebuild(device, ev)
            return Judged(task=task.name, status="error", source=cand.source)
        finally:
            self._free.put((device, ev))
        return self._recorded(task, cand, digest, verdict)

    def _schedule(self, task: Task, cand: Candidate, digest: str) -> Judged:
        self.store.start_evaluation(task, digest, "scheduler")
        try:
            verdict = self.scheduler.submit(task, cand, self.policy).result()
        except Exception as e:  # noqa: BLE001 - the service failed, not the program: no reward, training goes on
            log.error("judging %s/%s failed: %s", task.name, digest, e)
            return Judged(task=task.name, status="error", source=cand.source)
        return self._recorded(task, cand, digest, verdict)

    def _recorded(self, task: Task, cand: Candidate, digest: str, verdict: Verdict) -> Judged:
        self.store.record_verdict(task, digest, verdict)
        with self._lock:
            self.evaluations += 1
        return Judged(task=task.name, status=verdict.status, speedup=verdict.speedup, verdict=verdict,
                      source=cand.source, evaluated=True)

    def _rebuild(self, device: str, old):
        try:
            old.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - it already failed; a fresh one replaces it
            pass
        try:
            new = self._make(device)
            new.__enter__()
        except Exception:  # noqa: BLE001
            log.exception("could not rebuild the evaluator on %s; keeping the old one", device)
            return old
        with self._lock:
            self._all = [new if e is old else e for e in self._all]
        return new


def _program(rollout: Rollout) -> tuple[str | None, str | None]:
    """The program a rollout proposes and, when there is none, why."""
    if rollout.source is not None:
        return rollout.source, None
    return reply_program(rollout.reply)


def reply_program(reply: str) -> tuple[str | None, str | None]:
    """The program an LLM reply proposes (a source defining ModelNew) and, when there is none, why."""
    parsed = parse_reply(reply)
    if parsed.code is None:
        return None, parsed.error
    try:
        Candidate.from_source(parsed.code)
    except TaskError as e:
        return None, str(e)
    return parsed.code, None


def _done(j: Judged) -> Future:
    f: Future = Future()
    f.set_result(j)
    return f
