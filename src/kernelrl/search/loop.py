"""The optimisation loop: propose, evaluate, show the results to the next proposal, repeat.

LLM calls run concurrently in a thread pool while one worker thread per device keeps its Evaluator busy.
A prompt is built only while at most `lookahead` proposals are unjudged, so however fast the LLM answers,
each prompt shows the verdicts of all but the last few proposals (else the loop would be best-of-N sampling).
Every proposal is stored before it is judged, so a run stopped at any point (Ctrl-C, kill -9, budget)
resumes from the store: pending evaluations are re-run, finished LLM proposals count toward
`iterations`, and seed proposals already stored are not added again.
"""
from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Protocol

from kernelrl.search.contrastive import contrastive_prompt
from kernelrl.search.exemplars import STRATEGIES
from kernelrl.search.llm import BudgetExceeded, LLMClient, LLMError
from kernelrl.search.parse import parse_reply
from kernelrl.search.prompt import PromptConfig, prompt_hash
from kernelrl.search.review import needs_review, review
from kernelrl.search.proposers import POLISHERS, PROPOSERS, resolve
from kernelrl.search.store import PENDING, CandidateRecord, Store
from kernelrl.task import Candidate, Task, TaskError
from kernelrl.verdict import Verdict

LLM_PROPOSER = "llm"


class EvaluatorLike(Protocol):
    def evaluate(self, task: Task, candidate: Candidate) -> Verdict: ...


class LoopError(RuntimeError):
    """The loop cannot go on (an evaluator failed, or the LLM endpoint is unusable)."""


@dataclass(frozen=True)
class LoopConfig:
    """What one run does and when it stops; counts are totals for the task in the store (runs resume)."""

    iterations: int = 0                   # LLM proposals in total; 0 runs only the non-LLM proposers
    proposers: tuple[str, ...] | None = None  # seed proposers by name; None: every one that applies
    polish: bool = True                   # wrap the best LLM candidate in CUDA-graph / compile at the end
    exemplars: int = 2                    # earlier variants shown per prompt
    exemplar_strategy: str = "bucket"     # bucket | best | random | diverse
    tau: float = 1.0                      # bucket softmax temperature (on log2-speedup scores)
    n_buckets: int = 5
    failures: int = 3                     # recent failures fed back per prompt, with their errors
    verdicts: int = 24                    # judged candidates listed per prompt (speedup or error), one line each
    lookahead: int | None = None          # a prompt is built only while at most this many proposals are
                                          # unjudged; None: the LLM concurrency or the number of devices,
                                          # whichever is larger; 0: strictly one at a time
    wait_for_seeds: bool = True           # judge the seed proposals before the first LLM call
    target_speedup: float | None = None   # stop once a verified candidate reaches it
    patience: int | None = None           # stop after this many LLM proposals without a new best
    time_limit_s: float | None = None     # stop starting LLM calls after this many seconds
    max_llm_errors: int = 3               # consecutive failed LLM calls before the run stops
    max_attempts: int = 3                 # evaluations cut short this often (kill -9) are recorded as failed
    seed: int = 0
    review_speedup: float | None = None   # ask the LLM for a second opinion on correct candidates this fast
                                          # (or with hack warnings); recorded, never changes a verdict
    prompt: PromptConfig = field(default_factory=PromptConfig)

    def __post_init__(self):
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        if self.exemplar_strategy not in STRATEGIES:
            raise ValueError(f"unknown exemplar strategy {self.exemplar_strategy!r}; one of {', '.join(STRATEGIES)}")
        if self.tau <= 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")
        if self.lookahead is not None and self.lookahead < 0:
            raise ValueError(f"lookahead must be >= 0 (0: one proposal at a time), got {self.lookahead}")
        if self.verdicts < 0:
            raise ValueError(f"verdicts must be >= 0, got {self.verdicts}")
        resolve(self.proposers)  # unknown names fail here, before any work starts

    def to_dict(self) -> dict:
        d = asdict(self)
        d["prompt"] = self.prompt.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "LoopConfig":
        d = dict(d)
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown loop settings {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        if "prompt" in d:
            d["prompt"] = PromptConfig.from_dict(d["prompt"])
        if d.get("proposers") is not None:
            d["proposers"] = tuple(d["proposers"])
        return cls(**d)


@dataclass(frozen=True)
class Snapshot:
    """What a progress display shows; cost in USD, speedup × over the reference."""

    best_speedup: float | None
    by_status: dict
    llm_done: int
    llm_target: int
    llm_in_flight: int
    evaluating: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    budget_usd: float | None
    retries: int
    elapsed_s: float
    stop_reason: str
    log: tuple[str, ...]


@dataclass(frozen=True)
class RunResult:
    """How a run ended and where it got."""

    stop_reason: str
    best: CandidateRecord | None
    stats: dict
    seconds: float

    def to_dict(self) -> dict:
        return {"stop_reason": self.stop_reason, "best": self.best.to_dict() if self.best else None,
                "stats": self.stats, "seconds": self.seconds}


class Loop:
    """One task, one store, one Evaluator per device, an optional LLM."""

    def __init__(self, task: Task, store: Store, evaluators: Mapping[str, EvaluatorLike], *,
                 llm: LLMClient | None = None, config: LoopConfig = LoopConfig(),
                 on_event: Callable[[str], None] | None = None):
        if not evaluators:
            raise ValueError("the loop needs at least one evaluator")
        self.task, self.store, self.evaluators, self.llm, self.config = task, store, dict(evaluators), llm, config
        self.on_event = on_event
        self._rng = random.Random(config.seed)
        self._rng_lock = threading.Lock()
        self._cond = threading.Condition()
        self._queue: queue.Queue = queue.Queue()
        self._queued: set[str] = set()     # digests queued or being judged
        self._evaluating = 0
        self._gen_in_flight = 0
        self._llm_done = 0
        self._llm_errors = 0
        self._best: float | None = None
        self._best_at_llm = 0              # llm_done when the best last improved
        self._stop = ""                    # why new work stopped ("" while running)
        self._abort = threading.Event()    # drop everything now (Ctrl-C, fatal error)
        self._fatal: BaseException | None = None
        self._log: list[str] = []
        self._t0 = time.monotonic()
        if llm is not None and llm.on_retry is None:
            llm.on_retry = self._event

    # ---- public --------------------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Seed, run the LLM iterations, polish, wait for every verdict; returns how it ended."""
        self._t0 = time.monotonic()
        self.store.add_task(self.task)
        self._best = self.store.stats(self.task)["best_speedup"]
        workers = [threading.Thread(target=self._eval_worker, args=(dev, ev), name=f"eval-{dev}", daemon=True)
                   for dev, ev in self.evaluators.items()]
        for w in workers:
            w.start()
        try:
            resumed = self.store.pending(self.task)
            if resumed:
                self._event(f"resuming: {len(resumed)} evaluation(s) left pending by an earlier run")
            for rec in resumed:
                self._enqueue(rec)
            self._seed()
            if self.llm is not None and self.config.iterations > 0:
                if self.config.wait_for_seeds:
                    self._wait_idle()
                self._generate()
            self._wait_idle()
            if self.config.polish and not self._abort.is_set():
                self._polish()
                self._wait_idle()
            if not self._stop:
                self._stop = "done"
        except KeyboardInterrupt:
            self._stop = "interrupted"
            self._abort.set()
            self._event("interrupted: unfinished evaluations stay pending and run on resume")
        finally:
            if not self._abort.is_set():
                for _ in workers:
                    self._queue.put(None)
                for w in workers:
                    w.join()
            else:
                self._abort.set()
        if self._fatal is not None:
            raise LoopError(str(self._fatal)) from self._fatal
        best = self.store.best_candidates(self.task, 1)
        return RunResult(stop_reason=self._stop, best=best[0] if best else None, stats=self.store.stats(self.task),
                         seconds=time.monotonic() - self._t0)

    def stop(self, reason: str = "stopped") -> None:
        """Start no new work; what is running finishes and is recorded."""
        with self._cond:
            self._stop = self._stop or reason
            self._cond.notify_all()

    def snapshot(self) -> Snapshot:
        """Current progress (safe to call from any thread)."""
        s = self.store.stats(self.task)
        with self._cond:
            return Snapshot(
                best_speedup=s["best_speedup"], by_status=s["by_status"], llm_done=s["llm_candidates"],
                llm_target=self.config.iterations if self.llm else 0, llm_in_flight=self._gen_in_flight,
                evaluating=self._evaluating, tokens_in=s["tokens_in"], tokens_out=s["tokens_out"],
                cost_usd=s["cost_usd"], budget_usd=self.llm.budget.limit_usd if self.llm else None,
                retries=self.llm.retries if self.llm else 0, elapsed_s=time.monotonic() - self._t0,
                stop_reason=self._stop, log=tuple(self._log[-6:]))

    # ---- proposals -----------------------------------------------------------------------------------------

    def _seed(self) -> None:
        names = self.config.proposers
        device = next(iter(self.evaluators))
        for p in resolve(names):
            if not p.applies(self.task, device):
                continue
            rec = self.store.add_candidate(self.task, p.propose(self.task), p.name, unique=True)
            self._enqueue(rec)

    def _polish(self) -> None:
        best = self.store.best_candidates(self.task, 1)
        if not best or best[0].proposer != LLM_PROPOSER:
            return
        device = next(iter(self.evaluators))
        for name in POLISHERS:
            p = PROPOSERS[name]
            if p.applies(self.task, device):
                rec = self.store.add_candidate(self.task, p.propose_on(best[0].source), p.name,
                                               parent_ids=(best[0].id,), unique=True)
                self._enqueue(rec)

    def _generate(self) -> None:
        cfg = self.config
        lookahead = cfg.lookahead if cfg.lookahead is not None else max(self.llm.config.concurrency,
                                                                        len(self.evaluators))
        self._llm_done = self.store.count_candidates(self.task, LLM_PROPOSER)
        if self._llm_done >= cfg.iterations:
            self._event(f"all {cfg.iterations} LLM iterations are already in the store; raise --iterations to go on")
            return
        self._best_at_llm = self._llm_done
        while True:
            with self._cond:
                # Unjudged = generating + queued or being judged; the new call builds its prompt from the store.
                while not self._stop_now() and (
                        self._gen_in_flight >= self.llm.config.concurrency
                        or self._gen_in_flight + len(self._queued) > lookahead
                        or self._llm_done + self._gen_in_flight >= cfg.iterations):
                    if self._llm_done >= cfg.iterations and self._gen_in_flight == 0:
                        return
                    self._cond.wait(0.5)
                if self._stop_now():
                    break
                self._gen_in_flight += 1
            threading.Thread(target=self._generate_one, name="llm", daemon=True).start()
        # Stopped: let calls in flight finish (they are paid for) unless aborting.
        with self._cond:
            while self._gen_in_flight and not self._abort.is_set():
                self._cond.wait(0.5)

    def _stop_now(self) -> bool:
        """Whether to start no more LLM calls (caller holds the condition)."""
        cfg = self.config
        if self._stop or self._abort.is_set():
            return True
        if self.llm.budget.exhausted:
            self._stop = "budget"
            self._event(f"budget reached: ${self.llm.budget.spent_usd:.4f} of ${self.llm.budget.limit_usd:.4f}")
        elif cfg.target_speedup is not None and self._best is not None and self._best >= cfg.target_speedup:
            self._stop = "target"
            self._event(f"target speedup {cfg.target_speedup}x reached ({self._best:.3f}x)")
        elif cfg.patience is not None and self._llm_done - self._best_at_llm >= cfg.patience:
            self._stop = "patience"
            self._event(f"no new best in {cfg.patience} LLM proposals")
        elif cfg.time_limit_s is not None and time.monotonic() - self._t0 >= cfg.time_limit_s:
            self._stop = "time"
            self._event(f"time limit {cfg.time_limit_s:.0f}s reached")
        return bool(self._stop)

    def _generate_one(self) -> None:
        try:
            self._propose_with_llm()
            with self._cond:
                self._llm_errors = 0
        except BudgetExceeded as e:
            self.stop("budget")
            self._event(f"budget reached: {e}")
        except LLMError as e:
            self._event(f"LLM call failed: {e}")
            with self._cond:
                self._llm_errors += 1
                if e.fatal or self._llm_errors >= self.config.max_llm_errors:
                    self._fatal = e if e.fatal else LLMError(
                        f"{self._llm_errors} LLM calls in a row failed; last: {e}")
                    self._stop = self._stop or "llm_error"
        except BaseException as e:  # a bug must not hang the loop
            with self._cond:
                self._fatal = e
                self._stop = self._stop or "error"
            self._abort.set()
        finally:
            with self._cond:
                self._gen_in_flight -= 1
                self._cond.notify_all()

    def _propose_with_llm(self) -> None:
        cfg = self.config
        with self._rng_lock:
            rng = random.Random(self._rng.random())
        prompt = contrastive_prompt(self.store, self.task, rng, k=cfg.exemplars, strategy=cfg.exemplar_strategy,
                                    tau=cfg.tau, max_failures=cfg.failures, config=cfg.prompt,
                                    n_buckets=cfg.n_buckets, max_verdicts=cfg.verdicts)
        messages = prompt.messages
        done = self.llm.complete(messages)
        parsed = parse_reply(done.text)
        code, error = parsed.code, parsed.error
        if code is not None:
            try:
                Candidate.from_source(code)
            except TaskError as e:
                code, error = None, str(e)
        if done.finish_reason == "length" and (code is None or parsed.truncated):
            hint = "the reply was cut at the token limit; raise --max-tokens / --max-completion-tokens"
            self._event(hint)
            if code is None:
                error = f"{error} ({hint})"
        rec = self.store.add_candidate(
            self.task, code, LLM_PROPOSER, parent_ids=list(prompt.parent_ids),
            model=done.model, prompt=messages, prompt_hash=prompt_hash(messages), reply=done.text,
            parse_error=error if code is None else None, tokens_in=done.tokens_in, tokens_out=done.tokens_out,
            cost_usd=done.cost_usd)
        with self._cond:
            self._llm_done += 1
            self._cond.notify_all()
        if code is None:
            self._event(f"candidate {rec.id}: no usable code ({error})")
        self._enqueue(rec)

    # ---- evaluation ----------------------------------------------------------------------------------------

    def _enqueue(self, rec: CandidateRecord) -> None:
        with self._cond:
            if rec.status != PENDING or rec.digest in self._queued:
                return
            self._queued.add(rec.digest)
        self._queue.put(rec)

    def _eval_worker(self, device: str, evaluator: EvaluatorLike) -> None:
        while not self._abort.is_set():
            try:
                rec = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if rec is None:
                return
            with self._cond:
                self._evaluating += 1
            try:
                self._judge(device, evaluator, rec)
            except BaseException as e:  # the evaluator itself broke: stop, keep the candidate pending
                with self._cond:
                    self._fatal = self._fatal or LoopError(
                        f"the evaluator on {device} failed on candidate {rec.id}: {type(e).__name__}: {e}")
                    self._stop = self._stop or "error"
                self._abort.set()
            finally:
                with self._cond:
                    self._evaluating -= 1
                    self._queued.discard(rec.digest)
                    self._cond.notify_all()

    def _judge(self, device: str, evaluator: EvaluatorLike, rec: CandidateRecord) -> None:
        attempts = self.store.start_evaluation(self.task, rec.digest, device)
        if attempts > self.config.max_attempts:
            verdict = Verdict(status="runtime_error", task=self.task.name, candidate=rec.digest, device=device,
                              message=f"evaluation was interrupted {attempts - 1} times (the run died while "
                                      "judging this candidate); not retried")
        else:
            verdict = evaluator.evaluate(self.task, Candidate(source=rec.source, name=f"c{rec.id}",
                                                              language=rec.language))
        if self._abort.is_set():
            # A verdict reached while shutting down may be an artefact of the shutdown: judge it again on resume.
            self.store.abandon_evaluation(self.task, rec.digest)
            return
        self.store.record_verdict(self.task, rec.digest, verdict)
        self._review(rec, verdict)
        with self._cond:
            if verdict.ok and verdict.speedup is not None and (self._best is None or verdict.speedup > self._best):
                self._best = verdict.speedup
                self._best_at_llm = self._llm_done
                self._event(f"new best {verdict.speedup:.3f}x: candidate {rec.id} ({rec.proposer})")
        if not verdict.ok:
            self._event(f"candidate {rec.id} ({rec.proposer}): {verdict.status} {_last_line(verdict.message)}")

    def _review(self, rec: CandidateRecord, verdict: Verdict) -> None:
        """Record the LLM's opinion of a suspicious verdict (evidence for a human; the verdict stands)."""
        threshold = self.config.review_speedup
        if self.llm is None or threshold is None or not needs_review(verdict, threshold):
            return
        try:
            opinion = review(self.llm, self.task, rec.source, verdict)
        except (LLMError, BudgetExceeded) as e:
            self._event(f"review of candidate {rec.id} skipped: {e}")
            return
        self.store.record_review(self.task, rec.digest, opinion)
        self._event(f"review of candidate {rec.id}: {opinion.opinion}"
                    + (f" ({opinion.hack})" if opinion.hack else ""))

    def _wait_idle(self) -> None:
        """Block until nothing is queued or being judged (or the run aborts)."""
        with self._cond:
            while self._queued and not self._abort.is_set():
                self._cond.wait(0.5)

    # ---- helpers -------------------------------------------------------------------------------------------

    def _event(self, text: str) -> None:
        line = f"[{time.monotonic() - self._t0:7.1f}s] {text}"
        self._log.append(line)
        if self.on_event:
            self.on_event(line)


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""
