"""One job's records: a prepared candidate (`Prepared`), its phases' wall times, and how a job ends early."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


from kernelrl.sandbox.process import Worker
from kernelrl.task import Candidate, Task


class EvaluationError(RuntimeError):
    """The evaluation itself could not run (bad reference, unavailable device): not the candidate's fault."""


class Phases:
    """Wall seconds between marks, for the Verdict's `phases`."""

    def __init__(self):
        self.t = time.monotonic()
        self.seen: dict[str, float] = {}

    def mark(self, name: str):
        now = time.monotonic()
        self.seen[name] = round(self.seen.get(name, 0.0) + now - self.t, 3)
        self.t = now

    def done(self) -> dict:
        self.mark("finish")
        return dict(self.seen)

    def add(self, name: str, seconds: float):
        """Count `seconds` to `name` and go on from now: a job's share of work done for several jobs at once."""
        self.seen[name] = round(self.seen.get(name, 0.0) + seconds, 3)
        self.t = time.monotonic()

    def resume(self):
        """Go on from now: the time since the last mark went to other jobs."""
        self.t = time.monotonic()


class Aborted(Exception):
    def __init__(self, verdict_kw: dict):
        self.kw = verdict_kw


@dataclass(eq=False)
class Prepared:
    """A candidate after the CPU stage: its reference and candidate workers started, the candidate built and
    loaded (or its build failed, `aborted`); `Evaluator.judge` runs the GPU stage on it."""

    task: Task
    candidate: Candidate
    t0: float                                   # time.monotonic() when preparation started
    phases: Phases
    static: list = field(default_factory=list)  # static audit flags
    ref: Worker | None = None
    state: dict = field(default_factory=dict)   # the reference worker's state (probe results)
    cand: Worker | None = None
    slot: Path | None = None
    flags: list = field(default_factory=list)
    reported: dict = field(default_factory=dict)
    kept: bool = False                          # the build succeeded (cache it unless a flag rejects)
    aborted: object | None = None               # the Aborted that ended the CPU stage (build failed ...)
    ready: float = 0.0                          # time.monotonic() when preparation ended
    finished: bool = False                      # candidate worker closed, build kept or dropped
    released: bool = False                      # reference worker unpinned
    fresh: object | None = None                 # Future of a fresh loaded worker for the re-measurement
    reaped: object | None = None                # Future of the candidate worker's reaping after the GPU stage
    foreseen: bool = False                      # such a worker was started ahead (at most once a job)
    uncaptured: str = ""                        # whose CUDA-graph capture failed: "reference" or "candidate"
    left: object | None = None                  # the GPU stage's time limit (`Evaluator._left`)
    error: object | None = None                 # the correctness trials' error, once they passed
    first: dict | None = None                   # what the trials found that timing checks against
    job_state: dict = field(default_factory=dict)  # the evaluation's state while another job's is in (`_as`)
