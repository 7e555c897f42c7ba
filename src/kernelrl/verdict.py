"""The Verdict: plain data saying whether a candidate is correct and how much faster it really is."""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, fields

STATUSES = ("ok", "incorrect", "compile_error", "runtime_error", "timeout", "rejected")


@dataclass(frozen=True)
class Flag:
    """Something a check noticed. `hack` names the reward-hacking class when there is one."""

    check: str
    message: str
    hack: str | None = None
    severity: str = "reject"  # "reject" fails the verdict; "warn" is evidence only

    @classmethod
    def from_dict(cls, d: dict) -> "Flag":
        return cls(**d)


@dataclass(frozen=True)
class Timing:
    """Per-call times of one program on one device, in microseconds."""

    median_us: float
    mean_us: float
    min_us: float
    max_us: float
    stdev_us: float
    n: int
    method: str  # "cuda_graph", "cuda_events", "perf_counter"
    # Host wall time of one call including a device-wide synchronisation (per-call latency), median.
    wall_median_us: float | None = None
    # The median of each timing round, in order: whether slow calls came alone or a whole round at a time.
    round_medians_us: tuple[float, ...] = ()

    @classmethod
    def from_samples(cls, samples_us: list[float], method: str,
                     wall_us: list[float] | None = None, rounds_us: list[float] | None = None) -> "Timing":
        if not samples_us:
            raise ValueError("no timing samples")
        return cls(
            median_us=statistics.median(samples_us),
            mean_us=statistics.fmean(samples_us),
            min_us=min(samples_us),
            max_us=max(samples_us),
            stdev_us=statistics.pstdev(samples_us) if len(samples_us) > 1 else 0.0,
            n=len(samples_us),
            method=method,
            wall_median_us=statistics.median(wall_us) if wall_us else None,
            round_medians_us=tuple(rounds_us or ()),
        )

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        d = _floats(d, ("median_us", "mean_us", "min_us", "max_us", "stdev_us"))
        return cls(**dict(d, round_medians_us=tuple(d.get("round_medians_us") or ())))


@dataclass(frozen=True)
class ErrorStats:
    """How far the candidate's outputs were from the reference's, worst over all trials."""

    max_abs: float
    max_rel: float
    rel_l2: float  # ||out - ref|| / ||ref||
    atol: float
    rtol: float
    trials: int
    mismatched: int = 0  # elements outside atol + rtol * |ref| in the worst trial

    @classmethod
    def from_dict(cls, d: dict) -> "ErrorStats":
        return cls(**_floats(d, ("max_abs", "max_rel", "rel_l2", "atol", "rtol")))


@dataclass(frozen=True)
class Verdict:
    """The evaluator's judgement of one candidate on one task and device."""

    status: str
    message: str = ""
    task: str = ""
    candidate: str = ""  # candidate digest
    device: str = "cpu"
    # reference time / candidate time, None unless ok. Measured as `speedup_method` says: "cuda_graph" (device
    # time: both programs captured in CUDA graphs and replayed) where both capture, else per-call latency
    # ("cuda_events" around one eager call started on an idle device, or "perf_counter" on the CPU).
    speedup: float | None = None
    speedup_stderr: float | None = None  # relative standard error of `speedup`, from its per-round ratios
    speedup_method: str | None = None
    latency_speedup: float | None = None  # per-call latency ratio (eager calls, the host's launch work included)
    reference: Timing | None = None  # per-call latency
    candidate_timing: Timing | None = None  # per-call latency
    compile_speedup: float | None = None  # over torch.compile of the reference, when asked; same method as speedup
    reference_compiled: Timing | None = None  # per-call latency
    graph_speedup: float | None = None  # both programs captured in CUDA graphs and replayed (device time)
    reference_graph: Timing | None = None
    candidate_graph: Timing | None = None
    reference_compiled_graph: Timing | None = None
    error: ErrorStats | None = None
    flags: tuple[Flag, ...] = ()
    confinement: dict = field(default_factory=dict)
    seconds: float = 0.0  # wall time of the evaluation's two stages (not the wait between them: phases.waited)
    phases: dict = field(default_factory=dict)  # seconds spent per phase (start, build, check, time, ...)
    policy: str = "strict"  # precision policy judged under ("strict" or "kernelbench"); absent in old JSON

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; one of {STATUSES}")
        if self.status != "ok" and self.speedup is not None:
            raise ValueError("speedup is only set for status 'ok'")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def timings(self) -> tuple[Timing | None, Timing | None, Timing | None]:
        """(reference, candidate, compiled reference) timings by the method `speedup` was measured with."""
        if self.speedup_method == "cuda_graph":
            return self.reference_graph, self.candidate_graph, self.reference_compiled_graph
        return self.reference, self.candidate_timing, self.reference_compiled

    @property
    def hacks(self) -> tuple[str, ...]:
        """The reward-hacking classes named by rejecting flags."""
        return tuple(f.hack for f in self.flags if f.hack and f.severity == "reject")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["flags"] = [asdict(f) for f in self.flags]
        return _finite(d)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        d = dict(d)
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        for key, typ in (("reference", Timing), ("candidate_timing", Timing), ("reference_compiled", Timing),
                         ("reference_graph", Timing), ("candidate_graph", Timing),
                         ("reference_compiled_graph", Timing), ("error", ErrorStats)):
            if d.get(key) is not None:
                d[key] = typ.from_dict(d[key])
        d["flags"] = tuple(Flag.from_dict(f) for f in d.get("flags", ()))
        for key in ("speedup", "speedup_stderr", "latency_speedup", "compile_speedup", "graph_speedup"):
            if isinstance(d.get(key), str):
                d[key] = float(d[key])
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "Verdict":
        return cls.from_dict(json.loads(text))


def _floats(d: dict, keys: tuple[str, ...]) -> dict:
    """Undo `_finite`: "inf"/"nan" strings back to floats for the named keys."""
    return {k: (float(v) if k in keys and isinstance(v, str) else v) for k, v in d.items()}


def _finite(obj):
    """JSON has no NaN/Inf: encode them as strings so the output stays strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
