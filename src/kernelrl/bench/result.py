"""TaskResult: what a bench run found for one task (its verdict, or why there is none), as plain data."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from kernelrl.verdict import STATUSES, Timing, Verdict

# Statuses beyond the evaluator's: no candidate file, a candidate file that is not one, a reference that
# does not run (the evaluation could not happen). None of them counts as solved.
BENCH_STATUSES = STATUSES + ("missing", "invalid", "reference_error")
BASELINES = ("eager", "compile")


@dataclass(frozen=True)
class TaskResult:
    """One task of a bench run. `speedup` is over the run's baseline and set only when status is 'ok'."""

    task: str            # relative path without .py, e.g. "level1/relu"
    level: str
    status: str
    speedup: float | None = None
    eager_speedup: float | None = None
    compile_speedup: float | None = None
    # Median per-call times (µs), all measured by `method`: "cuda_graph" (device time, replayed from CUDA graphs)
    # or per-call latency ("cuda_events", "perf_counter").
    reference_us: float | None = None           # eager reference
    reference_compiled_us: float | None = None  # torch.compile'd reference
    candidate_us: float | None = None
    method: str | None = None
    candidate: str | None = None                # candidate file path
    device: str = ""
    message: str = ""
    description: str = ""
    policy: str = ""                            # precision policy the task was judged under ("" in old results)
    sample: int | None = None                   # the candidate's sample, where every sample of a task is judged
    verdict: Verdict | None = None

    def __post_init__(self):
        if self.status not in BENCH_STATUSES:
            raise ValueError(f"unknown bench status {self.status!r}; one of {BENCH_STATUSES}")
        if self.status != "ok" and self.speedup is not None:
            raise ValueError("speedup is only set for status 'ok'")

    @property
    def correct(self) -> bool:
        return self.status == "ok"

    @property
    def id(self) -> str:
        """The task's name, with '#<sample>' where every sample is judged (as `SuiteTask.id`)."""
        return self.task if self.sample is None else f"{self.task}#{self.sample}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict.to_dict() if self.verdict is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TaskResult":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if d.get("verdict") is not None:
            d["verdict"] = Verdict.from_dict(d["verdict"])
        return cls(**d)


def from_verdict(task: str, level: str, verdict: Verdict, baseline: str, *, candidate: str | None = None,
                 reference: Timing | None = None, reference_compiled: Timing | None = None,
                 description: str = "") -> TaskResult:
    """A TaskResult from a Verdict, with the speedup over `baseline` ('eager' or 'compile').

    The compile speedup is the verdict's own when it measured torch.compile; otherwise it is derived as
    speedup x (compiled reference time / eager reference time), from separately timed references (a bench
    run's cached baselines), but only when all three were measured by the same method.
    """
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; one of {BASELINES}")
    ok = verdict.status == "ok"
    eager = verdict.speedup if ok else None
    compiled = verdict.compile_speedup if ok else None
    v_ref, v_cand, v_comp = verdict.timings
    method = verdict.speedup_method or (reference.method if reference else None)
    same = reference is not None and reference_compiled is not None and \
        reference.method == reference_compiled.method == method
    if ok and compiled is None and eager is not None and same and reference.median_us:
        compiled = eager * reference_compiled.median_us / reference.median_us
    if reference is None or reference.method != method:
        reference = v_ref
    if reference_compiled is None or reference_compiled.method != method:
        reference_compiled = v_comp
    return TaskResult(
        task=task, level=level, status=verdict.status,
        speedup=eager if baseline == "eager" else compiled,
        eager_speedup=eager, compile_speedup=compiled,
        reference_us=reference.median_us if reference else None,
        reference_compiled_us=reference_compiled.median_us if reference_compiled else None,
        candidate_us=v_cand.median_us if v_cand else None, method=method,
        candidate=candidate, device=verdict.device, message=verdict.message, description=description,
        policy=verdict.policy, verdict=verdict,
    )
