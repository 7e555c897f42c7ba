"""A red-team run over a suite: each task audited (its reference in a probe worker), then the catalogue's templates
judged by the real evaluator; then, where an LLM is given, the hacker. On CUDA the jobs go through a `LocalScheduler`
(builds and worker starts ahead of the GPU stage, several GPUs sharing them), a task's templates submitted together so
they share its reference worker, while the next tasks are audited one after another (their draws hold the device as
untimed work does: never while an evaluator times); the next task's templates are queued before the last of this
one's are judged, so that the CPU lanes start its reference and candidates while the device finishes this one. On
the CPU they are judged one at a time. Every finished piece of work goes into the journal as it finishes."""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from kernelrl.bench.suite import SuiteTask
from kernelrl.evaluate import EvalConfig, Evaluator
from kernelrl.evaluate.audit import audit as static_audit
from kernelrl.redteam.audit import VERSION as AUDIT_VERSION
from kernelrl.redteam.audit import Finding, audit_task, stale
from kernelrl.redteam.cases import CASES, write_case
from kernelrl.redteam.journal import Journal, key
from kernelrl.redteam.probe import Profile, ProbeError, ProbeWorker
from kernelrl.redteam.report import ALLOWED
from kernelrl.redteam.templates import TEMPLATES, NotApplicable, Template, no_gain
from kernelrl.scale.local import LocalScheduler
from kernelrl.task import Candidate
from kernelrl.verdict import Verdict


@dataclass(frozen=True)
class RunConfig:
    """What a run judges with: the evaluator's settings (the policy, and the device audits run on), the devices that
    judge (several GPUs share the jobs), the templates, how many jobs are prepared ahead of each device and on how
    many CPU lanes at once (None: `LocalScheduler`'s default), and the monotonic time after which no task starts
    (None: no limit)."""

    eval: EvalConfig
    templates: tuple[Template, ...] = TEMPLATES
    lookahead: int = 3
    audits_ahead: int = 2  # CUDA: tasks audited ahead of the one whose templates are queued
    audit_lanes: int = 1  # CUDA: audits run at once (each holds a task's reference and its draws in device memory)
    deadline: float | None = None
    devices: tuple[str, ...] = ()  # () means the evaluator's device alone
    cpu_lanes: int | None = None

    @property
    def device_type(self) -> str:
        return torch.device(self.eval.device).type

    def late(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


class SerialScheduler:
    """One Evaluator judging each job as it is submitted: for the CPU, whose cores the timing shares with any worker
    started ahead (`LocalScheduler` prepares the next job while one is timed)."""

    capacity = 1

    def __init__(self, config: EvalConfig):
        self.evaluator = Evaluator(config)

    def submit(self, task, candidate: Candidate) -> Future:
        future: Future = Future()
        try:
            future.set_result(self.evaluator.evaluate(task, candidate))
        except Exception as e:  # the evaluation could not run (EvaluationError)
            future.set_exception(e)
        return future

    def close(self) -> None:
        self.evaluator.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def scheduler_for(config: RunConfig):
    """A LocalScheduler on CUDA (builds and worker starts run ahead of the GPU stage); serial judging on the CPU."""
    if config.device_type == "cpu":
        return SerialScheduler(config.eval)
    return LocalScheduler(config.eval, config.devices or (config.eval.device,), lookahead=config.lookahead,
                          cpu_workers=config.cpu_lanes)


def static_refusal(source: str, task_source: str, policy: str) -> str:
    """Why the evaluator's static audit rejects `source` on its own under `policy` ('' where it does not): such a
    candidate's verdict is `rejected` (or a failure) whatever it does when it runs, so it is never a hole."""
    findings = [f for f in static_audit(source, task_source)
                if f.severity == "reject" and f.hack not in ALLOWED.get(policy, ())]
    return "; ".join(f"static audit: {f.hack}: line {f.line}: {f.message}" for f in findings)[:1000]


@dataclass
class _Job:
    future: Future
    task: SuiteTask
    candidate: Candidate
    record: dict
    origin: str


@dataclass
class RedTeam:
    """Runs the audit and the templates (and the hacker, where given) over tasks; `run` returns whether it finished."""

    config: RunConfig
    out: Path
    journal: Journal
    hacker: object | None = None  # a `kernelrl.redteam.hacker.Hacker`
    on_record: Callable[[dict], None] | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)  # task name -> profile, for the hacker
    reaudit: bool = False  # audit again the tasks whose journalled audit an older audit made (`audit.stale`)

    def run(self, tasks: Sequence[SuiteTask]) -> bool:
        done = self.journal.load()
        finished = True
        # On CUDA the audits run one after another on a thread of their own, `audits_ahead` tasks ahead of the
        # templates; on the CPU, whose cores the timing uses, one thing at a time.
        lanes = self.config.audit_lanes
        ahead = ThreadPoolExecutor(lanes, thread_name_prefix="audit") if self.config.device_type == "cuda" else None
        audits: dict[int, Future] = {}
        with scheduler_for(self.config) as sched:
            # Unjudged jobs the loop goes on past: what keeps every device's pipeline full, and one task's templates
            # more, so that the next task's jobs are queued when the lanes free up from this one's.
            keep = sched.capacity + len(self.config.templates)
            jobs: list[_Job] = []
            for i, st in enumerate(tasks):
                if self.config.late():
                    finished = False
                    break
                early = audits.pop(i, None)
                if early is not None:  # audited ahead: journal the verdicts that come in while it finishes
                    jobs = self._meanwhile(early, jobs)
                audit = early.result() if early is not None else self._audit(st, done)
                if ahead is not None:
                    for j in range(i + 1, min(i + 1 + max(self.config.audits_ahead, lanes), len(tasks))):
                        if j not in audits:
                            audits[j] = ahead.submit(self._audit, tasks[j], done)
                if audit.get("profile") is None:
                    continue  # the reference does not run: nothing to judge against it
                profile = self.profiles[st.name] = Profile.from_dict(audit["profile"])
                for template in self.config.templates:
                    job = self._submit(sched, st, template, profile, done)
                    if job is not None:
                        jobs.append(job)
                jobs = self._settle(jobs, keep=keep)
            jobs = self._settle(jobs, keep=0)
            if ahead is not None:  # audits not started by the time limit are left for a later run
                ahead.shutdown(wait=True, cancel_futures=self.config.late())
            if self.hacker is not None and finished and not jobs:
                finished = self.hacker.run(self, [st for st in tasks if st.name in self.profiles], sched)
        # Past the time limit, closing the scheduler cancelled the jobs no device had started (a later run does them)
        # and finished the ones on a device.
        self._settle(jobs, keep=0)
        return finished and not jobs

    def base(self, st: SuiteTask, kind: str, name: str = "") -> dict:
        """The fields every record of this task carries (what `journal.key` reads)."""
        return {"kind": kind, "task": st.name, "digest": st.task.digest, "policy": self.policy(st),
                "device_type": self.config.device_type, "name": name}

    def policy(self, st: SuiteTask) -> str:
        return self.config.eval.policy_for(st.task.meta)

    def record(self, record: dict) -> None:
        self.journal.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def judged(self, record: dict, verdict: Verdict, st: SuiteTask, candidate: Candidate, origin: str) -> dict:
        """`record` completed with a verdict's facts; a verdict that is ok is written out as a regression case."""
        record.update(status=verdict.status, speedup=verdict.speedup, message=verdict.message[:1000],
                      flags=[asdict(f) for f in verdict.flags], seconds=round(verdict.seconds, 3),
                      phases={k: round(v, 3) for k, v in verdict.phases.items()}, at=round(time.time(), 3))
        if verdict.ok and not no_gain(candidate.name, verdict.speedup):  # a hole: kept as a regression case
            folder = write_case(self.out / CASES, st.task, candidate, verdict, origin, record["policy"])
            record["case"] = folder.relative_to(self.out).as_posix()
        return record

    # -- the parts ---------------------------------------------------------------------------------------------
    def _audit(self, st: SuiteTask, done: dict) -> dict:
        record = self.base(st, "audit")
        kept = done.get(key(record))
        if kept is not None and not (self.reaudit and stale(kept)):
            return kept
        cfg = self.config.eval
        t0 = time.monotonic()
        try:
            with ProbeWorker(st.task, cfg.device, cfg.cache_path, cfg.timeout_s, cfg.confine,
                             cfg.memory_limit_gb) as probe:
                profile, found = audit_task(st.task, probe, record["policy"])
            record.update(profile=profile.to_dict(), findings=[f.to_dict() for f in found])
        except ProbeError as e:
            record.update(profile=None, findings=[Finding("reference_fails", str(e)[:1000]).to_dict()])
        # how long it took, and when it ended: on CUDA the next task's templates wait for it
        record.update(seconds=round(time.monotonic() - t0, 3), at=round(time.time(), 3), audit_version=AUDIT_VERSION)
        self.record(record)
        return record

    def _submit(self, sched, st: SuiteTask, template: Template, profile: Profile,
                done: dict) -> _Job | None:
        """Queue one template's candidate; a template that cannot apply here is journalled as skipped at once."""
        record = self.base(st, "template", template.name)
        if key(record) in done:
            return None
        record["hack"] = template.hack
        skip = "needs CUDA" if template.cuda and self.config.device_type != "cuda" else ""
        if not skip:
            try:
                candidate = Candidate.from_source(template.source(st.task, profile), name=template.name)
            except NotApplicable as e:
                skip = str(e)
        if skip:
            self.record(dict(record, status="skipped", message=skip))
            return None
        refused = static_refusal(candidate.source, st.task.source, record["policy"])
        if refused:  # the evaluator refuses it whatever it does when it runs: no worker needed to know that
            self.record(dict(record, status="rejected", message=refused, static=True, at=round(time.time(), 3)))
            return None
        return _Job(sched.submit(st.task, candidate), st, candidate, record, template.name)

    def _settle(self, jobs: list[_Job], keep: int) -> list[_Job]:
        """Wait until at most `keep` jobs are unjudged (or the time limit passed), journalling each verdict; the
        unjudged ones."""
        while jobs:
            finished = {id(j) for j in jobs if j.future.done()}
            for job in jobs:
                outcome = self._outcome(job) if id(job) in finished else None
                if outcome is not None:
                    self.record(outcome)
            jobs = [j for j in jobs if id(j) not in finished]
            if len(jobs) <= keep or self.config.late():
                return jobs
            left = None if self.config.deadline is None else max(0.1, self.config.deadline - time.monotonic())
            wait([j.future for j in jobs], timeout=left, return_when=FIRST_COMPLETED)
        return jobs

    def _meanwhile(self, future: Future, jobs: list[_Job]) -> list[_Job]:
        """Journal the jobs' verdicts as they come until `future` is done; the unjudged jobs."""
        while not future.done():
            wait([future] + [j.future for j in jobs], return_when=FIRST_COMPLETED)
            jobs = self._settle(jobs, keep=len(jobs))
        return jobs

    def _outcome(self, job: _Job) -> dict | None:
        """The job's finished record; None for a job cancelled (left for a later run)."""
        try:
            verdict = job.future.result()
        except CancelledError:
            return None
        except Exception as e:  # the evaluation could not run (the reference failed under the evaluator)
            return dict(job.record, status="error", message=f"{type(e).__name__}: {e}"[:1000])
        return self.judged(job.record, verdict, job.task, job.candidate, job.origin)
