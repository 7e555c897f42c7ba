"""Evaluator settings: typed defaults, overridable by CLI flags or a TOML file."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kernelrl.task import check_policy


def default_cache_dir() -> Path:
    """Where builds and baseline timings are cached (override with KERNELRL_CACHE)."""
    return Path(os.environ.get("KERNELRL_CACHE", Path.home() / ".cache" / "kernelrl"))


TIMING_BASES = ("device", "latency")


@dataclass(frozen=True)
class EvalConfig:
    device: str = "cpu"                  # "cpu", "cuda" or "cuda:N"
    timeout_s: float = 300.0             # whole evaluation of one candidate, build included
    build_timeout_s: float = 240.0       # candidate import + compilation
    correctness_trials: int = 5          # fresh secret-seeded input sets, beyond the agreement re-run
    warmup: int = 5                      # untimed calls before timing
    timing_rounds: int = 5               # reference/candidate alternations (drift cancels in the ratio)
    max_timing_rounds: int = 15          # more rounds while the speedup is less precise than below
    timing_precision: float = 0.004      # target relative standard error of the speedup (per-round ratios)
    latency_precision: float = 0.02      # ...of the eager latency speedup where graph replay gives the speedup,
    latency_rounds: int = 3              # ...after at least this many rounds (at most timing_rounds)
    graph_rounds: int = 3                # CUDA-graph replay: at least this many rounds (at most timing_rounds),
                                         # more while the speedup is less precise than timing_precision (where
                                         # that is 0, fixed rounds: timing_rounds of them)
    calls_per_round: int = 20            # timed calls per program per round
    round_us: float = 20000.0            # ...fewer once a call is known to be long: enough for this much timed
    min_calls_per_round: int = 3         # time per program and round, never fewer than this many calls
    input_sets: int = 4                  # rotated input sets during timing, outputs of each checked
    flush_l2: bool = True                # CUDA: overwrite L2 before every timed call
    use_graphs: bool = True              # CUDA: also time CUDA-graph replay when the candidate allows it
    early_first_call: bool = True        # CUDA: a candidate's first call in the CPU stage, beside untimed work
    timing_basis: str = "device"         # what `speedup` compares on CUDA: "device" (graph replay where both
                                         # programs capture, else per-call latency) or "latency" (always)
    compare_compile: bool = False        # also time torch.compile(reference)
    memory_limit_gb: float = 16.0        # host memory of one worker
    recheck_speedup: float = 3.0         # speedups above this are re-measured in a fresh worker
    cpu_threads: int = 1                 # CPU workers compute on this many threads (steady timings when shared)
    confine: bool = True                 # Landlock + network namespace where the OS allows
    cache_dir: str = ""                  # "" means default_cache_dir()
    policy: str = "strict"               # precision policy (POLICIES); a task's own setting takes precedence

    def __post_init__(self):
        if self.timing_basis not in TIMING_BASES:
            raise ValueError(f"timing_basis must be one of {TIMING_BASES}, not {self.timing_basis!r}")
        check_policy(self.policy)

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()

    def policy_for(self, meta) -> str:
        """The precision policy a task (its TaskMeta) is judged under: its own setting, else this config's."""
        return getattr(meta, "policy", None) or self.policy

    def with_(self, **kw) -> "EvalConfig":
        return replace(self, **kw)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalConfig":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown evaluator settings {sorted(unknown)}")
        return cls(**d)
