"""Reward shaping: verdict outcomes -> scalar rewards. Pure functions, no I/O.

CUDA-L1's rule: a correct candidate's speedup r is normalised per task to (r − μ)/σ and clipped to
[−clip, clip]; anything that is not correct sits at the bottom, and a caught reward hack below every honest
failure, so the policy never gains by cheating.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

TRANSFORMS = ("speedup", "log2")
FAILURES = ("incorrect", "compile_error", "runtime_error", "timeout", "no_code")


@dataclass(frozen=True)
class Outcome:
    """What one rollout came to: its task, the verdict status (or 'no_code'), and the speedup when ok."""

    task: str
    status: str                     # a Verdict status, or "no_code" when the reply held no program
    speedup: float | None = None    # × over the reference; only for "ok"


@dataclass(frozen=True)
class RewardShaping:
    """How outcomes become rewards; `failure` and `rejected` must sit at or below −clip."""

    clip: float = 1.5
    transform: str = "speedup"      # "speedup" (CUDA-L1) or "log2" (2× up and 2× down weigh the same)
    sigma_floor: float = 0.05       # smallest σ used, in transformed units, so one sample cannot blow up
    normalise: bool = True          # False: reward = clip(transform(r) − transform(1)), no per-task stats
    failure: float = -1.5           # incorrect, compile_error, runtime_error, timeout, no code in the reply
    rejected: float = -2.0          # caught reward hack

    def __post_init__(self):
        if self.transform not in TRANSFORMS:
            raise ValueError(f"reward.transform = {self.transform!r}; one of {', '.join(TRANSFORMS)}")
        if self.clip <= 0:
            raise ValueError(f"reward.clip = {self.clip}; must be > 0")
        if self.failure > -self.clip:
            raise ValueError(f"reward.failure = {self.failure} is above −clip = {-self.clip}: a wrong program "
                             "would outscore a correct slow one; set failure <= −clip")
        if self.rejected > self.failure:
            raise ValueError(f"reward.rejected = {self.rejected} is above reward.failure = {self.failure}: a "
                             "caught hack must never beat an honest failure; set rejected <= failure")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RewardShaping":
        return cls(**d)


def transform(speedup: float, how: str) -> float:
    """The value normalised per task: the speedup itself, or its log2."""
    if how == "log2":
        return math.log2(max(speedup, 1e-9))
    return speedup


def task_stats(values: list[float], sigma_floor: float) -> tuple[float, float]:
    """Mean and standard deviation (floored at sigma_floor) of one task's transformed speedups."""
    if not values:
        return 0.0, sigma_floor
    mu = statistics.fmean(values)
    sigma = statistics.pstdev(values) if len(values) > 1 else 0.0
    return mu, max(sigma, sigma_floor)


def speedup_reward(speedup: float, mu: float, sigma: float, shaping: RewardShaping) -> float:
    """(transform(r) − μ)/σ clipped to [−clip, clip]."""
    z = (transform(speedup, shaping.transform) - mu) / sigma
    return max(-shaping.clip, min(shaping.clip, z))


def shape_rewards(outcomes: list[Outcome], population: dict[str, list[float]],
                  shaping: RewardShaping = RewardShaping()) -> list[float]:
    """One reward per outcome; μ, σ per task over `population` (that task's verified speedups, this batch's
    included, each distinct program once)."""
    stats = {task: task_stats([transform(s, shaping.transform) for s in population.get(task, ())],
                              shaping.sigma_floor)
             for task in {o.task for o in outcomes}}
    base = transform(1.0, shaping.transform)
    rewards = []
    for o in outcomes:
        if o.status == "ok" and o.speedup is not None:
            if shaping.normalise and population.get(o.task):
                mu, sigma = stats[o.task]
                rewards.append(speedup_reward(o.speedup, mu, sigma, shaping))
            else:  # no statistics: measure against the reference itself (speedup 1)
                value = transform(o.speedup, shaping.transform) - base
                rewards.append(max(-shaping.clip, min(shaping.clip, value)))
        elif o.status == "rejected":
            rewards.append(shaping.rejected)
        else:
            rewards.append(shaping.failure)
    return rewards


def binary_reward(outcome: Outcome) -> float:
    """Self-training's reward: 1 for a correct program, 0 for anything else."""
    return 1.0 if outcome.status == "ok" else 0.0
