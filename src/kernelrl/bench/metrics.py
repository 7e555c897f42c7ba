"""fast_p and speedup statistics over a bench run's results: pure functions of (status, speedup) pairs.

fast_p is KernelBench's metric: the share of ALL tasks whose candidate is correct and more than p times
faster than the baseline (a missing or failed candidate counts in the denominator). fast_0 is the share
correct. Mean, median and geometric mean are over correct candidates with a measured speedup.

Where every sample of a task is judged (a group of candidates per task), fast_p over all results is over all
candidates; `best_of_samples` keeps each task's best candidate, for fast_p over tasks.

Under the kernelbench precision policy an output may pass only through KernelBench's absolute tolerance (within
atol of the reference, whatever its relative error); the evaluator marks such a verdict with an `absolute_slack`
warning, and `kernelbench_rule` counts the correct tasks with and without it.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from kernelrl.bench.result import TaskResult
from kernelrl.bench.suite import level_sort_key

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
ABSOLUTE_SLACK = "absolute_slack"  # the check of the evaluator's warning flag


def fast_p(results: Iterable[TaskResult], p: float) -> float:
    """Fraction of all tasks that are correct and faster than p x the baseline (0.0 for no tasks)."""
    rs = list(results)
    if not rs:
        return 0.0
    hits = sum(1 for r in rs if r.correct and (p == 0 or (r.speedup is not None and r.speedup > p)))
    return hits / len(rs)


def correct_speedups(results: Iterable[TaskResult]) -> list[float]:
    """Speedups of the correct candidates that have one."""
    return [r.speedup for r in results if r.correct and r.speedup is not None and r.speedup > 0]


def geomean(values: list[float]) -> float | None:
    """Geometric mean of positive values (None for none)."""
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


@dataclass(frozen=True)
class Summary:
    """Counts, fast_p (p -> fraction of total) and speedup statistics of a group of tasks."""

    total: int
    correct: int
    fast_p: dict[float, float]
    geomean_speedup: float | None
    mean_speedup: float | None
    median_speedup: float | None
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"total": self.total, "correct": self.correct,
                "fast_p": {_p_key(p): v for p, v in self.fast_p.items()},
                "geomean_speedup": self.geomean_speedup, "mean_speedup": self.mean_speedup,
                "median_speedup": self.median_speedup, "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, d: dict) -> "Summary":
        return cls(total=d["total"], correct=d["correct"], fast_p={float(k): v for k, v in d["fast_p"].items()},
                   geomean_speedup=d["geomean_speedup"], mean_speedup=d["mean_speedup"],
                   median_speedup=d["median_speedup"], counts=dict(d.get("counts", {})))


def summarize(results: Iterable[TaskResult], ps: Iterable[float] = FAST_P) -> Summary:
    """The Summary of a group of task results."""
    rs = list(results)
    speedups = correct_speedups(rs)
    return Summary(
        total=len(rs),
        correct=sum(1 for r in rs if r.correct),
        fast_p={float(p): fast_p(rs, p) for p in ps},
        geomean_speedup=geomean(speedups),
        mean_speedup=statistics.fmean(speedups) if speedups else None,
        median_speedup=statistics.median(speedups) if speedups else None,
        counts=dict(sorted(Counter(r.status for r in rs).items())),
    )


def best_of_samples(results: Iterable[TaskResult]) -> list[TaskResult]:
    """One result per task, in first-seen order: its fastest correct candidate, else its first result."""
    best: dict[str, TaskResult] = {}
    for r in results:
        kept = best.get(r.task)
        if kept is None or (r.correct and (not kept.correct or (r.speedup or 0.0) > (kept.speedup or 0.0))):
            best[r.task] = r
    return list(best.values())


def without_absolute_slack(r: TaskResult) -> bool:
    """Correct, and no output passed only through KernelBench's absolute tolerance."""
    return r.correct and not (r.verdict is not None and any(f.check == ABSOLUTE_SLACK for f in r.verdict.flags))


def input_independent(r: TaskResult) -> bool:
    """Whether the verdict found the task's output independent of its inputs (a constant program solves it)."""
    return r.verdict is not None and any(f.check == "task_property" for f in r.verdict.flags)


def kernelbench_rule(results: Iterable[TaskResult]) -> dict[str, int] | None:
    """Of the tasks judged under the kernelbench policy: how many, how many correct by KernelBench's rule and how
    many correct without its absolute slack; None when no task was judged under it."""
    rs = [r for r in results if (r.verdict.policy if r.verdict is not None else r.policy) == "kernelbench"]
    if not rs:
        return None
    return {"tasks": len(rs), "correct": sum(1 for r in rs if r.correct),
            "correct_without_absolute_slack": sum(1 for r in rs if without_absolute_slack(r))}


def kernelbench_rule_line(counts: dict[str, int], total: int) -> str:
    """'correct by KernelBench's rule 5, correct without absolute slack 3' (of how many tasks, when not all)."""
    of = "" if counts["tasks"] == total else f" (of the {counts['tasks']} tasks under the kernelbench policy)"
    return (f"correct by KernelBench's rule {counts['correct']}, correct without absolute slack "
            f"{counts['correct_without_absolute_slack']}{of}")


def best_of_samples_line(best: dict) -> str:
    """'best of each task's samples: 7 of 10 tasks correct, fast_0.5 0.60, ...' from a summary's
    `best_of_samples`."""
    s = Summary.from_dict(best)
    fast = ", ".join(f"fast_{p:g} {s.fast_p.get(p, 0.0):.2f}" for p in FAST_P if p)
    return f"best of each task's samples: {s.correct} of {s.total} tasks correct, {fast}"


def by_level(results: Iterable[TaskResult], ps: Iterable[float] = FAST_P) -> dict[str, Summary]:
    """One Summary per level (in level order), computed over that level's tasks only."""
    groups: dict[str, list[TaskResult]] = {}
    for r in results:
        groups.setdefault(r.level, []).append(r)
    ps = tuple(ps)
    return {lvl: summarize(groups[lvl], ps) for lvl in sorted(groups, key=level_sort_key)}


def _p_key(p: float) -> str:
    """JSON key of a threshold: '0', '0.5', '1', '1.5'."""
    return f"{p:g}"
